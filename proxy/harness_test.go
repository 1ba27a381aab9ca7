package proxy

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// The real harnesses of the two other wires, from npm (internal/testkit/node), each
// pointed at the proxy with its own config, in front of the fake engine speaking that
// wire: Codex CLI (the Responses API) and Claude Code (Anthropic Messages). Each is
// given a task the engine answers with two tool calls of the harness's own shell tool,
// then text; meanwhile another caller's batch flood fills the lane's one slot. (Between
// interactive callers fair shares of tokens rank first: a harness whose turns carry
// 10,000-token prompts waits for a caller of small turns to catch up, by design.) The engine's
// log shows every turn of the harness, each going ahead of the flood still queued, and
// the proxy kept the harness's turns in one run, recognised by the ids it echoed.

// harnessFixture is the engine, a one-slot lane, and the proxy in front.
type harnessFixture struct {
	engine *testkit.Engine
	q      *queueWatch
	order  *admitOrder
	proxy  *Proxy
	url    string
}

// admitOrder counts admissions: for each turn of caller, how many other turns were
// admitted while it waited in luft.
type admitOrder struct {
	s        scheduler.Scheduler
	caller   string
	mu       sync.Mutex
	admitted int
	passed   []int // by the caller's turns, in order of admission
}

func (a *admitOrder) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	a.mu.Lock()
	before := a.admitted
	a.mu.Unlock()
	p, err := a.s.Admit(ctx, t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		if t.Caller == a.caller {
			a.passed = append(a.passed, a.admitted-before)
		}
		a.admitted++
	}
	return p, err
}

// shellTwice answers a task naming "twice" with two rounds of a call of the harness's
// shell tool (whichever of them it offers; lookup is the Agents SDK test's), then text.
var shellTwice = testkit.ToolRule{Match: "twice", Rounds: 2, FirstOffered: true, Calls: []testkit.ScriptedCall{
	{Name: "exec_command", Arguments: `{"cmd":"echo hi"}`},
	{Name: "shell", Arguments: `{"command":["bash","-lc","echo hi"]}`},
	{Name: "Bash", Arguments: `{"command":"echo hi"}`},
	{Name: "lookup", Arguments: `{"topic":"luft"}`},
}}

func newHarnessFixture(t *testing.T, family, caller string) *harnessFixture {
	t.Helper()
	e := testkit.NewEngine(testkit.Config{DecodePerToken: time.Millisecond, ToolRules: []testkit.ToolRule{shellTwice}})
	srv := testkit.NewServer(e)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	q := &queueWatch{s: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}}, nil),
		queued: make(chan string, 512)}
	order := &admitOrder{s: q, caller: caller}
	p, err := New(Options{Upstreams: []Upstream{{Name: "fake", Family: family, BaseURL: base}}, Scheduler: order})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	return &harnessFixture{engine: e, q: q, order: order, proxy: p, url: front.URL}
}

// The flood outlasts a harness's start and its three turns: floodTurns turns of
// floodTokens tokens at a millisecond each, one at a time.
const (
	floodTurns  = 120
	floodTokens = "40"
)

// flood queues n batch turns of caller "flood" on path (one goes upstream, the rest wait
// in luft) and returns their statuses to come.
func (f *harnessFixture) flood(t *testing.T, path, body string, n int, hdr map[string]string) []<-chan int {
	t.Helper()
	var all []<-chan int
	h := map[string]string{"x-luft-caller": "flood", "x-gateway-inference-fairness-id": "flood", "x-luft-class": "batch"}
	for k, v := range hdr {
		h[k] = v
	}
	for range n {
		all = append(all, postPathAsync(f.url+path, body, h))
	}
	waitQueued(t, f.q, n-1)
	return all
}

// check holds the engine's log and the proxy to the story: every request answered, the
// harness's turns (those not of the flood) on wire numbering want, each admitted at
// most one turn after it asked (the flood turn that held the slot ends, and it is next)
// though dozens of flood turns were queued before it, and all of them in one run.
func (f *harnessFixture) check(t *testing.T, wire testkit.Wire, want int) {
	t.Helper()
	var order []string
	n := 0
	for _, r := range f.engine.Log() {
		if r.Status != 200 {
			t.Fatalf("engine answered %d: %+v", r.Status, r)
		}
		if r.Caller == "flood" {
			order = append(order, "f")
			continue
		}
		if r.Wire != wire {
			t.Fatalf("a harness turn came on the %q wire, want %q: %+v", r.Wire, wire, r)
		}
		n++
		order = append(order, "A")
	}
	s := strings.Join(order, "")
	t.Logf("engine order (A harness, f flood): %s", s)
	if n != want {
		t.Fatalf("the engine saw %d harness turns, want %d", n, want)
	}
	f.proxy.runs.mu.Lock()
	var turns []int
	for _, r := range f.proxy.runs.byID {
		if r.caller == f.order.caller {
			turns = append(turns, r.turns)
		}
	}
	f.proxy.runs.mu.Unlock()
	if len(turns) != 1 || turns[0] != want {
		t.Fatalf("the harness's turns joined runs of %v turns: one run of %d expected", turns, want)
	}
	f.order.mu.Lock()
	passed := slices.Clone(f.order.passed)
	f.order.mu.Unlock()
	t.Logf("turns admitted while each harness turn waited: %v", passed)
	if len(passed) != want {
		t.Fatalf("%d harness turns admitted, want %d", len(passed), want)
	}
	for i, n := range passed {
		if n > 1 {
			t.Fatalf("harness turn %d waited while %d other turns were admitted: the flood went first", i+1, n)
		}
	}
	if rest := len(s) - strings.LastIndex(s, "A") - 1; rest < 10 {
		t.Fatalf("engine order %s: the harness finished only %d flood turns before the end", s, rest)
	}
}

