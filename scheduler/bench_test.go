package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
)

// BenchmarkDecision measures what one event costs the decision core with a deep queue
// (issue 4, W2: decision cost p99 ≤ 50 µs with 10,000 queued turns). Each iteration is
// two events on a saturated 64-slot lane: a Complete, which admits the best queued turn,
// and a Submit, which queues a new one, so the queue depth stays constant. Turns mix 16
// callers, both classes and continuations; the "budgets" variants also carry
// configured TPM/RPM buckets and rate-limit headers on every completion. Besides ns/op
// it reports the p50 and p99 of single events, timed one by one.
//
//	go test -run '^$' -bench Decision -benchtime 200000x ./scheduler/
func BenchmarkDecision(b *testing.B) {
	for _, queued := range []int{1_000, 10_000, 100_000} {
		for _, budgets := range []bool{false, true} {
			name := fmt.Sprintf("queued=%d", queued)
			if budgets {
				name += "/budgets"
			}
			b.Run(name, func(b *testing.B) { benchDecision(b, queued, budgets) })
		}
	}
}

func benchDecision(b *testing.B, queued int, budgets bool) {
	const slots = 64
	lc := LaneConfig{Slots: slots}
	var tel Telemetry
	if budgets {
		// Budgets large enough never to block: the point is their bookkeeping.
		lc.TPM, lc.RPM = 1<<40, 1<<30
		tel = ParseTelemetry(hdr(
			"x-ratelimit-limit-tokens", "1099511627776", "x-ratelimit-remaining-tokens", "1099511000000",
			"x-ratelimit-reset-tokens", "1ms",
			"x-ratelimit-limit-requests", "1073741824", "x-ratelimit-remaining-requests", "1073741000",
			"x-ratelimit-reset-requests", "1ms"), t0)
	}
	// InteractiveSlots off: the loop keeps the lane saturated, and a last slot held for
	// interactive work would let the running set drain (every 10th turn is
	// interactive, and each Complete could then admit nothing).
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: lc}, InteractiveSlots: -1})
	now := t0
	var id TurnID
	mk := func() Job {
		id++
		n := int(id)
		cl := agent.ClassBatch
		if n%10 == 0 {
			cl = agent.ClassInteractive
		}
		return Job{ID: id, Turn: Turn{
			RunID: fmt.Sprint("run-", n%500), Caller: fmt.Sprint("caller-", n%16), Lane: testLane,
			Class: cl, EstTokens: 500 + n%4000, Continuation: n%3 != 0,
		}}
	}
	running := make([]TurnID, 0, slots)
	for i := 0; i < queued+slots; i++ {
		now = now.Add(time.Microsecond)
		running = append(running, ids(c.Submit(mk(), now), ActAdmit)...)
	}
	if len(running) != slots || c.Stats(now)[0].QueuedBatch+c.Stats(now)[0].QueuedInteractive != queued {
		b.Fatalf("setup: running %d, stats %+v", len(running), c.Stats(now)[0])
	}
	// Pre-build the jobs so the timed loop measures the core, not fmt.
	jobs := make([]Job, b.N)
	for i := range jobs {
		jobs[i] = mk()
	}
	lat := make([]time.Duration, 0, 2*b.N)
	res := Result{Status: StatusOK, Usage: agent.Usage{Input: 1500, Output: 300}, Telemetry: tel}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Millisecond)
		done := running[0]
		running = running[1:]

		start := time.Now()
		acts := c.Complete(done, res, now)
		lat = append(lat, time.Since(start))
		for _, a := range acts {
			if a.Kind == ActAdmit {
				running = append(running, a.ID)
			}
		}

		start = time.Now()
		c.Submit(jobs[i], now)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	if len(running) != slots {
		b.Fatalf("running %d, want %d", len(running), slots)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/event")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/event")
}
