package main

import (
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
)

// The fast variant of workload b (4 branches × 6 calls on one key), time compressed
// further: no 429 and no request beyond the run's own calls, with limits learned only
// from headers, no max_tokens sent and heavy-tailed completions billed when they end.
// The time ratio is the benchmark's to measure, not this test's. The naive baseline (each
// branch straight at the engine, retrying 429s like the OpenAI SDKs, patiently) runs
// beside it and must miss the same targets: it finishes near the floor too, after its
// 429s, so the targets that tell luft from it are the 429s and the extra requests.
func TestHostedNoRateLimitHits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few seconds of modelled traffic")
	}
	r, err := runOne(workload{"b", 4, 6}, 7, 600)
	if err != nil {
		t.Fatal(err)
	}
	e := env{clock: testkit.NewScaledClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 600), net: newLoopback()}
	d, err := measure(e, modelFor(testkit.ProviderClassic), workload{"b", 4, 6}, 7, "direct", 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("luft:   %d × 429, %d extra requests, %.3f× the net floor; targets met: %s", r.RateLimited, r.Extra, r.Ratio, verdict(r))
	t.Logf("direct: %d × 429, %d extra requests, %.3f× the net floor; targets met: %s", d.RateLimited, d.Extra, d.Ratio, verdict(d))
	if r.RateLimited != 0 || r.Extra != 0 {
		t.Fatalf("%d 429s and %d extra requests over %d calls, want none", r.RateLimited, r.Extra, r.Calls)
	}
	if verdict(d) == "yes" {
		t.Errorf("the naive baseline meets luft's targets: they do not tell luft from it")
	}
}
