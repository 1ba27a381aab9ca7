package schedbench

import (
	"testing"
	"testing/synctest"
)

// runtimeResult runs w through the runtime and the Executor RuntimeRuns times, each
// inside a synctest bubble (the wall clock they read is virtual there), and returns the
// median result and the notes with the spread.
func runtimeResult(t *testing.T, w *Workload) (*Result, []string) {
	t.Helper()
	var rs []*Result
	for range RuntimeRuns {
		synctest.Test(t, func(t *testing.T) {
			r, err := RunThroughRuntime(w)
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		})
	}
	for _, r := range rs {
		if r.Stuck || r.RunsFailed > 0 || r.TurnsOK != r.Turns {
			t.Fatalf("through the runtime: %d runs failed, %d unfinished, %d of %d turns ok", r.RunsFailed, r.Unfinished, r.TurnsOK, r.Turns)
		}
	}
	return MedianOf(rs)
}

// W1 through the runtime: the same targets, held by luft as shipped (Lua workflows, the
// runtime, the Executor, the product's keys) rather than by the decision core driven
// directly.
func TestW1ThroughRuntime(t *testing.T) {
	w := W1(Fast)
	rt, notes := runtimeResult(t, w)
	rep := W1Report(w, Fast, rt)
	rep.Notes = append(rep.Notes, notes...)
	assertTargets(t, rep)
}

// W2 through the runtime.
func TestW2ThroughRuntime(t *testing.T) {
	w := W2(Fast, 0)
	rt, notes := runtimeResult(t, w)
	rep := W2Report(w, Fast, W2FastCostHorizon, rt)
	rep.Notes = append(rep.Notes, notes...)
	assertTargets(t, rep)
}
