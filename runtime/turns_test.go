package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// toolLoop is a backend whose call takes a number of model turns, as a tool-using agent
// does; "turns=N" in the prompt sets N. It keeps a transcript per session the way the
// openai backend does, and records the transcript each call was handed.
type toolLoop struct {
	fail   string // a prompt that fails
	mu     sync.Mutex
	handed map[string][]agent.Message // prompt → Call.Transcript
}

func (b *toolLoop) ID() string { return "fake" }

func (b *toolLoop) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	b.mu.Lock()
	if b.handed == nil {
		b.handed = map[string][]agent.Message{}
	}
	b.handed[req.Prompt] = call.Transcript
	b.mu.Unlock()
	if req.Prompt == b.fail {
		return agent.Result{Status: agent.StatusError, Error: "scripted failure"}, nil
	}
	n := 1
	fmt.Sscanf(req.Prompt[strings.Index(req.Prompt, "turns=")+len("turns="):], "%d", &n)
	var usage agent.Usage
	for i := 0; i < n; i++ {
		err := call.Do(ctx, adapters.TurnCost{Input: 10 * (i + 1), MaxOutput: 5}, func(context.Context) adapters.TurnReport {
			u := agent.Usage{Input: 10 * (i + 1), Output: 5}
			usage = usage.Add(u)
			return adapters.TurnReport{Usage: u}
		})
		if err != nil {
			return agent.Result{Usage: usage}, err
		}
	}
	session := req.SessionID
	if session == "" {
		session = "s-" + req.Prompt[:3]
	}
	text := fmt.Sprintf("answer after %d turns", n)
	tr := append(append([]agent.Message(nil), call.Transcript...), agent.Message{Role: "user", Content: req.Prompt}, agent.Message{Role: "assistant", Content: text})
	return agent.Result{Status: agent.StatusOK, Text: text, Output: text, Usage: usage, SessionID: session, Transcript: tr}, nil
}

