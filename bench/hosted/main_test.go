package main

import "testing"

// The fast variant of workload b (4 branches × 6 calls on one key), time compressed
// further: no 429 and no request beyond the run's own calls, with limits learned only
// from headers, no max_tokens sent and heavy-tailed completions billed when they end.
// The time ratio is the benchmark's to measure, not this test's.
func TestHostedNoRateLimitHits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a few seconds of modelled traffic")
	}
	r, err := runOne(workload{"b", 4, 6}, 7, 600)
	if err != nil {
		t.Fatal(err)
	}
	if r.RateLimited != 0 || r.Extra != 0 {
		t.Fatalf("%d 429s and %d extra requests over %d calls, want none", r.RateLimited, r.Extra, r.Calls)
	}
}
