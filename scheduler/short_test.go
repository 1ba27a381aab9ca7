package scheduler

import (
	"testing"
	"time"
)

// A lane whose limits are known admits a burst up to its token bucket's level, until a
// 429 shows the provider enforces it over short windows too: from then on, within any
// second it admits at most the bucket's share of a second (here 600 tokens a minute: 10
// a second, so one turn of 10 tokens and its margin alone), wherever the second starts.
func TestShortWindowsAfterA429(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Slots: 100, TPM: 600}}})
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
	for i := 1; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-1]); d < time.Second {
			t.Fatalf("turns %d and %d admitted %v apart: two in one second, past the share of 10 tokens (%v)", i-1, i, d, starts)
		}
	}
}

// Requests are paced over short windows from the start, once their limit is known: of
// 120 a minute, a burst of 5 goes 2 a second, wherever the second starts.
func TestShortWindowsOfRequestsFromTheStart(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Slots: 100, RPM: 120}}})
	var starts []time.Time
	for i := TurnID(1); i <= 5; i++ {
		for range ids(c.Submit(mkJob(i, "r", "u", "b", 10), sec(0)), ActAdmit) {
			starts = append(starts, sec(0))
		}
	}
	if len(starts) != 2 {
		t.Fatalf("%d of a burst of 5 admitted at once, want 2", len(starts))
	}
	for at := sec(0); at.Before(sec(30)); {
		for _, a := range c.Tick(at) {
			if a.Kind == ActAdmit {
				starts = append(starts, at)
			}
		}
		for _, id := range []TurnID{1, 2, 3, 4, 5} {
			if j := c.jobs[id]; j != nil && j.state == jobRunning {
				c.Complete(id, ok(10), at)
			}
		}
		w := c.NextWake(at)
		if w.IsZero() {
			break
		}
		at = w
	}
	if len(starts) != 5 {
		t.Fatalf("%d of 5 turns admitted", len(starts))
	}
	for i := 2; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-2]); d < time.Second {
			t.Fatalf("turns %d and %d admitted %v apart: three in one second, past the share of 2 (%v)", i-2, i, d, starts)
		}
	}
}

// A key whose per-second share is past the admissions kept for the few-request case
// (RPM 12,000: 200 a second) is paced at that share too: of a burst of 300, 200 go in
// the first second and the rest in the next.
func TestShortWindowsOfALargeRequestLimit(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Slots: 1000, RPM: 12000}}})
	admitted := 0
	for i := TurnID(1); i <= 300; i++ {
		admitted += len(ids(c.Submit(mkJob(i, "r", "u", "b", 10), sec(0)), ActAdmit))
	}
	if admitted != 200 {
		t.Fatalf("%d of a burst of 300 admitted at once, want the second's share of 200", admitted)
	}
	later := 0
	for _, a := range c.Tick(sec(1.01)) {
		if a.Kind == ActAdmit {
			later++
		}
	}
	if later != 100 {
		t.Fatalf("%d admitted a second later, want the other 100", later)
	}
}
