package main

import (
	"testing"

	"github.com/luft-run/luft/internal/testkit"
)

// On a provider that reports no limits at all (the silent model: no rate-limit header,
// no hint in a 429), luft learns its pace from the 429s: every call completes, with a
// few 429s while it learns, where the direct client with SDK retries meets dozens and
// loses branches. Before the lane learned a pace from them, luft met 179-186 × 429 at
// 4 × 6 and 19-20 of its 24 calls failed.
func TestSilentProviderIsLearned(t *testing.T) {
	if testing.Short() {
		t.Skip("minutes of modelled traffic")
	}
	m := modelFor(testkit.ProviderSilent)
	for seed := uint64(1); seed <= 3; seed++ {
		l, err := inBubble(t)(env{}, m, workload{"b", 4, 6}, seed, "luft", 8)
		if err != nil {
			t.Fatal(err)
		}
		d, err := inBubble(t)(env{}, m, workload{"b", 4, 6}, seed, "direct", 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: luft %d × 429, %d failed, %.3f× the floor; direct %d × 429, %d gave up", seed, l.RateLimited, l.Failed, l.Ratio, d.RateLimited, d.Failed)
		if l.Failed != 0 || l.RateLimited > 12 || l.Ratio > 1.1 {
			t.Errorf("seed %d: luft %d × 429, %d failed calls, %.3f× the floor: want none failed, ≤ 12 × 429, ≤ 1.1×", seed, l.RateLimited, l.Failed, l.Ratio)
		}
		if d.RateLimited < 4*l.RateLimited {
			t.Errorf("seed %d: the direct client met %d × 429 against luft's %d: the model does not discriminate", seed, d.RateLimited, l.RateLimited)
		}
	}
}
