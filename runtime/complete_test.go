package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
)

// A planner call is one interactive turn through the scheduler, on its backend/model lane.
func TestCompleteIsAScheduledInteractiveTurn(t *testing.T) {
	rec := &recordingScheduler{}
	b := &scripted{reply: echo}
	svc, _ := newScheduledEngine(t, b, rec)
	res, err := svc.Complete(t.Context(), "plan/1", agent.Request{Prompt: "plan it", Model: "big"})
	if err != nil || !res.OK() || res.Text != "re: plan it" {
		t.Fatalf("result %+v, err %v", res, err)
	}
	if len(rec.turns) != 1 {
		t.Fatalf("%d turns admitted, want 1", len(rec.turns))
	}
	tr := rec.turns[0]
	if tr.Class != agent.ClassInteractive || tr.Lane != "fake/big" || tr.CallKey != "plan/1" || tr.Continuation {
		t.Fatalf("turn %+v", tr)
	}
	if _, err := svc.Complete(t.Context(), "plan/2", agent.Request{Prompt: "x", Backend: "nosuch"}); err == nil || !strings.Contains(err.Error(), "plan/2: backend") {
		t.Fatalf("unknown backend: %v", err)
	}
}

// A planned run keeps its script in its run folder and its plan calls in its journal; a
// resume with a fixed Source pins it and replays the calls whose inputs did not change.
func TestPlannedRunAndResumeWithFixedSource(t *testing.T) {
	b := &scripted{reply: echo}
	svc, st := newScheduledEngine(t, b, &recordingScheduler{})
	bug := "function main()\n  agent{ prompt = \"one\" }\n  agent{ prompt = \"two\" }\n  error(\"boom\")\nend\n"
	run := start(t, svc, bug, func(s *Spec) {
		s.Plan = &Plan{Task: "t", Planner: "template", Calls: []PlanCall{{Key: "plan/1", Prompt: "p", Reply: "r", Reason: "rejected"}, {Key: "plan/2", Prompt: "p2", Reply: "r2"}}}
	})
	if res := run.Wait(); res.Status != StatusFailed {
		t.Fatalf("first attempt %s: %v", res.Status, res.Err)
	}
	path := filepath.Join(svc.opts.StateDir, "runs", run.ID, "workflow.lua")
	if got, err := os.ReadFile(path); err != nil || string(got) != bug {
		t.Fatalf("planned script not in the run folder: %v", err)
	}
	entries, _ := st.Journal(t.Context(), run.ID)
	plans := 0
	for _, e := range entries {
		if e.Kind == "plan" {
			plans++
		}
	}
	if plans != 2 {
		t.Fatalf("%d plan entries journaled, want 2", plans)
	}
	fixed := strings.Replace(bug, "error(\"boom\")", "agent{ prompt = \"three\" }\n  report(\"ok\")", 1)
	next, err := svc.Resume(t.Context(), ResumeSpec{Run: run.ID, Source: []byte(fixed), AllowChangedScript: true, RerunFromDivergence: true})
	if err != nil {
		t.Fatal(err)
	}
	res := next.Wait()
	if res.Status != StatusCompleted || res.Report != "ok" {
		t.Fatalf("fixed attempt %s: %v (%v)", res.Status, res.Err, res.Report)
	}
	if b.total != 3 || res.Agents.Cached != 2 {
		t.Fatalf("backend sends %d (want 3: two before, one new), cached %d (want 2)", b.total, res.Agents.Cached)
	}
	if got, _ := svc.Script(t.Context(), run.ID); string(got) != fixed {
		t.Fatalf("the fixed script is not pinned: %s", got)
	}
	if got, _ := os.ReadFile(path); string(got) != fixed {
		t.Fatalf("the run folder does not hold the fixed script")
	}
}

// A plan that found no script is recorded as a failed run: its calls journaled, their
// tokens and cost its own, its events a run_started and a run_done; it does not resume,
// and a resume without an id passes it by.
func TestFailedPlanIsAFailedRun(t *testing.T) {
	svc, st := newScheduledEngine(t, &scripted{reply: echo}, &recordingScheduler{})
	calls := []PlanCall{{Key: "plan/1", Prompt: "p", Reply: "r", Reason: "no fence", Usage: agent.Usage{Input: 100, Output: 10}, Cost: 0.5},
		{Key: "plan/2", Prompt: "p2", Reply: "r2", Reason: "no main", Usage: agent.Usage{Input: 200, Output: 20}, Cost: 0.25}}
	res, err := svc.FailedPlan(t.Context(), Spec{Plan: &Plan{Task: "do it", Planner: "b/m", Calls: calls}}, errors.New("plan: gave up"))
	if err != nil {
		t.Fatal(err)
	}
	row, err := st.GetRun(t.Context(), res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != "failed" || row.Error != "plan: gave up" || row.Usage.Input != 300 || row.Usage.Output != 30 || row.Cost != 0.75 ||
		row.Workflow != "plan: do it" || row.FinishedAt.IsZero() || !PlanFailed(row) {
		t.Fatalf("row %+v", row)
	}
	entries, _ := st.Journal(t.Context(), res.RunID)
	if len(entries) != 2 || entries[0].Kind != "plan" || entries[1].Cost != 0.25 {
		t.Fatalf("journal %+v", entries)
	}
	evs, _ := st.Events(t.Context(), res.RunID, 0, 0)
	if len(evs) != 2 || evs[0].Type != event.RunStarted || evs[1].Type != event.RunDone || evs[1].Data["status"] != "failed" {
		t.Fatalf("events %+v", evs)
	}
	if _, err := svc.Resume(t.Context(), ResumeSpec{Run: res.RunID}); !errors.Is(err, ErrNotResumable) || !strings.Contains(err.Error(), "no script to run") {
		t.Fatalf("resume: %v", err)
	}
	if _, err := svc.Resume(t.Context(), ResumeSpec{}); err == nil || !strings.Contains(err.Error(), "no unfinished run to resume") {
		t.Fatalf("resume of the newest: %v", err)
	}
}
