package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/mcp"
)

// An await with a progressToken gets progress notifications with the phase and agent
// counts while the run goes on, and returns as soon as the run ends; hooks see its events.
func TestAwaitProgressAndWake(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ProgressEvery = 5 * time.Millisecond })
	var hookMu sync.Mutex
	var hooked []string
	e.srv.OnAwaitEvent(func(_ context.Context, runID string, ev event.Event) {
		hookMu.Lock()
		hooked = append(hooked, ev.Type)
		hookMu.Unlock()
	})
	progress := make(chan map[string]any, 100)
	e.c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			select {
			case progress <- n.Params.AdditionalFields:
			default:
			}
		}
	})
	var ex ExecuteResult
	ok(t, e.c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-e.held.started
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "workflow_await"
		req.Params.Arguments = map[string]any{"run_id": ex.RunID, "timeout_s": 3600}
		req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
		res, err := e.c.CallTool(context.Background(), req)
		done <- answer{res, err}
	}()
	p := <-progress
	if p["progressToken"] != "tok-1" || !strings.Contains(p["message"].(string), `phase 1 "wait"`) ||
		!strings.Contains(p["message"].(string), "agents 0 ok") {
		t.Errorf("progress: %v", p)
	}
	select {
	case a := <-done:
		t.Fatalf("await returned while the run was held: %v %v", a.res, a.err)
	default:
	}
	close(e.held.release)
	a := <-done
	if a.err != nil || a.res.IsError {
		t.Fatalf("await: %v %s", a.err, text(a.res))
	}
	b, _ := json.Marshal(a.res.StructuredContent)
	var v RunView
	_ = json.Unmarshal(b, &v)
	if v.Status != "completed" || v.Agents.OK != 1 {
		t.Errorf("after release: %+v", v)
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if len(hooked) == 0 || !strings.Contains(strings.Join(hooked, " "), "agent_done") {
		t.Errorf("hooks saw %v", hooked)
	}
}

// timeout_s 0 answers at once with the run still running, and says to call again.
func TestAwaitTimeout(t *testing.T) {
	e := newEnv(t)
	var ex ExecuteResult
	ok(t, e.c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-e.held.started
	var v RunView
	txt := ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 0}, &v)
	if v.Status != "running" || !strings.Contains(txt, "call workflow_await again") {
		t.Errorf("await with timeout 0: %+v %s", v, txt)
	}
	// The server's cap bounds a long timeout.
	e2 := newEnv(t, func(o *Options) { o.MaxAwait = time.Millisecond })
	ok(t, e2.c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-e2.held.started
	txt = ok(t, e2.c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 3600}, &v)
	if v.Status != "running" || !strings.Contains(txt, "still running after 1ms") {
		t.Errorf("capped await: %+v %s", v, txt)
	}
}

// A run that no process drives any more is interrupted: an await returns it at once
// unless the host resumes such runs (the daemon), where it waits for the resume.
func TestAwaitInterruptedRun(t *testing.T) {
	for _, resumes := range []bool{false, true} {
		e := newEnv(t, func(o *Options) { o.Resumes = resumes; o.MaxAwait = 20 * time.Millisecond })
		id := "01900000-0000-7000-8000-000000000001"
		if err := e.st.CreateRun(context.Background(), storage.Run{ID: id, Workflow: "gone.lua", Status: storage.StatusRunning,
			Attempt: 1, PID: 1 << 30, Spec: json.RawMessage(`{"path":"gone.lua"}`)}); err != nil {
			t.Fatal(err)
		}
		var v RunView
		txt := ok(t, e.c, "workflow_await", map[string]any{"run_id": id}, &v)
		if v.Status != "interrupted" {
			t.Errorf("resumes=%v: %+v %s", resumes, v, txt)
		}
	}
}

// Many short runs awaited one after the other, with and without hooks: whichever of the
// run's end and its event stream's end the await sees first, it answers.
func TestAwaitManyShortRuns(t *testing.T) {
	for _, withHook := range []bool{false, true} {
		e := newEnv(t)
		if withHook {
			e.srv.OnAwaitEvent(func(context.Context, string, event.Event) {})
		}
		for range 60 {
			var ex ExecuteResult
			ok(t, e.c, "workflow_execute", map[string]any{"script": helloScript}, &ex)
			var v RunView
			ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 30}, &v)
			if v.Status != "completed" {
				t.Fatalf("await: %+v", v)
			}
		}
	}
}

// A run whose process is gone lists as interrupted, not running.
func TestListInterrupted(t *testing.T) {
	e := newEnv(t)
	id := "01900000-0000-7000-8000-000000000002"
	if err := e.st.CreateRun(context.Background(), storage.Run{ID: id, Workflow: "gone.lua", Status: storage.StatusRunning,
		Attempt: 1, PID: 1 << 30, Spec: json.RawMessage(`{"path":"gone.lua"}`)}); err != nil {
		t.Fatal(err)
	}
	var ex ExecuteResult
	ok(t, e.c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-e.held.started
	for status, want := range map[string]string{"interrupted": id, "running": ex.RunID} {
		var page RunsPage
		ok(t, e.c, "workflow_list_runs", map[string]any{"status": status}, &page)
		if len(page.Runs) != 1 || page.Runs[0].RunID != want || page.Runs[0].Status != status {
			t.Errorf("%s runs: %+v", status, page.Runs)
		}
	}
}
