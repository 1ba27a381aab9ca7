package schedbench

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// Size selects the full benchmark or its fast variant (the tests).
type Size int

// Sizes.
const (
	Full Size = iota
	Fast
)

func (s Size) String() string {
	if s == Fast {
		return "fast"
	}
	return "full"
}

// selfHosted is the W1 engine of the benchmark design (shared/notes/scheduling.md §4):
// 2 replicas × 4 slots, 50 µs per uncached prompt token + 20 ms, 5 µs per cached token,
// 20 ms per output token, ×1.5 decode with every slot busy, 128k-token prefix cache per
// replica in blocks of 16.
func selfHosted() testkit.Config {
	return testkit.Config{
		Replicas: 2, Slots: 4,
		PrefillPerToken: 50 * time.Microsecond, PrefillOverhead: 20 * time.Millisecond,
		CachedPrefillPerToken: 5 * time.Microsecond, DecodePerToken: 20 * time.Millisecond,
		LoadFactor: 1.5, CacheTokens: 128 * 1024, BlockSize: 16,
	}
}

// sigmaP95x4 is the lognormal σ whose p95 is 4× its median (interactive tool pauses:
// median 1 s, p95 4 s).
const sigmaP95x4 = 0.8427

// agentRun generates a run: a task of taskTokens, then turns turns whose output and tool
// results are drawn around the given means, tool pauses lognormal.
func agentRun(rng *rand.Rand, task, turns, out, outSpread, tool, toolSpread int, pause time.Duration, sigma float64) RunSpec {
	spec := RunSpec{Task: text(rng, task)}
	for i := 0; i < turns; i++ {
		spec.Turns = append(spec.Turns, TurnSpec{
			Output:     max(1, Around(rng, out, outSpread)),
			ToolTokens: max(1, Around(rng, tool, toolSpread)),
			Pause:      LogNormal(rng, pause, sigma),
		})
	}
	return spec
}

// W1 is saturation: 48 batch agent runs flood 2 replicas × 4 slots from t=0 (10±3 turns,
// a 2k-token shared system prompt, contexts growing to ~8k, 150±50 output tokens, tool
// pauses lognormal median 0.3 s); 4 interactive runs join at t=20 s (8 turns, 60±20
// output tokens, tool pauses median 1 s, p95 4 s). The runs' contexts together exceed a
// replica's prefix cache, so routing decides the hit ratio.
func W1(size Size) *Workload {
	batch, turns, turnSpread := 48, 10, 3
	eng := selfHosted()
	if size == Fast {
		// The same flood with shorter runs; the cache shrinks with the contexts.
		turns, turnSpread = 5, 1
		eng.CacheTokens = 64 * 1024
	}
	return &Workload{
		Name: "W1", Engine: eng, Slots: 4, GateCap: 8, Seed: 1, Horizon: 4 * time.Hour,
		Streams: []*Stream{
			{Name: "batch", Caller: "batch", Class: agent.ClassBatch, Parallel: batch, Runs: 1, SystemTokens: 2000,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 400, Around(rng, turns, turnSpread), 150, 50, 450, 150, 300*time.Millisecond, 0.5)
				}},
			{Name: "interactive", Caller: "user", Class: agent.ClassInteractive, Start: 20 * time.Second,
				Parallel: 4, Runs: 1, SystemTokens: 1000,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 100, 8, 60, 20, 150, 50, time.Second, sigmaP95x4)
				}},
		},
	}
}

// W2 is fan-out: one orchestrator run plans (one turn), fans out to N sub-agents (1–3
// turns each, a 1k-token shared prefix + 300 unique tokens) and summarises when all are
// done; one interactive caller works beside it from t=10 s.
func W2(size Size, subs int) *Workload {
	if subs == 0 {
		subs = 1000
		if size == Fast {
			subs = 150
		}
	}
	return &Workload{
		Name: "W2", Engine: selfHosted(), Slots: 4, GateCap: 8, Seed: 2, Horizon: 48 * time.Hour,
		Streams: []*Stream{
			{Name: "plan", Caller: "orchestrator", Class: agent.ClassBatch, Parallel: 1, Runs: 1, SystemTokens: 500,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 300, 1, 150, 0, 1, 0, 0, 0)
				}},
			{Name: "sub", After: "plan", Caller: "orchestrator", Class: agent.ClassBatch, Parallel: subs, Runs: 1,
				SystemTokens: 1000,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 300, 1+rng.IntN(3), 100, 40, 150, 50, 500*time.Millisecond, 0.5)
				}},
			{Name: "final", After: "sub", Caller: "orchestrator", Class: agent.ClassBatch, Parallel: 1, Runs: 1,
				SystemTokens: 500,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 2000, 1, 200, 0, 1, 0, 0, 0)
				}},
			{Name: "interactive", Caller: "user", Class: agent.ClassInteractive, Start: 10 * time.Second,
				Parallel: 1, Runs: 1, SystemTokens: 1000,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 100, 10, 60, 20, 150, 50, time.Second, sigmaP95x4)
				}},
		},
	}
}

