package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// askBackend is the openai backend "fake" on url with the built-in tools under the
// default "ask" policy (write_file is destructive), writing into ws.
func askBackend(t *testing.T, url, ws string) adapters.Backend {
	t.Helper()
	return toolBackendWith(t, url, tools.Config{Workspace: ws})
}

// askEnv is openResumeEnv with approvals asked and a scheduler of slots slots.
func askEnv(t *testing.T, dir string, b adapters.Backend, slots int, ask bool) *resumeEnv {
	t.Helper()
	e := openResumeEnvWith(t, dir, b, 0, nil)
	e.sched = &countingScheduler{Scheduler: scheduler.NewGate(slots)}
	svc, err := New(Options{Store: e.st, StateDir: dir, Backends: adapters.NewRegistry("fake", b), Scheduler: e.sched,
		Backoff: func(int) time.Duration { return 0 }, CancelPoll: 10 * time.Millisecond, AskApprovals: ask})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	return e
}

// noteRules make the agent asked to "keep a note" write note.txt, and any other agent
// answer at once.
var noteRules = []testkit.ToolRule{
	{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}}, Reply: "noted"},
	{Match: "", Reply: "plain answer"},
}

const noteFlow = `function main()
  local rs = parallel({"keep a note", "say hi"}, function(p) return agent{prompt = p, tools = {"write_file"}} end)
  report(rs[1].output .. "|" .. rs[2].output)
end`

// awaitEvent reads r's events until one of type typ arrives.
func awaitEvent(t *testing.T, r *Run, typ string) event.Event {
	t.Helper()
	return awaitEventAfter(t, r, typ, 0)
}

// awaitEventAfter is awaitEvent for events with seq > since.
func awaitEventAfter(t *testing.T, r *Run, typ string, since int64) event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for ev := range r.Subscribe(ctx, since) {
		if ev.Type == typ {
			return ev
		}
	}
	t.Fatalf("run %s: no %s event", r.ID, typ)
	return event.Event{}
}

// A destructive tool under "ask" parks its call: the run shows awaiting_approval with the
// pending call, the sibling agent finishes meanwhile on the scheduler's only slot, and
// the answer decides whether the tool runs or the model is told the user declined.
func TestApprovalParksTheCall(t *testing.T) {
	for _, allow := range []bool{true, false} {
		t.Run(map[bool]string{true: "allow", false: "decline"}[allow], func(t *testing.T) {
			te := newToolEngine(t, noteRules)
			dir, ws := t.TempDir(), t.TempDir()
			e := askEnv(t, dir, askBackend(t, te.url, ws), 1, true)
			r, err := e.svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", noteFlow)})
			if err != nil {
				t.Fatal(err)
			}
			req := awaitEvent(t, r, event.ApprovalRequested)
			if req.Data["tool"] != "write_file" || !strings.Contains(req.Data["arguments"].(string), "note.txt") {
				t.Fatalf("approval_requested: %v", req.Data)
			}
			// The sibling's turn needs the only slot: it finishes while the note waits.
			if done := awaitEvent(t, r, event.AgentDone); done.Data["status"] != "ok" {
				t.Fatalf("sibling: %v", done.Data)
			}
			info, err := e.svc.Status(t.Context(), r.ID)
			if err != nil || info.Status != string(StatusAwaitingApproval) || len(info.Pending) != 1 {
				t.Fatalf("status %s, pending %+v, %v: want awaiting_approval with one pending call", info.Status, info.Pending, err)
			}
			p := info.Pending[0]
			if p.ID != req.Data["approval_id"] || p.Tool != "write_file" || p.CallKey == "" {
				t.Fatalf("pending %+v, event %v", p, req.Data)
			}
			runs, err := e.svc.List(t.Context(), storage.ListOptions{Status: string(StatusAwaitingApproval)})
			if err != nil || len(runs) != 1 || runs[0].ID != r.ID {
				t.Fatalf("list awaiting_approval: %v, %v", runs, err)
			}
			if _, err := e.svc.Approve(t.Context(), r.ID, "ap-nope", true); !errors.Is(err, ErrNoApproval) || !strings.Contains(err.Error(), p.ID) {
				t.Fatalf("approve an unknown id: %v", err)
			}
			if _, err := e.svc.Approve(t.Context(), r.ID, strings.Repeat("x", 1<<20), true); !errors.Is(err, ErrNoApproval) || len(err.Error()) > 300 {
				t.Fatalf("approve a huge id: %.300v", err)
			}
			got, err := e.svc.Approve(t.Context(), r.ID[:13], "", allow)
			if err != nil || got.ID != p.ID || got.Allowed() != allow {
				t.Fatalf("approve: %+v, %v", got, err)
			}
			if _, err := e.svc.Approve(t.Context(), r.ID, p.ID, !allow); !errors.Is(err, storage.ErrApprovalDecided) {
				t.Fatalf("approve twice: %v", err)
			}
			res := waitRun(t, r)
			if res.Status != StatusCompleted || res.Report != "noted|plain answer" {
				t.Fatalf("run %s %v, report %v", res.Status, res.Err, res.Report)
			}
			decided := ofType(collect(t, r), event.ApprovalDecided)
			if len(decided) != 1 || decided[0].Data["allow"] != allow {
				t.Fatalf("approval_decided: %v", decided)
			}
			_, statErr := os.Stat(filepath.Join(ws, "note.txt"))
			results := te.toolResults()
			if allow && (statErr != nil || len(results) != 1 || !strings.Contains(results[0], "created")) {
				t.Fatalf("allowed: file %v, tool results %q", statErr, results)
			}
			if !allow && (statErr == nil || len(results) != 1 || results[0] != tools.DeclinedText) {
				t.Fatalf("declined: file %v, tool results %q", statErr, results)
			}
			if info, _ := e.svc.Status(t.Context(), r.ID); info.Status != storage.StatusCompleted || len(info.Pending) != 0 {
				t.Fatalf("after: %s %+v", info.Status, info.Pending)
			}
		})
	}
}

