package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
)

// luft talks to an OpenAI-compatible endpoint configured in luft.toml or through
// OPENAI_BASE_URL: here the test kit's fake engine on a loopback port.
func TestOpenAIBackendEndToEnd(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{Replicas: 1, Slots: 2, DefaultMaxTokens: 8})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"wf.lua": `function main()
  local a = agent{prompt = "say something"}
  local b = agent{prompt = "give a record", schema = {type = "object", properties = {n = {type = "integer"}}, required = {"n"}}}
  report({text = a.text ~= "", backend = a.backend, model = a.model, n = type(b.output.n), tokens = a.tokens > 0})
end`,
		"luft.toml": localBackend(url, "fake-1", "api_key_env = \"FAKE_KEY\"\nmax_concurrency = 2\n"),
	})
	for name, tc := range map[string]struct {
		env     []string
		args    []string
		backend string
	}{
		"config file": {env: []string{"FAKE_KEY=k"}, args: []string{"run", "-q", "-w", "wf.lua"}, backend: "local"},
		"environment": {env: []string{"OPENAI_BASE_URL=" + url, "LUFT_MODEL=fake-2"}, args: []string{"--config", "none.toml", "run", "-q", "-w", "wf.lua", "--backend", "openai"}, backend: "openai"},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "environment" {
				writeFiles(t, dir, map[string]string{"none.toml": ""})
			}
			before := len(engine.Log())
			out := mustLuft(t, dir, tc.env, append([]string{"--state-dir", filepath.Join(dir, "state")}, tc.args...)...)
			for _, want := range []string{`"backend": "` + tc.backend + `"`, `"n": "number"`, `"text": true`, `"tokens": true`} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %s:\n%s", want, out)
				}
			}
			if got := len(engine.Log()) - before; got != 2 {
				t.Errorf("the engine saw %d requests, want 2", got)
			}
		})
	}
}

// `luft backend check` probes an endpoint live: reachable, its model listed, the rate
// limits it reports (read from a one-token completion, since /models carries none).
func TestBackendCheck(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{Models: []string{"fake-1"}, Limits: testkit.Limits{RPM: 600, TPM: 60000}})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"luft.toml": localBackend(url, "fake-1", fmt.Sprintf(`[backends.wrong]
type = "openai"
base_url = %q
model = "no-such-model"
[backends.down]
type = "openai"
base_url = "http://127.0.0.1:1/v1"
model = "m"
`, url))})
	// run returns what luft printed, stdout then stderr, and its exit code.
	run := func(args ...string) (string, int) {
		out, errOut, code := luftIn(t, dir, []string{"OPENAI_API_KEY=", "OPENAI_BASE_URL="}, args...)
		return out + errOut, code
	}
	out, code := run("backend", "check", "local")
	for _, want := range []string{"reachable    yes", "fake-1: listed", "x-ratelimit-limit-requests: 600", "x-ratelimit-limit-tokens: 60000", "one-token completion"} {
		if !strings.Contains(out, want) || code != 0 {
			t.Errorf("check local (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	if n := len(engine.Log()); n != 1 {
		t.Errorf("the probe sent %d completions, want 1", n)
	}
	if out, code := run("backend", "check", "wrong"); code != 1 || !strings.Contains(out, "no-such-model: NOT listed (the endpoint lists: fake-1)") {
		t.Errorf("check wrong: exit %d\n%s", code, out)
	}
	if out, code := run("backend", "check", "down"); code != 1 || !strings.Contains(out, "reachable    no: ") {
		t.Errorf("check down: exit %d\n%s", code, out)
	}
	// An endpoint that refuses the key is reachable but not usable.
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
	}))
	t.Cleanup(denied.Close)
	writeFiles(t, dir, map[string]string{
		"denied.toml": fmt.Sprintf("[backends.locked]\ntype = \"openai\"\nbase_url = %q\nmodel = \"m\"\n", denied.URL+"/v1"),
		"wf.lua":      `function main() report(agent{prompt = "hi"}.ok) end`,
	})
	if out, code := run("--config", "denied.toml", "backend", "check", "locked"); code != 1 || !strings.Contains(out, "refused      the endpoint refused the API key (HTTP 401") {
		t.Errorf("check with a refused key: exit %d\n%s", code, out)
	}
	// A run's summary shows what the scheduler learned of the lane's limits.
	out, code = run("--state-dir", filepath.Join(dir, "st"), "run", "-w", "wf.lua")
	if code != 0 || !regexp.MustCompile(`(?m)^ +lane local/fake-1 · 0 running · tokens [0-9.]+k/60\.0k left · requests \d+/600 left$`).MatchString(out) {
		t.Errorf("run summary (exit %d) lacks the lane's learned limits:\n%s", code, out)
	}
	out, code = run("backend", "list", "--json")
	if code != 0 || !strings.Contains(out, `"id": "local"`) || !strings.Contains(out, `"default": true`) || !strings.Contains(out, `"base_url": "`+url+`"`) {
		t.Errorf("list --json: exit %d\n%s", code, out)
	}
}

