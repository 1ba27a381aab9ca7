package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

type setTools struct{ *tools.Set }

func (s setTools) Resolve(_ context.Context, names []string) ([]tools.Tool, error) {
	return s.Set.Resolve(names)
}

// noteBackend is the openai backend "fake" on the fake engine, whose agents asked for a
// "note" write n.txt with write_file, destructive under "ask", in the workspace ws.
func noteBackend(t *testing.T) (b adapters.Backend, ws string) {
	t.Helper()
	eng := testkit.NewEngine(testkit.Config{ToolRules: []testkit.ToolRule{
		{Match: "long note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"long.txt","content":"` + strings.Repeat("y", 600) + `"}`}}, Reply: "done"},
		{Match: "note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"n.txt","content":"x"}`}}, Reply: "done"},
	}})
	srv := httptest.NewServer(testkit.NewServer(eng).Handler())
	t.Cleanup(srv.Close)
	ws = t.TempDir()
	set, err := tools.New(tools.Config{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	b, err = adapters.NewOpenAI(adapters.OpenAIConfig{ID: "fake", BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m", Tools: setTools{set}, NoStream: true})
	if err != nil {
		t.Fatal(err)
	}
	return b, ws
}

// A hosted run whose agent asks for a destructive tool under "ask" waits with the call in
// GET /api/runs/{id}; POST /api/runs/{id}/approve answers it, and bad answers are refused.
func TestAPIApprove(t *testing.T) {
	b, _ := noteBackend(t)
	dir := t.TempDir()
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b), AskApprovals: true,
		CancelPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{StateDir: dir, Service: svc, Store: st, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	h := d.handler(false)
	code, body := call(t, h, "POST", "/api/runs", `{"script":"function main() report(agent{prompt='note', tools={'write_file'}}.output) end"}`)
	if code != http.StatusCreated {
		t.Fatalf("start: %d %s", code, body)
	}
	var started struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal([]byte(body), &started)
	// The question is journaled before its approval_requested event.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	evs, _, err := svc.Events(ctx, started.RunID, runtime.EventsOptions{Follow: true, Types: []string{event.ApprovalRequested}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := <-evs; !ok {
		t.Fatal("the run ended without asking for approval")
	}
	_, body = call(t, h, "GET", "/api/runs/"+started.RunID, "")
	var run RunJSON
	_ = json.Unmarshal([]byte(body), &run)
	if run.Status != "awaiting_approval" || len(run.Pending) != 1 || run.Pending[0].Tool != "write_file" ||
		!strings.Contains(run.Pending[0].Arguments, "n.txt") {
		t.Fatalf("run: %s", body)
	}
	path := "/api/runs/" + started.RunID + "/approve"
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{}`, 400, "allow is missing"},
		{`{"allow":"yes"}`, 400, "not an approval"},
		{`{"allow":true,"extra":1}`, 400, "unknown field"},
		{`{"approval_id":"ap-nope","allow":true}`, 404, run.Pending[0].ID},
		{`{"approval_id":"` + strings.Repeat("x", 100<<10) + `","allow":true}`, 400, "request body too large"},
		{strings.Repeat("[", 100<<10), 400, "not an approval"},
	} {
		if code, body := call(t, h, "POST", path, tc.body); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.body, code, body, tc.code, tc.want)
		}
	}
	if code, body := call(t, h, "POST", "/api/runs/nope/approve", `{"allow":true}`); code != 404 {
		t.Errorf("unknown run: %d %s", code, body)
	}
	if code, body := call(t, h, "POST", path, `{"approval_id":"`+run.Pending[0].ID+`","allow":true}`); code != 200 || !strings.Contains(body, `"allowed"`) {
		t.Fatalf("approve: %d %s", code, body)
	}
	if code, body := call(t, h, "POST", path, `{"approval_id":"`+run.Pending[0].ID+`","allow":false}`); code != 409 {
		t.Errorf("approve twice: %d %s", code, body)
	}
	final, err := svc.Wait(t.Context(), started.RunID)
	if err != nil || final.Status != storage.StatusCompleted || string(final.Report) != `"done"` {
		t.Fatalf("run ended %s %s %v", final.Status, final.Report, err)
	}
}

// The dashboard shows a run's waiting tool call with allow and decline; allow runs it.
func TestDashboardApproval(t *testing.T) {
	browser := testkit.NeedTool(t, "chromium", "apt-get install chromium")
	b, ws := noteBackend(t)
	addr, d, _ := serveDashboardWith(t, true, b)
	id := startRun(t, d, `function main() report(agent{backend = "fake", prompt = "long note", tools = {"write_file"}}.output) end`)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1200, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+addr+"/#token=t0ken")); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	ctx, stop := context.WithTimeout(ctx, 90*time.Second)
	defer stop()
	if err := chromedp.Do(ctx,
		chromedp.Navigate("http://"+addr+"/#/runs/"+id),
		until(`document.querySelector('#run-status').textContent === 'awaiting_approval'`),
		until(`!document.querySelector('#approvals').hidden && document.querySelector('#approvals-list').textContent.includes('long.txt')`),
		// The agent waits for a person, it does not run.
		until(`document.querySelector('#agents-body').textContent.includes('awaiting_approval')`),
	); err != nil {
		t.Fatalf("the waiting call in the dashboard: %v", err)
	}
	if rows := eval(ctx, t, `document.querySelector('#agents-body').textContent`); strings.Contains(rows, "running") {
		t.Errorf("agents while the tool call waits: %q, want awaiting_approval, not running", rows)
	}
	// On a phone the 600-character argument wraps: no sideways scrolling.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2))); err != nil {
		t.Fatal(err)
	}
	if ws, width := eval(ctx, t, `getComputedStyle(document.querySelector('#approvals-list pre')).whiteSpace`),
		eval(ctx, t, `String(document.documentElement.scrollWidth)`); ws != "pre-wrap" || width != "390" {
		t.Errorf("approval arguments on a phone: white-space %s, page width %s (want pre-wrap and no horizontal scroll at 390)", ws, width)
	}
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1200, 900),
		// Clicked in the page in one step: the list is redrawn as events arrive, so a
		// node looked up first and clicked after may be gone by then.
		until(`(() => { const b = document.querySelector('#approvals-list button[data-allow="true"]'); if (!b) return false; b.click(); return true; })()`),
		until(`document.querySelector('#run-status').textContent === 'completed'`),
		until(`document.querySelector('#approvals').hidden`),
	); err != nil {
		t.Fatalf("approve in the dashboard: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "long.txt")); err != nil || len(b) != 600 {
		t.Fatalf("long.txt after allow: %q %v", b, err)
	}
	// The latency shown is the agent's run_ms: the person's wait is named apart, if at all.
	evs, _, err := d.opts.Service.Events(context.Background(), id, runtime.EventsOptions{Types: []string{event.AgentDone}})
	if err != nil {
		t.Fatal(err)
	}
	var done event.Event
	for ev := range evs {
		done = ev
	}
	if err := chromedp.Do(ctx, until(`document.querySelector('#agents-body').textContent.includes(' ms')`)); err != nil {
		t.Fatal(err)
	}
	cell := eval(ctx, t, `document.querySelector('#agents-body td[data-l="latency"]').textContent`)
	if run := fmt.Sprint(done.Data["run_ms"]); run == "<nil>" || !strings.HasPrefix(cell, run+" ms") {
		t.Errorf("latency cell %q, agent_done %v: want its run_ms first", cell, done.Data)
	}
}