// File writes are destructive by default, and [tools] approval decides them without a
// person: "allow" writes at once even where someone could be asked, "deny" refuses and
// tells the model, which goes on. Neither asks.
func TestFileWritesUnderAllowAndDeny(t *testing.T) {
	for _, policy := range []tools.Approval{tools.ApprovalAllow, tools.ApprovalDeny} {
		t.Run(string(policy), func(t *testing.T) {
			te := newToolEngine(t, noteRules)
			dir, ws := t.TempDir(), t.TempDir()
			e := askEnv(t, dir, toolBackendWith(t, te.url, tools.Config{Workspace: ws, Approval: policy}), 2, true)
			r, err := e.svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", noteFlow)})
			if err != nil {
				t.Fatal(err)
			}
			res := waitRun(t, r)
			if res.Status != StatusCompleted || res.Report != "noted|plain answer" {
				t.Fatalf("run %s %v, report %v", res.Status, res.Err, res.Report)
			}
			if asked := ofType(collect(t, r), event.ApprovalRequested); len(asked) != 0 {
				t.Fatalf("%s asked: %v", policy, asked)
			}
			_, statErr := os.Stat(filepath.Join(ws, "note.txt"))
			results := te.toolResults()
			if len(results) != 1 {
				t.Fatalf("tool results %q, want one", results)
			}
			switch policy {
			case tools.ApprovalAllow:
				if statErr != nil || !strings.Contains(results[0], "created") {
					t.Fatalf("allow: file %v, tool result %q", statErr, results[0])
				}
			case tools.ApprovalDeny:
				if statErr == nil || !strings.Contains(results[0], "refused by policy") || !strings.Contains(results[0], "write_file") {
					t.Fatalf("deny: file %v, tool result %q", statErr, results[0])
				}
			}
		})
	}
}