// A backend with replicas spreads a run's turns over them: the scheduler picks the
// replica, the openai backend sends there (the engine's log says which one served).
func TestReplicaRouting(t *testing.T) {
	engine, srv, _ := startEngine(t, testkit.Config{Replicas: 2, Slots: 1, DefaultMaxTokens: 4, DecodePerToken: 5 * time.Millisecond})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(srv.ReplicaURL(0), "fake-1", fmt.Sprintf("replicas = [%q]\nmax_concurrency = 1\n", srv.ReplicaURL(1))),
		"wf.lua": `function main()
  local r = parallel({1, 2, 3, 4, 5, 6, 7, 8}, function(i) return agent{prompt = "item " .. i}.ok end)
  report(#r)
end`,
	})
	mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "-q", "-w", "wf.lua")
	served := map[int]int{}
	for _, r := range engine.Log() {
		served[r.Replica]++
	}
	if served[0] == 0 || served[1] == 0 || served[0]+served[1] != 8 {
		t.Fatalf("replicas served %v, want all 8 turns spread over both", served)
	}
}

// An agent with tools, end to end: the model (the fake engine's script) asks for
// read_file; luft runs it inside the workspace and sends the file back; an escape from
// the workspace comes back to the model as an error, not file contents; a destructive
// tool under the "ask" policy fails the call with a message saying what to configure.
func TestToolUsingAgent(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "summarise the notes", Calls: []testkit.ScriptedCall{{Name: "read_file", Arguments: `{"path":"notes.txt"}`}}, Reply: "the notes are read"},
		{Match: "peek outside", Calls: []testkit.ScriptedCall{{Name: "read_file", Arguments: `{"path":"../secret.txt"}`}}, Reply: "could not"},
		{Match: "write it down", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"out.txt","content":"x"}`}}, Reply: "written"},
	}})
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	writeFiles(t, dir, map[string]string{
		"ws/notes.txt": "NOTE: ship on friday", "secret.txt": "TOP SECRET",
		"luft.toml": localBackend(url, "fake-1", fmt.Sprintf("[tools]\nworkspace = %q\n", ws)),
		"wf.lua": `function main()
  local a = agent{prompt = "summarise the notes", tools = {"read_file"}}
  local b = agent{prompt = "peek outside", tools = {"read_file", "list_dir"}}
  report({a = a.text, b = b.text})
end`,
		"write.lua": `function main()
  local r = agent{prompt = "write it down", tools = {"write_file"}}
  assert(r.ok, r.error) -- a failed call returns ok=false; this script stops on it
  report(r.text)
