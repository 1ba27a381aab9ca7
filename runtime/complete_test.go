package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/agent"
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
