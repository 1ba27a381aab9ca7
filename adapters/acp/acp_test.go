package acp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit/acpfake"
)

// fakeBin is cmd/luft-fake-acp, built once for the package's tests.
var fakeBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "luft-fake-acp-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	fakeBin = filepath.Join(dir, "luft-fake-acp")
	if runtime.GOOS == "windows" {
		fakeBin += ".exe"
	}
	build := exec.Command("go", "build", "-o", fakeBin, "github.com/luft-run/luft/cmd/luft-fake-acp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building luft-fake-acp: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// callTimeout bounds every call in these tests; none should come near it.
const callTimeout = 60 * time.Second

// fixture is one test's workspace, fake-agent state directory and ground-truth log.
type fixture struct {
	t     *testing.T
	ws    string
	state string
	log   string
	env   []string
}

func newFixture(t *testing.T, env ...string) *fixture {
	t.Helper()
	f := &fixture{t: t, ws: t.TempDir(), state: t.TempDir()}
	f.log = filepath.Join(t.TempDir(), "fake.jsonl")
	f.env = append(os.Environ(), acpfake.EnvLog+"="+f.log, acpfake.EnvState+"="+f.state)
	f.env = append(f.env, env...)
	return f
}

func (f *fixture) backend(mod func(*Config)) *Backend {
	f.t.Helper()
	cfg := Config{ID: "acp:fake", Command: fakeBin, Env: f.env, Dir: f.ws, Approval: tools.ApprovalAsk}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fixture) entries() []acpfake.Entry {
	f.t.Helper()
	es, err := acpfake.ReadLog(f.log)
	if err != nil {
		f.t.Fatal(err)
	}
	return es
}

func (f *fixture) find(method string, match func(acpfake.Entry) bool) []acpfake.Entry {
	var out []acpfake.Entry
	for _, e := range f.entries() {
		if e.Method == method && (match == nil || match(e)) {
			out = append(out, e)
		}
	}
	return out
}

// recorder collects progress updates.
type recorder struct {
	mu  sync.Mutex
	ups []adapters.Update
}

func (r *recorder) progress(u adapters.Update) {
	r.mu.Lock()
	r.ups = append(r.ups, u)
	r.mu.Unlock()
}

func (r *recorder) text(kind string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, u := range r.ups {
		if u.Kind == kind {
			b.WriteString(u.Text)
			b.WriteString("|")
		}
	}
	return b.String()
}

func run(t *testing.T, b *Backend, req agent.Request, call adapters.Call) (agent.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return b.Run(ctx, req, call)
}

func TestPlainPrompt(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	var rec recorder
	res, err := run(t, b, agent.Request{System: "be brief", Prompt: "hello fake agent"}, adapters.Call{Progress: rec.progress})
	if err != nil {
		t.Fatal(err)
	}
	if want := "echo: be brief hello fake agent"; res.Text != want || res.Output != want {
		t.Errorf("text %q output %v, want %q", res.Text, res.Output, want)
	}
	if res.Status != agent.StatusOK || res.Backend != "acp:fake" || res.Model != "fake-small" || res.Attempts != 1 {
		t.Errorf("result %+v", res)
	}
	if !strings.HasPrefix(res.SessionID, "fake-") {
		t.Errorf("session id %q", res.SessionID)
	}
	if res.Usage.Input == 0 || res.Usage.Output != adapters.EstimateTokens(res.Text) {
		t.Errorf("usage %+v: want estimates from the text", res.Usage)
	}
	if got := strings.ReplaceAll(rec.text("text"), "|", ""); got != res.Text {
		t.Errorf("streamed text %q, want %q", got, res.Text)
	}
	if !strings.Contains(rec.text("text"), "echo:|") {
		t.Errorf("text arrived in one piece, want chunks: %q", rec.text("text"))
	}
	if rec.text("thought") != "reading the prompt|" {
		t.Errorf("thoughts %q", rec.text("thought"))
	}

	inits := f.find("initialize", nil)
	if len(inits) != 1 || inits[0].Detail != "protocol=1 read=true write=true terminal=false" {
		t.Errorf("initialize entries %+v", inits)
	}
	news := f.find("session/new", nil)
	if len(news) != 1 || news[0].Session != res.SessionID || news[0].Detail != "cwd="+f.ws {
		t.Errorf("session/new entries %+v (workspace %s)", news, f.ws)
	}
	prompts := f.find("session/prompt", nil)
	if len(prompts) != 1 || prompts[0].Prompt != "be brief\nhello fake agent" {
		t.Errorf("prompt entries %+v", prompts)
	}
	if pidGone(inits[0].PID) != nil {
		t.Errorf("agent process %d still there after Run returned", inits[0].PID)
	}
}

func TestConcurrentCalls(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	res := make([]agent.Result, n)
	for i := range n {
		wg.Go(func() {
			res[i], errs[i] = run(t, b, agent.Request{Prompt: fmt.Sprintf("call %d", i)}, adapters.Call{})
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if want := fmt.Sprintf("echo: call %d", i); res[i].Text != want {
			t.Errorf("call %d: text %q, want %q", i, res[i].Text, want)
		}
		seen[res[i].SessionID] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct sessions, want %d", len(seen), n)
	}
}

func TestOneTurnPerCall(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name    string
		command string
		prompt  string
		wantErr bool
	}{
		{"ok", fakeBin, "hello", false},
		{"edits", fakeBin, "EDIT a.txt\nRUN go test\nFETCH https://example.com", true},
		{"not found", filepath.Join(t.TempDir(), "missing-agent"), "hello", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := f.backend(func(c *Config) { c.Command = tc.command; c.AllowEdits = true })
			var turns int
			var cost adapters.TurnCost
			call := adapters.Call{Turn: func(ctx context.Context, c adapters.TurnCost, send func(context.Context) adapters.TurnReport) error {
				turns++
				cost = c
				return send(ctx).Err
			}}
			_, err := run(t, b, agent.Request{Prompt: tc.prompt, MaxTokens: 77}, call)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %t", err, tc.wantErr)
			}
			if turns != 1 {
				t.Errorf("call.Do used %d times, want once", turns)
			}
			if cost.Input != adapters.EstimateTokens(tc.prompt) || cost.MaxOutput != 77 {
				t.Errorf("turn cost %+v", cost)
			}
		})
	}
}