// Where no one can answer, a destructive tool under "ask" fails its agent call naming
// the tool and the setting, as before: the run never waits.
// The same holds for an unattended run of a Service that asks (a luft run without a
// terminal hosted by the daemon).
func TestApprovalWithoutAnAnswererFails(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ask, unattended bool
	}{{"no answerer", false, false}, {"unattended", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			te := newToolEngine(t, noteRules)
			dir, ws := t.TempDir(), t.TempDir()
			e := askEnv(t, dir, askBackend(t, te.url, ws), 2, tc.ask)
			r, err := e.svc.Start(t.Context(), Spec{Unattended: tc.unattended, Path: writeScript(t, dir, "wf.lua", `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}}
  report(r.error)
end`)})
			if err != nil {
				t.Fatal(err)
			}
			res := waitRun(t, r)
			msg, _ := res.Report.(string)
			if res.Status != StatusCompleted || !strings.Contains(msg, "write_file is destructive and needs approval") {
				t.Fatalf("run %s, report %v", res.Status, res.Report)
			}
			evs := collect(t, r)
			if len(ofType(evs, event.ApprovalRequested)) != 0 {
				t.Fatal("an approval was asked with no one to answer it")
			}
			if done := ofType(evs, event.AgentDone); len(done) != 1 || done[0].Data["approval_needed"] != "write_file" {
				t.Fatalf("agent_done does not name the tool that needed approval: %v", done)
			}
		})
	}
}

// An approval left unanswered when its run stopped is asked again, under the same id,
// when the resumed run reaches the call; one answered while the run was stopped is not
// asked again.
func TestApprovalAcrossRestarts(t *testing.T) {
	for _, answerWhileStopped := range []bool{false, true} {
		t.Run(map[bool]string{false: "unanswered", true: "answered while stopped"}[answerWhileStopped], func(t *testing.T) {
			te := newToolEngine(t, noteRules)
			dir, ws := t.TempDir(), t.TempDir()
			b := askBackend(t, te.url, ws)
			e := askEnv(t, dir, b, 2, true)
			path := writeScript(t, dir, "wf.lua", noteFlow)
			r, err := e.svc.Start(t.Context(), Spec{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			first := awaitEvent(t, r, event.ApprovalRequested)
			r.Suspend() // the host shuts down with the call parked
			if res := waitRun(t, r); res.Status != StatusSuspended {
				t.Fatalf("first attempt: %s %v", res.Status, res.Err)
			}
			e2 := askEnv(t, dir, b, 2, true) // another process over the same state dir
			info, err := e2.svc.Status(t.Context(), r.ID)
			if err != nil || info.Status != storage.StatusSuspended || len(info.Pending) != 1 {
				t.Fatalf("stopped run: %s %+v %v", info.Status, info.Pending, err)
			}
			if answerWhileStopped {
				if _, err := e2.svc.Approve(t.Context(), r.ID, "", true); err != nil {
					t.Fatal(err)
				}
			}
			r2 := resume(t, e2, ResumeSpec{Run: r.ID})
			if !answerWhileStopped {
				again := awaitEventAfter(t, r2, event.ApprovalRequested, first.Seq)
				if again.Data["approval_id"] != first.Data["approval_id"] {
					t.Fatalf("asked again as %v, first as %v", again.Data["approval_id"], first.Data["approval_id"])
				}
				if _, err := e2.svc.Approve(t.Context(), r.ID, again.Data["approval_id"].(string), true); err != nil {
					t.Fatal(err)
				}
			}
			res := waitRun(t, r2)
			if res.Status != StatusCompleted || res.Report != "noted|plain answer" {
				t.Fatalf("resumed: %s %v %v", res.Status, res.Err, res.Report)
			}
			asked := 0
			for _, ev := range collect(t, r2) {
				if ev.Type == event.ApprovalRequested && ev.Seq > first.Seq {
					asked++
				}
			}
			if want := map[bool]int{false: 1, true: 0}[answerWhileStopped]; asked != want {
				t.Fatalf("asked %d times after the restart, want %d", asked, want)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "note.txt")); err != nil || string(b) != "hello" {
				t.Fatalf("note.txt: %q %v", b, err)
			}
		})
	}
}

// A declined call is journaled as the tool's result: a retried agent call gets the same
// answer from the journal and is not asked again.
func TestDeclinedCallReplays(t *testing.T) {
	te := newToolEngine(t, []testkit.ToolRule{
		{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}}, Reply: "not json"},
		{Match: "did not match the required JSON schema", Reply: "still not json"},
	})
	dir, ws := t.TempDir(), t.TempDir()
	e := askEnv(t, dir, askBackend(t, te.url, ws), 2, true)
	r, err := e.svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}, retries = 1,
    schema = {type = "object", properties = {n = {type = "integer"}}, required = {"n"}}}
  report(r.ok)