// runHarness runs cmd in dir, failing the test with its output when it fails.
func runHarness(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Dir, c.Env, c.Stdin = cmd.Dir, cmd.Env, nil
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(cmd.Path), err, out)
	}
	return string(out)
}

// TestCodexThroughProxy: Codex CLI's `codex exec` with a model provider at the proxy
// (wire_api = "responses"), as docs/proxy.md configures it.
func TestCodexThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Codex CLI from internal/testkit/node")
	}
	codex := testkit.NodeFile(t, ".bin/codex")
	f := newHarnessFixture(t, FamilyOpenAI, "codex")
	home, work := t.TempDir(), t.TempDir()
	config := `check_for_update_on_startup = false
model_provider = "luft"
model = "gpt-5.5"

[model_providers.luft]
name = "luft"
base_url = "` + f.url + `/v1"
wire_api = "responses"
env_key = "LUFT_TEST_KEY"
http_headers = { "x-luft-caller" = "codex" }

[analytics]
enabled = false

[features]
plugins = false
apps = false
remote_plugin = false
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	all := f.flood(t, "/v1/chat/completions", `{"model":"gpt-5.5","messages":[{"role":"user","content":"flood job"}],"max_tokens":`+floodTokens+`}`, floodTurns, nil)
	cmd := exec.Command(codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
		"Run echo hi twice with your shell tool, then say done")
	cmd.Dir = work
	cmd.Env = append(harnessEnv(home), "CODEX_HOME="+home, "LUFT_TEST_KEY=sk-test")
	out := runHarness(t, cmd)
	waitAll(t, all)
	t.Logf("codex: %s", lastLines(out, 5))
	f.check(t, testkit.WireResponses, 3)
}

// TestClaudeCodeThroughProxy: Claude Code's `claude -p` with ANTHROPIC_BASE_URL at the
// proxy, as docs/proxy.md sets it.
func TestClaudeCodeThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Claude Code from internal/testkit/node")
	}
	claude := testkit.NodeFile(t, ".bin/claude")
	f := newHarnessFixture(t, FamilyAnthropic, "claude")
	home, work := t.TempDir(), t.TempDir()
	all := f.flood(t, "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":`+floodTokens+`,"messages":[{"role":"user","content":"flood job"}]}`, floodTurns,
		map[string]string{"anthropic-version": "2023-06-01", "x-api-key": "sk-flood"})
	cmd := exec.Command(claude, "-p", "--dangerously-skip-permissions", "--model", "claude-sonnet-4-5",
		"Run 'echo hi' twice with the Bash tool (two separate calls), then say done")
	cmd.Dir = work
	cmd.Env = append(harnessEnv(home), "ANTHROPIC_BASE_URL="+f.url, "ANTHROPIC_API_KEY=sk-ant-test",
		"ANTHROPIC_CUSTOM_HEADERS=x-luft-caller: claude", "IS_SANDBOX=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
	out := runHarness(t, cmd)
	waitAll(t, all)
	t.Logf("claude: %s", lastLines(out, 5))
	f.check(t, testkit.WireMessages, 3)
}

// harnessEnv is a clean environment for a harness: its own home, nothing of the
// developer's keys or config, PATH for the shell its tools run.
func harnessEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TERM=dumb", "NO_COLOR=1"}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestAgentsSDKThroughProxy: an agent of the OpenAI Agents SDK (@openai/agents) on its
// default Responses model, its client at the proxy, streamed and not.
func TestAgentsSDKThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Agents SDK from internal/testkit/node")
	}
	node := testkit.Node(t)
	testkit.NodeFile(t, "@openai/agents/package.json")
	for _, mode := range []string{"plain", "stream"} {
		t.Run(mode, func(t *testing.T) {
			f := newHarnessFixture(t, FamilyOpenAI, "agents")
			all := f.flood(t, "/v1/responses", `{"model":"gpt-5.5","input":"flood job","max_output_tokens":`+floodTokens+`}`, floodTurns, nil)
			cmd := exec.Command(node, "testdata/agents.mjs", f.url+"/v1", mode)
			cmd.Env = append(os.Environ(), "LUFT_NODE_DIR="+testkit.NodeDir())
			out := runHarness(t, cmd)
			waitAll(t, all)
			if !strings.Contains(out, `"toolCalls":2`) {
				t.Fatalf("the agent's tool ran other than twice: %s", out)
			}
			f.check(t, testkit.WireResponses, 3)
		})
	}
}