// W3 is multi-tenant fairness: four callers, all backlogged, on the W1 engine. A is heavy
// (20 closed-loop runs of ~8k-token prompts), B light (20 closed-loop runs of ~500-token
// prompts), C bursty (30 one-turn runs every 30 s), D a late joiner (20 closed-loop runs
// from t=60 s). Every run is batch; new runs stop at the end of the measured period.
func W3(size Size) *Workload {
	period := 600 * time.Second
	if size == Fast {
		period = 240 * time.Second
	}
	return W3Long(size, period)
}

// W3Long is W3 with a measured period of the given length.
func W3Long(size Size, period time.Duration) *Workload {
	pause := 300 * time.Millisecond
	return &Workload{
		Name: "W3", Engine: selfHosted(), Slots: 4, GateCap: 8, Seed: 3, Horizon: 24 * time.Hour,
		Streams: []*Stream{
			{Name: "A", Caller: "A-heavy", Class: agent.ClassBatch, Parallel: 20, For: period, SystemTokens: 2000,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, Around(rng, 6000, 500), 3, 100, 30, 100, 30, pause, 0.5)
				}},
			{Name: "B", Caller: "B-light", Class: agent.ClassBatch, Parallel: 20, For: period, SystemTokens: 200,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 300, 3, 100, 30, 50, 20, pause, 0.5)
				}},
			{Name: "C", Caller: "C-bursty", Class: agent.ClassBatch, Parallel: 30, Every: 30 * time.Second,
				For: period, SystemTokens: 1000,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 1000, 1, 100, 30, 1, 0, 0, 0)
				}},
			{Name: "D", Caller: "D-late", Class: agent.ClassBatch, Start: W3Join, Parallel: 20,
				For: period - W3Join, SystemTokens: 1000,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 1000, 3, 100, 30, 100, 30, pause, 0.5)
				}},
		},
	}
}

// W3Callers are W3's callers.
var W3Callers = []string{"A-heavy", "B-light", "C-bursty", "D-late"}

// W3Join is when the late joiner starts.
const W3Join = 60 * time.Second

// W4 is a hosted API: one upstream with effectively unlimited concurrency, RPM 60 and
// TPM 20,000 (continuous refill; a refused request still costs a request), 40 batch runs
// from t=0 and 2 interactive runs from t=60 s. luft's lane has the runtime's default 8
// slots and no configured budget: it learns the limits from the headers.
//
// The interactive runs pace like a person at a hosted API (pauses median 5 s, p95 20 s).
// With W1's 1 s pauses (W4Paced = time.Second) the two runs alone demand more than the
// TPM refill (RunW4 reports both pacings' demand in isolation): no policy can then keep
// them near their isolation latency, which a full bucket serves at once.
func W4(size Size) *Workload { return W4Paced(size, 5*time.Second) }

// W4Paced is W4 with the interactive runs' median tool pause set to pause.
func W4Paced(size Size, pause time.Duration) *Workload {
	batch, turns, inter := 40, 4, 60*time.Second
	if size == Fast {
		batch, turns, inter = 12, 3, 30*time.Second
	}
	return &Workload{
		Name: "W4",
		Engine: testkit.Config{
			Replicas: 1, Slots: 1000,
			PrefillPerToken: 100 * time.Microsecond, PrefillOverhead: 200 * time.Millisecond,
			DecodePerToken: 20 * time.Millisecond, CacheTokens: -1,
			Limits: testkit.Limits{RPM: 60, TPM: 20000},
		},
		Slots: 8, GateCap: 8, Seed: 4, Horizon: 24 * time.Hour,
		Streams: []*Stream{
			{Name: "batch", Caller: "batch", Class: agent.ClassBatch, Parallel: batch, Runs: 1, SystemTokens: 300,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, Around(rng, 400, 100), turns, 150, 50, 150, 50, 500*time.Millisecond, 0.5)
				}},
			{Name: "interactive", Caller: "user", Class: agent.ClassInteractive, Start: inter, Parallel: 2, Runs: 1,
				SystemTokens: 300,
				Gen: func(rng *rand.Rand, c, j int) RunSpec {
					return agentRun(rng, 100, 6, 60, 20, 100, 30, pause, sigmaP95x4)
				}},
		},
	}
}

// Only returns a copy of w with just the named streams (isolation runs).
func (w *Workload) Only(names ...string) *Workload {
	c := *w
	c.Streams = nil
	for _, s := range w.Streams {
		if slices.Contains(names, s.Name) {
			cs := *s
			c.Streams = append(c.Streams, &cs)
		}
	}
	return &c
}

// Simulate runs w under the named policy and measures it.
func Simulate(w *Workload, policy string) *Result {
	return Measure(NewHarness(w, NewPolicy(policy, w)).Run())
}