end`)})
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, r, event.ApprovalRequested)
	if _, err := e.svc.Approve(t.Context(), r.ID, "", false); err != nil {
		t.Fatal(err)
	}
	res := waitRun(t, r)
	if res.Status != StatusCompleted || res.Report != false {
		t.Fatalf("run %s %v %v", res.Status, res.Err, res.Report)
	}
	if n := len(ofType(collect(t, r), event.ApprovalRequested)); n != 1 {
		t.Fatalf("asked %d times over two attempts, want 1", n)
	}
	got := te.toolResults()
	if len(got) != 2 || got[0] != tools.DeclinedText || got[1] != tools.DeclinedText {
		t.Fatalf("tool results %q", got)
	}
}

// Under "ask", a command allow_commands does not allow parks too: once allowed it runs
// (confined as any command), where before it was refused.
func TestApprovalOfACommand(t *testing.T) {
	te := newToolEngine(t, []testkit.ToolRule{
		{Match: "greet", Calls: []testkit.ScriptedCall{{Name: "run_command", Arguments: `{"command":"echo hi"}`}}, Reply: "greeted"},
	})
	dir, ws := t.TempDir(), t.TempDir()
	e := askEnv(t, dir, toolBackendWith(t, te.url, tools.Config{Workspace: ws, AllowCommands: []string{"ls"}}), 2, true)
	r, err := e.svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", `function main()
  report(agent{prompt = "greet", tools = {"run_command"}}.output)
end`)})
	if err != nil {
		t.Fatal(err)
	}
	req := awaitEvent(t, r, event.ApprovalRequested)
	if req.Data["tool"] != "run_command" || !strings.Contains(req.Data["arguments"].(string), "echo hi") {
		t.Fatalf("approval_requested: %v", req.Data)
	}
	if _, err := e.svc.Approve(t.Context(), r.ID, "", true); err != nil {
		t.Fatal(err)
	}
	if res := waitRun(t, r); res.Status != StatusCompleted || res.Report != "greeted" {
		t.Fatalf("run %s %v %v", res.Status, res.Err, res.Report)
	}
	if got := te.toolResults(); len(got) != 1 || !strings.HasPrefix(got[0], "hi\n") {
		t.Fatalf("tool results %q", got)
	}
}

// The time a call waits for a person does not count against its timeout_ms: ten
// seconds of waiting leave a 1-second bound untouched (counted, they would end the call
// as timed_out).
func TestApprovalWaitIsNotWorkingTime(t *testing.T) {
	te := newToolEngine(t, noteRules)
	dir, ws := t.TempDir(), t.TempDir()
	e := askEnv(t, dir, askBackend(t, te.url, ws), 2, true)
	clock := newVirtualClock()
	useClock(e.svc, clock)
	r, err := e.svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}, timeout_ms = 1000}
  report(r.status)
end`)})
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, r, event.ApprovalRequested)
	clock.Advance(10 * time.Second)
	if _, err := e.svc.Approve(t.Context(), r.ID, "", true); err != nil {
		t.Fatal(err)
	}
	if res := waitRun(t, r); res.Status != StatusCompleted || res.Report != "ok" {
		t.Fatalf("run %s %v, agent %v: want ok (the wait is not working time)", res.Status, res.Err, res.Report)
	}
}

