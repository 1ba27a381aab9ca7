package scheduler

import (
	"testing"
	"time"
)

// A lane whose limits are known admits a burst up to its buckets' levels, until a 429
// shows the provider enforces them over short windows too: from then on, within any
// second it admits at most each bucket's share of a second (here 120 requests a minute:
// 2 a second), wherever the second starts.
func TestShortWindowsAfterA429(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Slots: 100, RPM: 120}}})
	now := sec(0)
	for i := TurnID(1); i <= 5; i++ {
		c.Submit(mkJob(i, "r", "u", "b", 10), now)
	}
	if n := c.Stats(now)[0].Running; n != 5 {
		t.Fatalf("%d running before any 429, want the burst of 5", n)
	}
	now = sec(0.1)
	for i := TurnID(1); i <= 4; i++ {
		c.Complete(i, ok(10), now)
	}
	c.Complete(5, rateLimited(map[string]string{"retry-after-ms": "100"}, now), now)
	for i := TurnID(6); i <= 20; i++ {
		c.Submit(mkJob(i, "r", "u", "b", 10), now)
	}
	var starts []time.Time
	for at := now; at.Before(sec(30)); {
		acts := c.Tick(at)
		for len(acts) > 0 { // each admitted turn answers at once
			var next []Action
			for _, a := range acts {
				if a.Kind == ActAdmit {
					starts = append(starts, at)
					next = append(next, c.Complete(a.ID, ok(10), at)...)
				}
			}
			acts = next
		}
		w := c.NextWake(at)
		if w.IsZero() {
			break
		}
		at = w
	}
	if len(starts) != 16 {
		t.Fatalf("%d turns admitted after the 429, want 16", len(starts))
	}
	for i := 2; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-2]); d < time.Second {
			t.Fatalf("turns %d and %d admitted %v apart: three in one second, past the share of 2 (%v)", i-2, i, d, starts)
		}
	}
}
