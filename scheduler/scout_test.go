package scheduler

import (
	"slices"
	"testing"

	"github.com/luft-run/luft/agent"
)

// A scouting lane runs one turn until its first answer, then learns its limits from it
// and admits the burst as far as they allow; without Scout the burst goes at once.
func TestScoutHoldsTheBurstForTheFirstAnswer(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         LaneConfig
		firstAdmits int
	}{
		{"scout", LaneConfig{Scout: true}, 1},
		{"no scout", LaneConfig{}, 4},
		{"limits configured: nothing to learn", LaneConfig{Scout: true, TPM: 100000}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: tc.cfg}})
			var admitted []TurnID
			for i := TurnID(1); i <= 4; i++ {
				admitted = append(admitted, ids(c.Submit(mkJob(i, "r", "u", "b", 1000), sec(0)), ActAdmit)...)
			}
			if len(admitted) != tc.firstAdmits {
				t.Fatalf("admitted %v before any answer, want %d", admitted, tc.firstAdmits)
			}
			if tc.firstAdmits != 1 {
				return
			}
			// The first answer says 2,500 tokens are left of 6,000 a minute: room for at
			// most two more turns of 1,000 (fewer with the margin and the batch
			// headroom), never for the fourth.
			h := hdr("x-ratelimit-limit-tokens", "6000", "x-ratelimit-remaining-tokens", "2500", "x-ratelimit-reset-tokens", "35s",
				"x-ratelimit-limit-requests", "30", "x-ratelimit-remaining-requests", "29", "x-ratelimit-reset-requests", "2s")
			acts := c.Complete(1, Result{Status: StatusOK, Usage: agent.Usage{Input: 900, Output: 100}, Telemetry: ParseTelemetry(h, sec(1))}, sec(1))
			got := ids(acts, ActAdmit)
			if len(got) == 0 || len(got) > 2 || slices.Contains(got, 1) {
				t.Fatalf("after the scout's answer admitted %v: %s", got, dump(acts))
			}
		})
	}
}

// A scout that is cancelled taught nothing: the next turn scouts in its place.
func TestCancelledScoutIsReplaced(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Scout: true}}})
	c.Submit(mkJob(1, "r", "u", "b", 100), sec(0))
	c.Submit(mkJob(2, "r", "u", "b", 100), sec(0))
	c.Submit(mkJob(3, "r", "u", "b", 100), sec(0))
	acts := c.Complete(1, Result{Status: StatusCanceled}, sec(1))
	if got := ids(acts, ActAdmit); !slices.Equal(got, []TurnID{2}) {
		t.Fatalf("after a cancelled scout admitted %v, want just [2]", got)
	}
	acts = c.Complete(2, ok(100), sec(2))
	if got := ids(acts, ActAdmit); !slices.Equal(got, []TurnID{3}) {
		t.Fatalf("after the answer admitted %v, want [3]", got)
	}
}

// "BACKEND/*" configures every model of a backend.
func TestLaneWildcard(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{"fake/*": {Slots: 1}}, DefaultLane: LaneConfig{Slots: 5}})
	c.Submit(mkJob(1, "r", "u", "b", 100), sec(0))
	if acts := c.Submit(mkJob(2, "r", "u", "b", 100), sec(0)); len(ids(acts, ActAdmit)) != 0 {
		t.Fatalf("fake/m took the default lane's slots: %s", dump(acts))
	}
}

// A stream's headers end the scouting at once: the lane learns its limits from them and
// lets the burst through while the scout's reply is still coming.
func TestObserveEndsScoutingEarly(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Scout: true}}})
	for i := TurnID(1); i <= 4; i++ {
		c.Submit(mkJob(i, "r", "u", "b", 1000), sec(0))
	}
	h := hdr("x-ratelimit-limit-tokens", "6000", "x-ratelimit-remaining-tokens", "4900", "x-ratelimit-reset-tokens", "11s")
	acts := c.Observe(1, ParseTelemetry(h, sec(0.2)), sec(0.2))
	got := ids(acts, ActAdmit)
	// 4,900 left less the scout's own reservation (still pending, counted on the safe
	// side) and each turn's margin: some of the held turns fit, not all three.
	if len(got) == 0 || len(got) >= 3 || slices.Contains(got, 1) {
		t.Fatalf("after the scout's headers admitted %v: %s", got, dump(acts))
	}
	if again := c.Observe(1, ParseTelemetry(h, sec(0.3)), sec(0.3)); len(ids(again, ActAdmit)) != 0 {
		t.Fatalf("a second look at the same headers admitted more: %s", dump(again))
	}
	// A turn that is not running is ignored.
	if acts := c.Observe(99, ParseTelemetry(h, sec(0.4)), sec(0.4)); len(acts) != 0 {
		t.Fatalf("observe of an unknown turn: %s", dump(acts))
	}
}
