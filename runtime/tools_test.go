package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
)

// setResolver offers a tools.Set to the openai backend.
type setResolver struct{ *tools.Set }

func (r setResolver) Resolve(_ context.Context, names []string) ([]tools.Tool, error) {
	return r.Set.Resolve(names)
}

// toolEngine is the fake OpenAI engine behind an HTTP server that can hold every request
// answering a tool result (the model's turn after a tool ran) until the client gives up.
type toolEngine struct {
	engine  *testkit.Engine
	url     string
	hold    sync.Once
	holding chan struct{} // closed when the first request is held
	mu      sync.Mutex
	holdOn  bool
}

func newToolEngine(t *testing.T, rules []testkit.ToolRule) *toolEngine {
	t.Helper()
	te := &toolEngine{engine: testkit.NewEngine(testkit.Config{KeepRequests: true, ToolRules: rules}), holding: make(chan struct{})}
	inner := testkit.NewServer(te.engine).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req testkit.ChatRequest
		te.mu.Lock()
		hold := te.holdOn
		te.mu.Unlock()
		if hold && json.Unmarshal(body, &req) == nil && len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool" {
			te.hold.Do(func() { close(te.holding) })
			<-r.Context().Done()
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	te.url = srv.URL + "/v1"
	return te
}

func (te *toolEngine) setHold(on bool) {
	te.mu.Lock()
	te.holdOn = on
	te.mu.Unlock()
}

// toolResults are the tool results the engine was sent, request by request.
func (te *toolEngine) toolResults() []string {
	var out []string
	for _, r := range te.engine.Log() {
		for _, m := range r.Messages {
			if m.Role == "tool" {
				out = append(out, string(m.Content))
			}
		}
	}
	return out
}

// toolBackend is the openai backend "fake" on the engine, with the built-in tools on the
// workspace ws (sh allowed, destructive tools allowed).
func toolBackend(t *testing.T, url, ws string) adapters.Backend {
	t.Helper()
	return toolBackendWith(t, url, tools.Config{Workspace: ws, AllowCommands: []string{"sh"}, Approval: tools.ApprovalAllow})
}

// toolBackendWith is the openai backend "fake" on the engine with the tools of cfg.
func toolBackendWith(t *testing.T, url string, cfg tools.Config) adapters.Backend {
	t.Helper()
	set, err := tools.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: "fake", BaseURL: url, APIKey: "k", Model: "m",
		Tools: setResolver{set}, NoStream: true})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A retried tool-using agent does not run its tools again: the engine's first turn of the
// second attempt asks for the same write_file, and luft answers it from the journal, so
// the model is told "created" both times (a second write would say "replaced").
func TestToolCallsRunOnceAcrossRetries(t *testing.T) {
	te := newToolEngine(t, []testkit.ToolRule{
		{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}}, Reply: "not json"},
		{Match: "did not match the required JSON schema", Reply: "still not json"},
	})
	dir, ws := t.TempDir(), t.TempDir()
	e := openResumeEnv(t, dir, toolBackend(t, te.url, ws), 0)
	path := writeScript(t, dir, "wf.lua", `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}, retries = 1,
    schema = {type = "object", properties = {n = {type = "integer"}}, required = {"n"}}}
  report(r.ok)
end`)
	r, err := e.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	res := waitRun(t, r)
	if res.Status != StatusCompleted {
		t.Fatalf("run %s %v", res.Status, res.Err)
	}
	evs := collect(t, r)
	done := ofType(evs, event.AgentDone)
	if res.Report != false || len(done) != 1 || done[0].Data["attempts"] != float64(2) {
		t.Fatalf("report %v, agent_done %v: want the call failed after 2 attempts", res.Report, done)
	}
	got := te.toolResults()
	if len(got) != 2 {
		t.Fatalf("the engine was sent %d tool results, want 2 (one per attempt): %q", len(got), got)
	}
	for i, g := range got {
		if g != "wrote 5 bytes to note.txt (created)" {
			t.Errorf("tool result %d: %q: write_file ran again", i+1, g)
		}
	}
	replays := 0
	for _, ev := range ofType(evs, event.AgentProgress) {
		if ev.Data["kind"] == "tool_result" && strings.Contains(ev.Data["text"].(string), "recorded result") {
			replays++
		}
	}
	if replays != 1 {
		t.Errorf("%d tool results replayed from the journal, want 1", replays)
	}
}