end`,
	})
	run := func(script string) (string, string, int) {
		return luftIn(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "-q", "-w", script)
	}
	out, errOut, code := run("wf.lua")
	if code != 0 || !strings.Contains(out, `"a": "the notes are read"`) {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	toolResults := map[string]string{}
	for _, r := range engine.Log() {
		last := r.Messages[len(r.Messages)-1]
		for _, m := range r.Messages {
			if m.Role == "user" && last.Role == "tool" {
				toolResults[string(m.Content)] = string(last.Content)
				break
			}
		}
	}
	if got := toolResults["summarise the notes"]; got != "NOTE: ship on friday" {
		t.Errorf("the engine got %q as the read_file result", got)
	}
	if got := toolResults["peek outside"]; !strings.HasPrefix(got, "error: ") || !strings.Contains(got, "outside the workspace") || strings.Contains(got, "SECRET") {
		t.Errorf("the workspace escape gave the model %q", got)
	}
	// File writes are destructive by default: with no terminal to ask on, the call fails
	// saying what to configure.
	_, errOut, code = run("write.lua")
	for _, want := range []string{"tool write_file is destructive and needs approval", "changes files in the workspace",
		`set [tools] approval = "allow" in luft.toml`} {
		if code != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("ask policy: exit %d, want %q in\n%s", code, want, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "out.txt")); !os.IsNotExist(err) {
		t.Fatal("the destructive tool ran without approval")
	}

	// "deny" refuses the write and tells the model, which goes on; "allow" writes without asking.
	lastResult := func(prompt string) string {
		var got string
		for _, r := range engine.Log() {
			last := r.Messages[len(r.Messages)-1]
			if last.Role == "tool" && slices.ContainsFunc(r.Messages, func(m testkit.Message) bool {
				return m.Role == "user" && string(m.Content) == prompt
			}) {
				got = string(last.Content)
			}
		}
		return got
	}
	for _, policy := range []string{"deny", "allow"} {
		writeFiles(t, dir, map[string]string{"luft.toml": localBackend(url, "fake-1",
			fmt.Sprintf("[tools]\nworkspace = %q\napproval = %q\n", ws, policy))})
		out, errOut, code = run("write.lua")
		if code != 0 || strings.TrimSpace(out) != "written" {
			t.Fatalf("%s policy: exit %d\nstdout %s\nstderr %s", policy, code, out, errOut)
		}
		_, statErr := os.Stat(filepath.Join(ws, "out.txt"))
		got := lastResult("write it down")
		if policy == "deny" && (statErr == nil || !strings.Contains(got, "refused by policy")) {
			t.Fatalf("deny: file written = %v, tool result %q", statErr == nil, got)
		}
		if policy == "allow" && (statErr != nil || !strings.Contains(got, "created")) {
			t.Fatalf("allow: file %v, tool result %q", statErr, got)
		}
	}
}

// A 429 that slips through (another client used the key's quota) is honoured: the
// scheduler waits the server's retry-after and sends the turn again; a 5xx is retried
// after a backoff. Both end to end: luft over loopback HTTP, the engine's log as truth.
func TestRateLimitAndServerErrorsEndToEnd(t *testing.T) {
	engine := testkit.NewEngine(testkit.Config{DefaultMaxTokens: 4,
		Limits: testkit.Limits{RPM: 2, Period: 4 * time.Second, Window: testkit.Fixed}})
	var sent atomic.Int32
	inner := testkit.NewServer(engine).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// luft's second request (the one after the 429's wait) fails with a 500 before it
		// reaches the engine.
		if r.URL.Path == "/v1/chat/completions" && r.Header.Get("X-Test-Direct") == "" && sent.Add(1) == 2 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"error":{"message":"upstream hiccup","type":"server_error"}}`)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// Another client spends the window's two requests.
	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("X-Test-Direct", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("direct request: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(srv.URL+"/v1", "m", ""),
		"wf.lua":    `function main() report(agent{prompt = "hello"}.ok) end`,
	})
	events := mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "--json", "-w", "wf.lua")
	var statuses []int
	var at []time.Time
	var retryAfter time.Duration
	for _, r := range engine.Log()[2:] {
		statuses = append(statuses, r.Status)
		at = append(at, r.Arrival)
		if r.Status == 429 {
			retryAfter = r.RetryAfter
		}
	}
	// The 429, then (the 500 never reached the engine) the success.
	if fmt.Sprint(statuses) != "[429 200]" {
		t.Fatalf("the engine saw %v after the direct requests, want [429 200]", statuses)
	}
	if gap := at[1].Sub(at[0]); retryAfter <= 0 || gap < retryAfter-50*time.Millisecond {
		t.Fatalf("the retry came %v after the 429, whose retry-after was %v", gap, retryAfter)
	}
	if strings.Count(events, `"type":"agent_retry"`) != 2 || !strings.Contains(events, `"status":"completed"`) {
		t.Fatalf("want two agent_retry events (the 500, the 429) and a completed run:\n%s", events)
	}
}

