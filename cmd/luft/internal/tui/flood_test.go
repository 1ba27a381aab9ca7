package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

// A script that starts phases in a loop without end must not make the view's state grow
// or slow down with it: finished phases past keepPhases are forgotten, and a phase the
// plan did not name is appended without scanning the list.
func TestStatePhaseFlood(t *testing.T) {
	st := NewState(StateOptions{})
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st.Apply(event.Event{Type: event.RunStarted, RunID: "r", TS: ts, Data: map[string]any{"workflow": "w.lua"}})
	st.Apply(event.Event{Type: event.Plan, TS: ts, Data: map[string]any{"phases": []any{
		map[string]any{"label": "scan"}, map[string]any{"label": "sum"}}}})
	const n = 200_000
	for i := 1; i <= n; i++ {
		label := "p"
		switch i {
		case 1:
			label = "scan"
		case n:
			label = "sum"
		}
		st.Apply(event.Event{Type: event.PhaseStarted, TS: ts, Data: map[string]any{"phase_id": i, "label": label}})
		st.Apply(event.Event{Type: event.PhaseDone, TS: ts, Data: map[string]any{"phase_id": i, "ok": 0, "failed": 0}})
		if len(st.Phases) > 2*keepPhases || len(st.byID) > 2*keepPhases {
			t.Fatalf("after %d phases the state keeps %d phases (%d by id), more than %d", i, len(st.Phases), len(st.byID), 2*keepPhases)
		}
	}
	last := st.Phases[len(st.Phases)-1]
	if last.Label != "sum" || last.ID != n || !last.Done {
		t.Fatalf("the last phase is %+v, want the planned sum phase carried out as phase %d", last, n)
	}
	if st.unstarted != 0 {
		t.Fatalf("%d planned phases counted as still to come", st.unstarted)
	}
}

// A plan that names a huge number of phases keeps maxPlanned of them.
func TestStatePlanBounded(t *testing.T) {
	phases := make([]any, 10000)
	for i := range phases {
		phases[i] = map[string]any{"label": "x"}
	}
	st := Fold(StateOptions{}, event.Event{Type: event.Plan, Data: map[string]any{"phases": phases}})
	if len(st.Phases) != maxPlanned {
		t.Fatalf("%d planned phases kept, want %d", len(st.Phases), maxPlanned)
	}
}

func TestOneLineClipsLongText(t *testing.T) {
	got := oneLine(strings.Repeat("é", 1<<20))
	if len(got) > maxLine+100 || !strings.Contains(got, "bytes more; luft logs shows them all") {
		t.Fatalf("a 2 MiB line became %d bytes: %q", len(got), got[len(got)-80:])
	}
}