func TestResumeInNewProcess(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	first, err := run(t, b, agent.Request{Prompt: "first question"}, adapters.Call{})
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	second, err := run(t, b, agent.Request{Prompt: "second question", SessionID: first.SessionID}, adapters.Call{Progress: rec.progress})
	if err != nil {
		t.Fatal(err)
	}
	if second.SessionID != first.SessionID {
		t.Errorf("resumed session id %q, want %q", second.SessionID, first.SessionID)
	}
	// The replayed history (first question and its echo) is not part of the reply.
	if want := fmt.Sprintf("(turn 2 of session %s) echo: second question", first.SessionID); second.Text != want {
		t.Errorf("resumed text %q, want %q", second.Text, want)
	}
	if strings.Contains(rec.text("text"), "first") {
		t.Errorf("replayed history reported as progress: %q", rec.text("text"))
	}
	loads := f.find("session/load", nil)
	news := f.find("session/new", nil)
	if len(loads) != 1 || loads[0].Session != first.SessionID || loads[0].Turn != 1 || len(news) != 1 {
		t.Fatalf("load entries %+v, new entries %+v", loads, news)
	}
	if loads[0].PID == news[0].PID {
		t.Errorf("the session was resumed by the same process %d", loads[0].PID)
	}
}

func TestResumeUnsupported(t *testing.T) {
	f := newFixture(t)
	f.env = append(f.env, acpfake.EnvState+"=") // the last value wins: no state, no loadSession
	b := f.backend(nil)
	_, err := run(t, b, agent.Request{Prompt: "again", SessionID: "fake-0123"}, adapters.Call{})
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "cannot resume sessions") || !strings.Contains(err.Error(), "fake-0123") {
		t.Fatalf("err = %v, want a clear cannot-resume error", err)
	}
}

