package scheduler

import (
	"testing"
	"time"
)

// A provider that reports no limits refuses a burst: the lane paces its turns from then
// on, halves its pace once for the burst (not once per refused turn of it), and a reading
// that names a limit ends the pacing.
func TestSilentLanePaces(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Slots: 8}}})
	now := sec(0)
	for i := TurnID(1); i <= 12; i++ {
		c.Submit(mkJob(i, "r", "u", "b", 100), now)
	}
	// Eight go at once (nothing is known); the provider refuses seven of them.
	if n := c.Stats(now)[0].Running; n != 8 {
		t.Fatalf("%d running at the start, want 8", n)
	}
	now = sec(0.5)
	c.Complete(1, ok(100), now)
	for i := TurnID(2); i <= 8; i++ {
		c.Complete(i, rateLimited(nil, now), now)
	}
	p := c.lanes[testLane].silent
	// One cut for the burst: nine sent within its first second (span 1 s), halved.
	if !p.on || p.reqRate != 4.5 {
		t.Fatalf("after a burst's 429s: on %v, %v turns/s; want paced at 4.5/s (9 sent in 1 s, halved once)", p.on, p.reqRate)
	}
	// From then on the turns go one by one, spaced by the pace, which the answers raise
	// towards 85% of the refused 9/s, never past: at least 1/7.65 s apart.
	var starts []time.Time
	running := map[TurnID]bool{}
	for at := now; len(starts) < 10 && at.Before(sec(60)); {
		for _, a := range c.Tick(at) {
			if a.Kind == ActAdmit {
				starts = append(starts, at)
				running[a.ID] = true
			}
		}
		for id := range running { // each answers at once
			delete(running, id)
			for _, a := range c.Complete(id, ok(100), at) {
				if a.Kind == ActAdmit {
					starts = append(starts, at)
					running[a.ID] = true
				}
			}
		}
		w := c.NextWake(at)
		if w.IsZero() {
			break
		}
		at = w
	}
	if len(starts) < 10 {
		t.Fatalf("%d turns admitted after the burst, want the 10 left", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 130*time.Millisecond {
			t.Fatalf("turns %d and %d admitted %v apart: the lane does not pace (%v)", i-1, i, gap, starts)
		}
	}

	// A reading that names a limit: the buckets know better, the pace ends.
	c.Submit(mkJob(20, "r", "u", "b", 100), sec(61))
	hh := hdr("x-ratelimit-limit-requests", "600", "x-ratelimit-remaining-requests", "599")
	c.Complete(20, Result{Status: StatusOK, Usage: ok(100).Usage, Telemetry: ParseTelemetry(hh, sec(61))}, sec(61))
	if c.lanes[testLane].silent.on {
		t.Fatal("a reading with limits did not end the silent pacing")
	}
}