// Structured output end to end: the model's first answer does not match the schema, luft
// re-prompts in the same conversation (schema_retry), the second answer does; replies
// stream (agent_progress events, streamed requests in the engine's log).
func TestSchemaRetryAndStreamingEndToEnd(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "rate the change", Reply: `{"score": "high"}`},
	}})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(url, "m", ""),
		"wf.lua": `function main()
  local r = agent{prompt = "rate the change", schema = {type = "object", properties = {score = {type = "integer"}}, required = {"score"}}}
  report({score_type = type(r.output.score)})
end`,
	})
	events := mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "--json", "-w", "wf.lua")
	if n := strings.Count(events, `"type":"schema_retry"`); n != 1 || !strings.Contains(events, `"status":"completed"`) {
		t.Fatalf("want one schema_retry and a completed run, got %d:\n%s", n, events)
	}
	if !strings.Contains(events, `"score_type":"number"`) {
		t.Errorf("the report is not the validated output:\n%s", events)
	}
	if !strings.Contains(events, `"type":"agent_progress"`) {
		t.Errorf("no agent_progress events from the streamed replies:\n%s", events)
	}
	log := engine.Log()
	if len(log) != 2 || !log[0].Stream || !log[1].Stream {
		t.Fatalf("engine log: %d requests (streamed: %v)", len(log), len(log) > 0 && log[0].Stream)
	}
	var second []string
	for _, m := range log[1].Messages {
		second = append(second, m.Role+":"+string(m.Content))
	}
	got := strings.Join(second, "|")
	if !strings.HasPrefix(got, `user:rate the change|assistant:{"score": "high"}|user:Your previous reply did not match the required JSON schema:`) {
		t.Fatalf("the re-prompt continued no conversation: %q", got)
	}
}

// startEngine serves the test kit's fake OpenAI engine on a loopback port for the test's
// life and returns it, its server and its base URL.
func startEngine(t *testing.T, cfg testkit.Config) (*testkit.Engine, *testkit.Server, string) {
	t.Helper()
	engine := testkit.NewEngine(cfg)
	srv := testkit.NewServer(engine)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return engine, srv, url
}

// localBackend is a luft.toml whose default backend "local" is the OpenAI-compatible
// endpoint at url with model, followed by more.
func localBackend(url, model, more string) string {
	return fmt.Sprintf("default_backend = \"local\"\n[backends.local]\ntype = \"openai\"\nbase_url = %q\nmodel = %q\n", url, model) + more
}

// writeFiles writes files (paths relative to dir) into dir, making folders as needed.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// luftIn runs luft with args in dir, env added to the test's environment (see testEnv),
// and returns its stdout, its stderr and its exit code.
func luftIn(t *testing.T, dir string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(luftBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = testEnv(nil, env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) {
			t.Fatalf("luft %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
		}
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// mustLuft is luftIn for a run that must exit 0; it returns the stdout.
func mustLuft(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	out, errOut, code := luftIn(t, dir, env, args...)
	if code != 0 {
		t.Fatalf("luft %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}