// A run stopped while its agent waits for the model's turn after a tool ran resumes
// without running the tool again: the command appends a line and counts the lines, and
// after the resume the file has one line and the model was told "1" every time.
func TestToolCallNotRepeatedOnResume(t *testing.T) {
	te := newToolEngine(t, []testkit.ToolRule{
		{Match: "count the lines", Calls: []testkit.ScriptedCall{{Name: "run_command",
			Arguments: `{"command":"sh","args":["-c","echo line >> log.txt; wc -l < log.txt"]}`}}, Reply: "counted"},
	})
	te.setHold(true)
	dir, ws := t.TempDir(), t.TempDir()
	e := openResumeEnv(t, dir, toolBackend(t, te.url, ws), 0)
	path := writeScript(t, dir, "wf.lua", `function main()
  report(agent{prompt = "count the lines", tools = {"run_command"}}.text)
end`)
	r, err := e.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-te.holding:
	case <-r.Done():
		t.Fatalf("the run ended before the turn after the tool: %s %v", r.Wait().Status, r.Wait().Err)
	}
	r.Cancel()
	if res := waitRun(t, r); res.Status != StatusCancelled {
		t.Fatalf("first attempt %s %v, want cancelled", res.Status, res.Err)
	}
	te.setHold(false)

	// Another process resumes the run.
	e2 := openResumeEnv(t, dir, toolBackend(t, te.url, ws), 0)
	r2 := resume(t, e2, ResumeSpec{Run: r.ID})
	if res := waitRun(t, r2); res.Status != StatusCompleted || res.Report != "counted" {
		t.Fatalf("resume %s %v %v", res.Status, res.Err, res.Report)
	}
	b, err := os.ReadFile(filepath.Join(ws, "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "line\n" {
		t.Fatalf("log.txt is %q after the resume: the command ran again", b)
	}
	for i, g := range te.toolResults() {
		if strings.TrimSpace(strings.TrimSuffix(g, "[exit 0]")) != "1" {
			t.Errorf("tool result %d: %q", i+1, g)
		}
	}
}

// blockingTool blocks its first call until the call's context ends, and counts calls.
type blockingTool struct {
	calls   atomic.Int32
	started chan struct{}
}

func (b *blockingTool) Spec() tools.Spec {
	return tools.Spec{Name: "deploy", Description: "deploys", Parameters: map[string]any{"type": "object"}}
}

func (b *blockingTool) Call(ctx context.Context, _ json.RawMessage) (string, error) {
	if b.calls.Add(1) == 1 {
		close(b.started)
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "deployed", nil
}

type oneTool struct{ t tools.Tool }

func (o oneTool) Resolve(context.Context, []string) ([]tools.Tool, error) {
	return []tools.Tool{o.t}, nil
}

// A tool call cut short (the run was stopped while it ran) is not run again on resume,
// since its effect may be partly done: the model is told it was interrupted.
func TestInterruptedToolCallIsNotRunAgain(t *testing.T) {
	te := newToolEngine(t, []testkit.ToolRule{
		{Match: "ship it", Calls: []testkit.ScriptedCall{{Name: "deploy", Arguments: `{}`}}, Reply: "shipped"},
	})
	tool := &blockingTool{started: make(chan struct{})}
	backend := func() adapters.Backend {
		b, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: "fake", BaseURL: te.url, APIKey: "k", Model: "m", Tools: oneTool{tool}, NoStream: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir := t.TempDir()
	e := openResumeEnv(t, dir, backend(), 0)
	path := writeScript(t, dir, "wf.lua", `function main() report(agent{prompt = "ship it", tools = {"deploy"}}.text) end`)
	r, err := e.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tool.started:
	case <-r.Done():
		t.Fatalf("the run ended before the tool ran: %s %v", r.Wait().Status, r.Wait().Err)
	}
	r.Cancel()
	if res := waitRun(t, r); res.Status != StatusCancelled {
		t.Fatalf("first attempt %s %v", res.Status, res.Err)
	}
	e2 := openResumeEnv(t, dir, backend(), 0)
	if res := waitRun(t, resume(t, e2, ResumeSpec{Run: r.ID})); res.Status != StatusCompleted || res.Report != "shipped" {
		t.Fatalf("resume %s %v %v", res.Status, res.Err, res.Report)
	}
	if n := tool.calls.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
	if got := te.toolResults(); len(got) != 1 || got[0] != interruptedTool {
		t.Fatalf("the model was told %q, want that the call was interrupted", got)
	}
}