func TestModelSelection(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	res, err := run(t, b, agent.Request{Prompt: "hi", Model: "fake-large"}, adapters.Call{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != "fake-large" {
		t.Errorf("model %q", res.Model)
	}
	if sets := f.find("session/set_model", nil); len(sets) != 1 || sets[0].Model != "fake-large" || sets[0].Session != res.SessionID {
		t.Errorf("set_model entries %+v", sets)
	}
	if p := f.find("session/prompt", nil); len(p) != 1 || p[0].Model != "fake-large" {
		t.Errorf("prompt ran on %+v", p)
	}

	byDefault := f.backend(func(c *Config) { c.Model = "fake-large" })
	if res, err := run(t, byDefault, agent.Request{Prompt: "hi"}, adapters.Call{}); err != nil || res.Model != "fake-large" {
		t.Errorf("configured default model: %q, %v", res.Model, err)
	}

	_, err = run(t, b, agent.Request{Prompt: "hi", Model: "gpt-9"}, adapters.Call{})
	if err == nil || !strings.Contains(err.Error(), `no model "gpt-9"`) || !strings.Contains(err.Error(), "fake-small, fake-large") {
		t.Errorf("unknown model: err = %v", err)
	}

	none := newFixture(t, acpfake.EnvModels+"=none")
	nb := none.backend(nil)
	if res, err := run(t, nb, agent.Request{Prompt: "hi"}, adapters.Call{}); err != nil || res.Model != "" {
		t.Errorf("no model asked, none offered: %q, %v", res.Model, err)
	}
	_, err = run(t, nb, agent.Request{Prompt: "hi", Model: "fake-large"}, adapters.Call{})
	if err == nil || !strings.Contains(err.Error(), "offers no model selection") {
		t.Errorf("model asked, none offered: err = %v", err)
	}
	if len(none.find("session/prompt", nil)) != 1 {
		t.Errorf("a prompt ran on an unselectable model")
	}
}

func TestPermissions(t *testing.T) {
	outside := t.TempDir()
	type want struct {
		outcome string // the permission outcome the fake logged ("" none)
		file    string // a file, relative to the workspace (or absolute), that must exist with EditContent
		nofile  string // a file that must not exist
		text    string // in the reply
		approve bool   // the call fails with *tools.ApprovalError
	}
	for _, tc := range []struct {
		name   string
		cfg    func(*Config)
		prompt string
		want   want
	}{
		{"edit inside with allow_edits", func(c *Config) { c.AllowEdits = true }, "EDIT notes.txt",
			want{outcome: "allow_once", file: "notes.txt", text: "edit notes.txt: written"}},
		{"edit in a new folder under approval allow", func(c *Config) { c.Approval = tools.ApprovalAllow }, "EDIT sub/dir/n.txt",
			want{outcome: "allow_once", file: "sub/dir/n.txt", text: "written"}},
		{"edit outside the workspace", func(c *Config) { c.AllowEdits = true; c.Approval = tools.ApprovalAllow }, "EDIT " + filepath.Join(outside, "x.txt"),
			want{outcome: "reject_once", nofile: filepath.Join(outside, "x.txt"), text: "rejected"}},
		{"edit climbing out", func(c *Config) { c.AllowEdits = true }, "EDIT ../escape.txt",
			want{outcome: "reject_once", text: "rejected"}},
		{"edit through a symlink out", func(c *Config) { c.AllowEdits = true }, "EDIT link/x.txt",
			want{outcome: "reject_once", nofile: filepath.Join(outside, "x.txt"), text: "rejected"}},
		{"deny wins over allow_edits", func(c *Config) { c.AllowEdits = true; c.Approval = tools.ApprovalDeny }, "EDIT notes.txt",
			want{outcome: "reject_once", nofile: "notes.txt", text: "rejected"}},
		{"edit under ask", nil, "EDIT notes.txt",
			want{outcome: "reject_once", nofile: "notes.txt", approve: true}},
		{"run an allowed command", func(c *Config) { c.AllowCommands = []string{"go test", "ls"} }, "RUN go test ./...",
			want{outcome: "allow_once", text: "run go test ./...: allowed"}},
		{"run another command", func(c *Config) { c.AllowCommands = []string{"go test"} }, "RUN rm -rf /",
			want{outcome: "reject_once", text: "rejected"}},
		{"run a chained command", func(c *Config) { c.AllowCommands = []string{"go test"} }, "RUN go test ./... && rm -rf /",
			want{outcome: "reject_once", text: "rejected"}},
		{"run matches whole words", func(c *Config) { c.AllowCommands = []string{"go"} }, "RUN gofmt -w .",
			want{outcome: "reject_once", text: "rejected"}},
		{"run under approval allow needs the allow-list", func(c *Config) { c.Approval = tools.ApprovalAllow }, "RUN make",
			want{outcome: "reject_once", text: "rejected"}},
		{"deny wins over allow_commands", func(c *Config) { c.AllowCommands = []string{"ls"}; c.Approval = tools.ApprovalDeny }, "RUN ls",
			want{outcome: "reject_once", text: "rejected"}},
		{"fetch under allow", func(c *Config) { c.Approval = tools.ApprovalAllow }, "FETCH https://example.com",
			want{outcome: "allow_once", text: "fetch https://example.com: allowed"}},
		{"fetch under deny", func(c *Config) { c.Approval = tools.ApprovalDeny }, "FETCH https://example.com",
			want{outcome: "reject_once", text: "rejected"}},
		{"fetch under ask", nil, "FETCH https://example.com",
			want{outcome: "reject_once", approve: true}},
		{"fetch under the zero policy", func(c *Config) { c.Approval = "" }, "FETCH https://example.com",
			want{outcome: "reject_once", approve: true}},
		{"write without asking, edits allowed", func(c *Config) { c.AllowEdits = true }, "WRITE w.txt",
			want{file: "w.txt", text: "write w.txt: written"}},
		{"write without asking under deny", func(c *Config) { c.Approval = tools.ApprovalDeny }, "WRITE w.txt",
			want{nofile: "w.txt", text: "write w.txt: error"}},
		{"write without asking under ask", nil, "WRITE w.txt",
			want{nofile: "w.txt", approve: true}},
		{"write git's config, edits allowed", func(c *Config) { c.AllowEdits = true }, "WRITE .git/config",
			want{nofile: ".git/config", text: "write .git/config: error"}},
		{"plant a luft.toml deeper, edits allowed", func(c *Config) { c.AllowEdits = true }, "WRITE pkg/luft.toml",
			want{nofile: "pkg/luft.toml", text: "write pkg/luft.toml: error"}},
		{"read inside", nil, "READ seed.txt",
			want{text: "read seed.txt: seed"}},
		{"read outside", nil, "READ " + filepath.Join(outside, "secret.txt"),
			want{text: "error"}},
		{"read through a symlink out", nil, "READ link/secret.txt",
			want{text: "read link/secret.txt: error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if err := os.WriteFile(filepath.Join(f.ws, "seed.txt"), []byte("seed"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("secret"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(f.ws, "link")); err != nil {
				t.Skip("no symlinks here:", err)
			}
			b := f.backend(tc.cfg)
			var rec recorder
			res, err := run(t, b, agent.Request{Prompt: tc.prompt}, adapters.Call{Progress: rec.progress})
			var ae *tools.ApprovalError
			switch {
			case tc.want.approve:
				if !errors.As(err, &ae) {
					t.Fatalf("err = %v, want an *tools.ApprovalError", err)
				}
			case err != nil:
				t.Fatal(err)
			case !strings.Contains(res.Text, tc.want.text):
				t.Errorf("text %q, want it to contain %q", res.Text, tc.want.text)
			}
			perms := f.find("session/request_permission", nil)
			if tc.want.outcome == "" {
				if len(perms) != 0 {
					t.Errorf("permission asked: %+v", perms)
				}
			} else if len(perms) != 1 || perms[0].Outcome != tc.want.outcome &&
				// Under ask the client cancels the prompt at once, which may reach the
				// agent before the refusal does.
				!(tc.want.approve && strings.Contains(perms[0].Outcome, "cancelled")) {
				t.Errorf("permission entries %+v, want one with outcome %s", perms, tc.want.outcome)
			}
			abs := func(p string) string {
				if filepath.IsAbs(p) {
					return p
				}
				return filepath.Join(f.ws, p)
			}
			if tc.want.file != "" {
				b, err := os.ReadFile(abs(tc.want.file))
				if err != nil || string(b) != acpfake.EditContent {
					t.Errorf("%s: %q, %v", tc.want.file, b, err)
				}
				if !strings.Contains(rec.text("edit"), filepath.ToSlash(tc.want.file)) {
					t.Errorf("edit progress %q", rec.text("edit"))
				}
			}
			if tc.want.nofile != "" {
				if _, err := os.Stat(abs(tc.want.nofile)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s was written", tc.want.nofile)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "x.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file outside the workspace was written")
	}
}

func TestStructuredOutput(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	schema := map[string]any{
		"type":       "object",
		"properties": map[string]any{"ok": map[string]any{"type": "boolean"}, "turn": map[string]any{"type": "integer"}},
		"required":   []any{"ok"},
	}
	res, err := run(t, b, agent.Request{Prompt: "report status", Schema: schema}, adapters.Call{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"ok": true, "session": res.SessionID, "turn": float64(1), "model": "fake-small"}
	if !reflect.DeepEqual(res.Output, want) {
		t.Errorf("output %#v, want %#v", res.Output, want)
	}
	if !strings.Contains(res.Text, "```json") {
		t.Errorf("text %q", res.Text)
	}
	p := f.find("session/prompt", nil)
	if len(p) != 1 || !strings.Contains(p[0].Prompt, "JSON Schema:\n{") || !strings.Contains(p[0].Prompt, `"required":["ok"]`) {
		t.Errorf("the prompt did not carry the schema: %+v", p)
	}
}

func TestCancel(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hanging := make(chan struct{})
	var once sync.Once
	call := adapters.Call{Progress: func(u adapters.Update) {
		if u.Kind == "text" && strings.Contains(u.Text, "hanging") {
			once.Do(func() { close(hanging) })
		}
	}}
	type outcome struct {
		res agent.Result
		err error
		at  time.Time
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.Run(ctx, agent.Request{Prompt: "HANG"}, call)
		done <- outcome{res, err, time.Now()}
	}()
	select {
	case <-hanging:
	case o := <-done:
		t.Fatalf("Run returned before hanging: %v", o.err)
	case <-time.After(callTimeout):
		t.Fatal("the agent never started hanging")
	}
	cancelled := time.Now()
	cancel()
	var o outcome
	select {
	case o = <-done:
	case <-time.After(callTimeout):
		t.Fatal("Run did not return after cancel")
	}
	if !errors.Is(o.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", o.err)
	}
	if d := o.at.Sub(cancelled); d > cancelGrace {
		t.Errorf("Run took %s to return after cancel", d)
	}
	news := f.find("session/new", nil)
	if len(news) != 1 {
		t.Fatalf("session/new entries %+v", news)
	}
	sid := news[0].Session
	if c := f.find("session/cancel", func(e acpfake.Entry) bool { return e.Session == sid }); len(c) != 1 {
		t.Errorf("session/cancel entries %+v", c)
	}
	if p := f.find("session/prompt", func(e acpfake.Entry) bool { return e.Outcome == "cancelled" }); len(p) != 1 {
		t.Errorf("the prompt did not end as cancelled: %+v", f.entries())
	}
	if err := pidGone(news[0].PID); err != nil {
		t.Error(err)
	}
}

func TestIdleTimeout(t *testing.T) {
	f := newFixture(t)
	b := f.backend(func(c *Config) { c.IdleTimeout = 700 * time.Millisecond })
	res, err := run(t, b, agent.Request{Prompt: "HANG"}, adapters.Call{})
	t.Log(err)
	if !errors.Is(err, ErrIdleTimeout) || !strings.Contains(err.Error(), "700ms") {
		t.Fatalf("err = %v, want an idle timeout naming 700ms", err)
	}
	if res.Status != agent.StatusTimedOut || !strings.HasPrefix(res.SessionID, "fake-") {
		t.Errorf("result %+v", res)
	}
	if c := f.find("session/cancel", nil); len(c) != 1 {
		t.Errorf("session/cancel entries %+v", f.entries())
	}
	if inits := f.find("initialize", nil); len(inits) != 1 || pidGone(inits[0].PID) != nil {
		t.Errorf("agent process not reaped: %+v", inits)
	}
}

func TestCommandNotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cfg, ok := Builtin("acp:claude")
	if !ok {
		t.Fatal("acp:claude is not built in")
	}
	cfg.Dir = t.TempDir()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = run(t, b, agent.Request{Prompt: "hi"}, adapters.Call{})
	t.Log(err)
	for _, want := range []string{`"acp:claude"`, `"claude-code-acp"`, "not found", "npm i -g @zed-industries/claude-code-acp"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %s", err, want)
		}
	}
}

func TestAgentCrash(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	_, err := run(t, b, agent.Request{Prompt: "CRASH"}, adapters.Call{})
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "crashing on purpose") ||
		!strings.Contains(err.Error(), "session/prompt") {
		t.Fatalf("err = %v, want the prompt failure with exit status and stderr", err)
	}
}

func TestBuiltin(t *testing.T) {
	for _, tc := range []struct {
		name, id, command string
		args              []string
	}{
		{"acp:claude", "acp:claude", "claude-code-acp", nil},
		{"claude", "acp:claude", "claude-code-acp", nil},
		{"acp:codex", "acp:codex", "codex-acp", nil},
		{"acp:opencode", "acp:opencode", "opencode", []string{"acp"}},
		{"acp:gemini", "acp:gemini", "gemini", []string{"--acp"}},
	} {
		c, ok := Builtin(tc.name)
		if !ok || c.ID != tc.id || c.Command != tc.command || !slices.Equal(c.Args, tc.args) || c.Install == "" {
			t.Errorf("Builtin(%q) = %+v, %t", tc.name, c, ok)
		}
	}
	if _, ok := Builtin("acp:nope"); ok {
		t.Error("Builtin(acp:nope) found something")
	}
	c, _ := Builtin("acp:opencode")
	c.Args[0] = "changed"
	if again, _ := Builtin("acp:opencode"); again.Args[0] != "acp" {
		t.Error("Builtin hands out shared argument slices")
	}
}

func TestNewRejects(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ID: "acp:x", Dir: dir}, "no command"},
		{Config{Command: "x", Dir: dir, Approval: "maybe"}, "approval"},
		{Config{Command: "x", Dir: dir, IdleTimeout: -time.Second}, "negative"},
		{Config{Command: "x", Dir: dir, AllowCommands: []string{"ls", " "}}, "allow_commands has an empty entry"},
		{Config{Command: "x", Dir: filepath.Join(dir, "missing")}, "workspace"},
		{Config{Command: "x", Dir: file}, "not a directory"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	b, err := New(Config{Command: "/opt/agents/my-agent", Dir: dir})
	if err != nil || b.ID() != "acp:my-agent" || b.cfg.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("defaults: %+v, %v", b, err)
	}
}

// pidGone reports an error when a process with this pid still exists.
func pidGone(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil
	}
	if err := p.Signal(syscall.Signal(0)); err != nil {
		return nil
	}
	return fmt.Errorf("process %d is still running", pid)
}

// codex-acp passes Codex's "Model metadata … not found" warning on as reply text with no
// break after it; the reply must not start with it glued to the answer, and the notice
// is reported apart.
func TestAgentNoticeIsNotGluedOntoTheReply(t *testing.T) {
	f := newFixture(t)
	b := f.backend(nil)
	var rec recorder
	notice := "Model metadata for `gpt-5.1-codex` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."
	res, err := run(t, b, agent.Request{Prompt: "NOTICE " + notice + "\nhello"}, adapters.Call{Progress: rec.progress})
	if err != nil {
		t.Fatal(err)
	}
	// The fake's answer echoes the prompt word by word; the notice before it is gone.
	if want := "echo: " + strings.Join(strings.Fields("NOTICE "+notice+"\nhello"), " "); res.Text != want {
		t.Errorf("reply %q\nwant    %q: the answer alone, without the agent's notice", res.Text, want)
	}
	if got := rec.text("notice"); got != notice+"|" {
		t.Errorf("notices reported %q, want %q", got, notice+"|")
	}
}
