package scheduler

import (
	"testing"
	"time"
)

// When a slot frees on a replica and the best turn's run last ran on the other (full)
// one, a batch turn of the same caller ranked within AffinityWindow whose run last ran on
// the freed replica takes the slot; the best turn gets its own replica's next slot.
func TestAffinityWindow(t *testing.T) {
	for _, tt := range []struct {
		name   string
		window time.Duration
		bAt    float64 // when run b's continuation arrives (a's arrives at 12 s)
		first  TurnID  // admitted when replica 1 frees
	}{
		{name: "within the window", bAt: 13, first: 5},
		{name: "outside the window", bAt: 20, first: 4},
		{name: "window off", window: -1, bAt: 13, first: 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCore(Config{AffinityWindow: tt.window,
				Lanes: map[string]LaneConfig{testLane: {Slots: 1, Replicas: 2}}})
			adm := func(acts []Action) []Action {
				var out []Action
				for _, a := range acts {
					if a.Kind == ActAdmit {
						out = append(out, a)
					}
				}
				return out
			}
			c.Submit(mkJob(1, "a", "b", "b", 100), sec(0)) // replica 0
			c.Submit(mkJob(2, "b", "b", "b", 100), sec(0)) // replica 1
			c.Submit(mkJob(3, "c", "b", "b", 100), sec(1))
			if a := adm(c.Complete(1, ok(100), sec(1))); len(a) != 1 || a[0].ID != 3 || a[0].Replica != 0 {
				t.Fatalf("c's first turn: %v", a)
			}
			c.Submit(cont(mkJob(4, "a", "b", "b", 100)), sec(12)) // a last ran on 0, ranked first
			c.Submit(cont(mkJob(5, "b", "b", "b", 100)), sec(tt.bAt))
			a := adm(c.Complete(2, ok(100), sec(21))) // replica 1 frees
			if len(a) != 1 || a[0].ID != tt.first || a[0].Replica != 1 {
				t.Fatalf("replica 1 freed: admitted %v, want #%d there", a, tt.first)
			}
			other := TurnID(9) - tt.first
			a = adm(c.Complete(3, ok(100), sec(22))) // replica 0 frees
			if len(a) != 1 || a[0].ID != other || a[0].Replica != 0 {
				t.Fatalf("replica 0 freed: admitted %v, want #%d there", a, other)
			}
		})
	}
}

// Ageing reorders classes, not callers within a class: a batch caller whose turn has
// aged past BatchOffset does not go before a batch caller with a smaller token counter.
func TestAgeingKeepsFairSharesWithinClass(t *testing.T) {
	c := oneSlot(Config{BatchOffset: 60 * time.Second})
	c.Submit(mkJob(1, "x1", "x", "b", 100), sec(0)) // runs
	c.Submit(mkJob(2, "x2", "x", "b", 100), sec(0)) // ages at 60 s
	c.Submit(mkJob(3, "y1", "y", "b", 100), sec(30))
	// x1 used far more than its estimate: x's counter is now well above y's.
	acts := c.Complete(1, ok(5000), sec(70))
	if a := ids(acts, ActAdmit); len(a) != 1 || a[0] != 3 {
		t.Fatalf("admitted %v, want y's turn #3 (the smaller counter) before x's aged #2", a)
	}
	if a := ids(c.Complete(3, ok(100), sec(71)), ActAdmit); len(a) != 1 || a[0] != 2 {
		t.Fatalf("admitted %v, want #2", a)
	}
}