// Every model turn of a call passes the scheduler, every turn after the first is a
// continuation ranked by the call's first admission, and all are one conversation
// (DESIGN decision 3).
func TestEveryTurnAdmitted(t *testing.T) {
	dir := t.TempDir()
	e := openResumeEnv(t, dir, &toolLoop{}, 0)
	rec := &recordingScheduler{}
	e.svc.opts.Scheduler = rec
	if err := os.WriteFile(filepath.Join(dir, "wf.lua"), []byte(`function main()
  local r = agent{prompt = "one turns=3"}
  report(r.tokens)
end`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := e.svc.Start(t.Context(), Spec{Path: filepath.Join(dir, "wf.lua")})
	if err != nil {
		t.Fatal(err)
	}
	res := waitRun(t, r)
	if res.Status != StatusCompleted || fmt.Sprint(res.Report) != "75" {
		t.Fatalf("%s %v report %v", res.Status, res.Err, res.Report)
	}
	if len(rec.turns) != 3 {
		t.Fatalf("%d turns admitted, want 3", len(rec.turns))
	}
	for i, tr := range rec.turns {
		if tr.CallKey != "main/1" || tr.Continuation != (i > 0) || tr.EstTokens != 10*(i+1)+5 ||
			tr.CallStart.IsZero() != (i == 0) || !tr.CallStart.Equal(rec.turns[len(rec.turns)-1].CallStart) && i > 0 ||
			tr.Conversation != rec.turns[0].Conversation {
			t.Errorf("turn %d: %+v", i, tr)
		}
	}
}

// session_id hands the backend the transcript the session's last call returned, from a
// live call of this attempt or from the journal of an earlier one.
func TestSessionTranscriptSurvivesResume(t *testing.T) {
	dir := t.TempDir()
	b := &toolLoop{fail: "third"}
	e := openResumeEnv(t, dir, b, 0)
	path := filepath.Join(dir, "wf.lua")
	if err := os.WriteFile(path, []byte(`function main()
  local a = agent{prompt = "first"}
  local b = agent{prompt = "second", session_id = a.session_id}
  local c = agent{prompt = "third", session_id = b.session_id}
  if not c.ok then error(c.error) end
  report(c.text)
end`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := e.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if res := waitRun(t, r); res.Status != StatusFailed {
		t.Fatalf("first attempt %s %v", res.Status, res.Err)
	}
	if got := b.handed["second"]; len(got) != 2 || got[0].Content != "first" {
		t.Fatalf("second call was handed %+v", got)
	}
	// Another process resumes: "first" and "second" replay from the journal; "third" gets
	// the transcript "second" returned, read from the journal.
	b2 := &toolLoop{}
	e2 := openResumeEnv(t, dir, b2, 0)
	r2 := resume(t, e2, ResumeSpec{Run: r.ID})
	if res := waitRun(t, r2); res.Status != StatusCompleted {
		t.Fatalf("resume %s %v", res.Status, res.Err)
	}
	if _, ran := b2.handed["first"]; ran || len(b2.handed) != 1 {
		t.Fatalf("replayed calls ran again: %v", b2.handed)
	}
	var got []string
	for _, m := range b2.handed["third"] {
		got = append(got, m.Role+":"+m.Content)
	}
	want := "user:first|assistant:answer after 1 turns|user:second|assistant:answer after 1 turns"
	if strings.Join(got, "|") != want {
		t.Fatalf("third call was handed %q\nwant %q", strings.Join(got, "|"), want)
	}
}

// chatty streams its reply in pieces and reports a tool call between them.
type chatty struct{}

func (chatty) ID() string { return "fake" }

func (chatty) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	err := call.Do(ctx, adapters.TurnCost{Input: 1}, func(context.Context) adapters.TurnReport {
		for _, p := range []string{"Hel", "lo\nwor", "ld"} {
			call.Report(adapters.Update{Kind: "text", Text: p})
		}
		call.Report(adapters.Update{Kind: "tool_call", Text: "read_file a.go"})
		call.Report(adapters.Update{Kind: "text", Text: "tail"})
		return adapters.TurnReport{}
	})
	return agent.Result{Status: agent.StatusOK, Text: "Hello\nworld", Output: "x"}, err
}

// Streamed text becomes agent_progress events line by line, other updates one each, and
// what is left when the call ends is not lost.
func TestProgressEvents(t *testing.T) {
	e := newEngine(t, chatty{})
	r := start(t, e, `function main() agent{prompt = "p"} end`)
	if res := r.Wait(); res.Status != StatusCompleted {
		t.Fatal(res.Err)
	}
	var got []string
	for _, ev := range ofType(collect(t, r), "agent_progress") {
		got = append(got, fmt.Sprint(ev.Data["kind"], ":", ev.Data["text"]))
	}
	want := "text:Hello\nwor|text:ld|tool_call:read_file a.go|text:tail"
	if strings.Join(got, "|") != want {
		t.Fatalf("progress events %q\nwant %q", strings.Join(got, "|"), want)
	}
}

// routingScheduler admits every turn on a fixed replica of a fixed lane.
type routingScheduler struct {
	lane    string
	replica int
}

type routedPermit struct {
	lane    string
	replica int
}

func (routedPermit) Done(scheduler.Outcome) {}
func (p routedPermit) Lane() string         { return p.lane }
func (p routedPermit) Replica() int         { return p.replica }

func (s routingScheduler) Admit(context.Context, scheduler.Turn) (scheduler.Permit, error) {
	return routedPermit(s), nil
}

// routeRecorder records the route each send carried.
type routeRecorder struct {
	id     string
	mu     sync.Mutex
	routes []adapters.Route
}

func (b *routeRecorder) ID() string { return b.id }

func (b *routeRecorder) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	err := call.Do(ctx, adapters.TurnCost{Input: 1}, func(ctx context.Context) adapters.TurnReport {
		b.mu.Lock()
		b.routes = append(b.routes, adapters.RouteOf(ctx))
		b.mu.Unlock()
		return adapters.TurnReport{}
	})
	return agent.Result{Status: agent.StatusOK, Text: "ok", Output: "ok"}, err
}

// The replica and the fallback lane the scheduler picked reach the backend's send.
func TestSendCarriesTheRoute(t *testing.T) {
	for _, tc := range []struct {
		lane         string
		wantFallback bool
	}{
		{"main/m", false},
		{"spare/s", true},
	} {
		main, spare := &routeRecorder{id: "main"}, &routeRecorder{id: "spare"}
		st, err := storage.Open(t.Context(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		svc, err := New(Options{Store: st, StateDir: t.TempDir(), Backends: adapters.NewRegistry("main", main, spare),
			Scheduler: routingScheduler{lane: tc.lane, replica: 2}})
		if err != nil {
			t.Fatal(err)
		}
		r := start(t, svc, `function main() agent{prompt = "p", model = "m"} end`)
		if res := r.Wait(); res.Status != StatusCompleted {
			t.Fatal(res.Err)
		}
		if len(main.routes) != 1 || main.routes[0].Replica != 2 || (main.routes[0].Fallback == spare) != tc.wantFallback {
			t.Fatalf("lane %s: routes %+v", tc.lane, main.routes)
		}
		// The planner's call goes where the scheduler placed it too.
		if _, err := svc.Complete(t.Context(), "plan/1", agent.Request{Prompt: "p", Model: "m"}); err != nil {
			t.Fatal(err)
		}
		if len(main.routes) != 2 || main.routes[1].Replica != 2 || (main.routes[1].Fallback == spare) != tc.wantFallback {
			t.Fatalf("lane %s: planner call's route %+v", tc.lane, main.routes[1:])
		}
	}
}

// A call that names no model runs on its backend's default model's lane, the lane the
// configuration describes (with its fallback), not on a lane of its own.
func TestLaneOfUsesTheDefaultModel(t *testing.T) {
	mock := adapters.NewMock(adapters.MockConfig{})
	for _, tc := range []struct {
		req  agent.Request
		b    adapters.Backend
		want string
	}{
		{agent.Request{Backend: "mock"}, mock, "mock/" + adapters.MockModel},
		{agent.Request{Backend: "mock", Model: "other"}, mock, "mock/other"},
		{agent.Request{Backend: "fake"}, &toolLoop{}, "fake/"}, // no default model known
	} {
		if got := laneOf(tc.req, tc.b); got != tc.want {
			t.Errorf("laneOf(%+v) = %q, want %q", tc.req, got, tc.want)
		}
	}
}

// A resumed run's viewers can start at its latest attempt: Events with Attempt, and
// Run.SubscribeAttempt for the process driving it. The earlier attempt's run_done is not
// in either stream.
func TestEventsFromAnAttempt(t *testing.T) {
	dir, _, _, r := failedFirstAttempt(t)
	e2 := openResumeEnv(t, dir, &toolLoop{}, 0)
	r2 := resume(t, e2, ResumeSpec{Run: r.ID})
	var live []event.Event
	for ev := range r2.SubscribeAttempt(t.Context()) {
		live = append(live, ev)
	}
	if res := r2.Wait(); res.Status != StatusCompleted {
		t.Fatalf("resume %s: %v", res.Status, res.Err)
	}
	stored, errc, err := e2.svc.Events(t.Context(), r.ID, EventsOptions{Attempt: 2})
	if err != nil {
		t.Fatal(err)
	}
	var fromStore []event.Event
	for ev := range stored {
		fromStore = append(fromStore, ev)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for name, evs := range map[string][]event.Event{"SubscribeAttempt": live, "Events{Attempt: 2}": fromStore} {
		if len(evs) == 0 || evs[0].Type != event.RunStarted || AttemptOf(evs[0]) != 2 {
			t.Fatalf("%s starts with %+v, want attempt 2's run_started", name, evs[:min(1, len(evs))])
		}
		if n := len(ofType(evs, event.RunDone)); n != 1 || evs[len(evs)-1].Data["status"] != "completed" {
			t.Fatalf("%s has %d run_done, the last %v; want only attempt 2's", name, n, evs[len(evs)-1].Data)
		}
	}
	if _, _, err := e2.svc.Events(t.Context(), r.ID, EventsOptions{Attempt: 5}); err == nil || !strings.Contains(err.Error(), "has no attempt 5 (its latest is 2)") {
		t.Fatalf("a missing attempt: %v", err)
	}
}

// A follower that asks for the attempt a run's row already names, before that attempt's
// run_started is stored (a daemon resuming it has just begun), waits for the event
// instead of failing with "run has no attempt 2 (its latest is 2)".
func TestEventsWaitForAnAttemptsStart(t *testing.T) {
	dir, e, path, r := failedFirstAttempt(t)
	// The row says attempt 2 runs in another live process; its events are not stored yet.
	running, two, pid := storage.StatusRunning, 2, os.Getppid() // another live process
	if err := e.st.UpdateRun(t.Context(), r.ID, storage.RunUpdate{Status: &running, Attempt: &two, PID: &pid}); err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 1)
	viewer := openResumeEnvWith(t, dir, &toolLoop{}, 0, func(st storage.Store) storage.Store {
		return &startsWatch{Store: st, asked: asked}
	})
	type first struct {
		ev  event.Event
		err error
	}
	got := make(chan first, 1)
	go func() {
		stream, errc, err := viewer.svc.Events(t.Context(), r.ID, EventsOptions{Attempt: 2, Follow: true, Poll: time.Millisecond})
		if err != nil {
			got <- first{err: err}
			return
		}
		ev := <-stream
		got <- first{ev: ev}
		for range stream {
		}
		<-errc
	}()
	select {
	case <-asked: // the viewer looked for attempt 2's start and did not find it
	case f := <-got:
		t.Fatalf("Events answered before attempt 2 started: %+v", f)
	}
	if _, err := e.st.Append(t.Context(), r.ID, event.New(event.RunStarted, map[string]any{"workflow": path, "attempt": 2, "resumed": true})); err != nil {
		t.Fatal(err)
	}
	f := <-got
	if f.err != nil || f.ev.Type != event.RunStarted || AttemptOf(f.ev) != 2 {
		t.Fatalf("the viewer's stream starts with %+v (%v), want attempt 2's run_started", f.ev, f.err)
	}
	done := storage.StatusCompleted
	if err := e.st.UpdateRun(t.Context(), r.ID, storage.RunUpdate{Status: &done}); err != nil {
		t.Fatal(err)
	}
}

// startsWatch tells when the run_started events were read and no attempt 2 was there.
type startsWatch struct {
	storage.Store
	asked chan struct{}
}

func (w *startsWatch) EventsOfType(ctx context.Context, runID string, since int64, limit int, types []string) ([]event.Event, error) {
	evs, err := w.Store.EventsOfType(ctx, runID, since, limit, types)
	if len(types) == 1 && types[0] == event.RunStarted && !slices.ContainsFunc(evs, func(ev event.Event) bool { return AttemptOf(ev) == 2 }) {
		select {
		case w.asked <- struct{}{}:
		default:
		}
	}
	return evs, err
}

// failedFirstAttempt runs a two-call workflow whose second call fails, so the run ends
// failed after its first attempt: the state dir, its Service, the script and the run.
func failedFirstAttempt(t *testing.T) (string, *resumeEnv, string, *Run) {
	t.Helper()
	dir := t.TempDir()
	e := openResumeEnv(t, dir, &toolLoop{fail: "second"}, 0)
	path := filepath.Join(dir, "wf.lua")
	if err := os.WriteFile(path, []byte(`function main()
  agent{prompt = "first"}
  local r = agent{prompt = "second"}
  assert(r.ok, r.error)
end`), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := e.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if res := waitRun(t, r); res.Status != StatusFailed {
		t.Fatalf("first attempt %s", res.Status)
	}
	return dir, e, path, r
}