// Several calls can wait at once: each is answered by its id, and an answer without
// one is refused naming them all.
func TestSeveralPendingApprovals(t *testing.T) {
	te := newToolEngine(t, noteRules)
	dir, ws := t.TempDir(), t.TempDir()
	e := askEnv(t, dir, askBackend(t, te.url, ws), 1, true)
	r, err := e.svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", `function main()
  local rs = parallel({"keep a note: a", "keep a note: b"}, function(p) return agent{prompt = p, tools = {"write_file"}} end)
  report(rs[1].output .. "|" .. rs[2].output)
end`)})
	if err != nil {
		t.Fatal(err)
	}
	// Each question is journaled before its approval_requested event.
	first := awaitEvent(t, r, event.ApprovalRequested)
	awaitEventAfter(t, r, event.ApprovalRequested, first.Seq)
	info, err := e.svc.Status(t.Context(), r.ID)
	if err != nil || len(info.Pending) != 2 {
		t.Fatalf("pending: %+v, %v", info.Pending, err)
	}
	_, err = e.svc.Approve(t.Context(), r.ID, "", true)
	if !errors.Is(err, ErrApprovalAmbiguous) || !strings.Contains(err.Error(), info.Pending[0].ID) || !strings.Contains(err.Error(), info.Pending[1].ID) {
		t.Fatalf("approve without an id: %v", err)
	}
	for _, p := range info.Pending {
		if _, err := e.svc.Approve(t.Context(), r.ID, p.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	if res := waitRun(t, r); res.Status != StatusCompleted || res.Report != "noted|noted" {
		t.Fatalf("run %s %v %v", res.Status, res.Err, res.Report)
	}
}

// Cancelling a run whose call waits for an answer ends the wait at once: the run ends
// cancelled, the call leaves no listener behind, the question stays pending in the
// journal (a resume asks it again), and a late answer is still taken without harm.
func TestCancelWhileAwaitingApproval(t *testing.T) {
	te := newToolEngine(t, noteRules)
	dir, ws := t.TempDir(), t.TempDir()
	e := askEnv(t, dir, askBackend(t, te.url, ws), 1, true)
	r, err := e.svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", noteFlow)})
	if err != nil {
		t.Fatal(err)
	}
	req := awaitEvent(t, r, event.ApprovalRequested)
	r.Cancel()
	if res := waitRun(t, r); res.Status != StatusCancelled {
		t.Fatalf("run %s %v: want cancelled", res.Status, res.Err)
	}
	e.svc.mu.Lock()
	left := len(e.svc.approvals)
	e.svc.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d approval listeners left after the run ended", left)
	}
	info, err := e.svc.Status(t.Context(), r.ID)
	if err != nil || info.Status != storage.StatusCancelled || len(info.Pending) != 1 || info.Pending[0].ID != req.Data["approval_id"] {
		t.Fatalf("status %s, pending %+v, %v: want cancelled with the question still pending", info.Status, info.Pending, err)
	}
	if _, err := e.svc.Approve(t.Context(), r.ID, "", false); err != nil {
		t.Fatalf("answer after the run ended: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "note.txt")); err == nil {
		t.Fatal("the parked write ran though the run was cancelled")
	}
}

// corruptApprovals is a store whose approvals cannot be read once broken is set, as when
// luft.db is damaged under a running run.
type corruptApprovals struct {
	storage.Store
	broken atomic.Bool
}

func (c *corruptApprovals) Approvals(ctx context.Context, f storage.ApprovalFilter) ([]storage.Approval, error) {
	if c.broken.Load() {
		return nil, &storage.CorruptError{Dir: "state", File: "luft.db", Err: errors.New("database disk image is malformed")}
	}
	return c.Store.Approvals(ctx, f)
}

// A state dir that breaks while a call waits for an answer stops the run naming the
// failure, rather than polling for an answer that could never be recorded.
func TestApprovalWaitStopsOnABrokenStateDir(t *testing.T) {
	te := newToolEngine(t, noteRules)
	dir, ws := t.TempDir(), t.TempDir()
	b := askBackend(t, te.url, ws)
	e := askEnv(t, dir, b, 1, true)
	st := &corruptApprovals{Store: e.st}
	svc, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b), Scheduler: e.sched,
		Backoff: func(int) time.Duration { return 0 }, CancelPoll: 10 * time.Millisecond, AskApprovals: true})
	if err != nil {
		t.Fatal(err)
	}
	r, err := svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", noteFlow)})
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, r, event.ApprovalRequested)
	st.broken.Store(true)
	if res := waitRun(t, r); res.Status == StatusCompleted || !errors.Is(res.Err, storage.ErrCorruptState) {
		t.Fatalf("run %s %v: want it stopped on the corrupt state dir", res.Status, res.Err)
	}
}
