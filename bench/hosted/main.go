// Command hosted measures luft against a hosted API's rate limits: the real openai
// backend (go-openai over loopback HTTP) and the real runtime and admission scheduler,
// in front of the test kit's fake engine limited to 6,000 tokens and 30 requests a minute
// (continuous refill), with time compressed so minutes of traffic take seconds: engine
// and scheduler share one scaled clock. No limits are configured; luft learns them from
// the response headers.
//
// Workloads, each one run of a workflow whose agent calls send ~1,300-token prompts:
//
//	a: 12 sequential calls
//	b: 4 parallel branches × 6 sequential calls, one API key
//	c: 16 parallel branches × 6 sequential calls
//
// Reported per workload and seed: requests the engine saw, 429s (target 0), requests
// beyond the run's agent calls — telemetry probes and retries (target ≤ 2 per run) —
// and the run's time against the physical floor, total tokens ÷ TPM (target ≤ 1.05×);
// also against the stricter floor that credits the full bucket at the start.
//
//	go run ./bench/hosted [-seeds 3] [-speed 120] [-json out.json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

const (
	tpm       = 6000
	rpm       = 30
	maxTokens = 150
)

// workflow runs args.branches branches of args.calls sequential agent calls; the
// prompts come from args so every seed sends its own sizes.
const workflow = `function main()
  local branches = {}
  for b = 1, args.branches do branches[b] = b end
  local out = parallel(branches, function(b)
    local n = 0
    for i = 1, args.calls do
      local r = agent{prompt = args.prompts[(b - 1) * args.calls + i], max_tokens = args.max_tokens}
      n = n + r.tokens
    end
    return n
  end)
  local total = 0
  for _, n in ipairs(out) do total = total + n end
  report({tokens = total})
end`

type workload struct {
	name            string
	branches, calls int
}

type result struct {
	Workload     string  `json:"workload"`
	Seed         uint64  `json:"seed"`
	Calls        int     `json:"calls"`
	Requests     int     `json:"requests"`
	RateLimited  int     `json:"rate_limited"`
	Extra        int     `json:"extra_requests"`
	Tokens       int     `json:"tokens"`
	Seconds      float64 `json:"seconds"` // modelled (scaled) time
	Floor        float64 `json:"floor_seconds"`
	StrictFloor  float64 `json:"strict_floor_seconds"`
	Ratio        float64 `json:"ratio"`
	StrictRatio  float64 `json:"strict_ratio"`
	WallSeconds  float64 `json:"wall_seconds"`
	Status       string  `json:"status"`
	RateLimitEvs int     `json:"rate_limit_waits"`
}

func main() {
	seeds := flag.Int("seeds", 3, "seeds per workload")
	speed := flag.Float64("speed", 120, "time compression: modelled seconds per wall second")
	only := flag.String("w", "a,b,c", "workloads to run")
	out := flag.String("json", "", "write the results as JSON to this file")
	flag.Parse()
	all := []workload{{"a", 1, 12}, {"b", 4, 6}, {"c", 16, 6}}
	fmt.Printf("luft hosted-API limits: openai backend → fake engine (TPM %d, RPM %d, continuous refill), limits learned from headers, time ×%g\n\n", tpm, rpm, *speed)
	fmt.Printf("%-3s %5s %6s %5s %5s %6s %8s %9s %9s %7s %9s %7s\n", "w", "seed", "calls", "reqs", "429", "extra", "tokens", "time", "floor", "ratio", "strict", "ratio")
	var results []result
	for _, w := range all {
		if !strings.Contains(*only, w.name) {
			continue
		}
		for s := 1; s <= *seeds; s++ {
			r, err := runOne(w, uint64(s), *speed)
			if err != nil {
				fmt.Fprintf(os.Stderr, "workload %s seed %d: %v\n", w.name, s, err)
				os.Exit(1)
			}
			results = append(results, r)
			fmt.Printf("%-3s %5d %6d %5d %5d %6d %8d %8.1fs %8.1fs %6.3fx %8.1fs %6.3fx\n", r.Workload, r.Seed, r.Calls, r.Requests,
				r.RateLimited, r.Extra, r.Tokens, r.Seconds, r.Floor, r.Ratio, r.StrictFloor, r.StrictRatio)
		}
	}
	if *out != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// schedClock is the scaled clock as the scheduler's Clock.
type schedClock struct{ c *testkit.ScaledClock }

func (s schedClock) Now() time.Time { return s.c.Now() }
func (s schedClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	return s.c.AfterFunc(d, f)
}

func runOne(w workload, seed uint64, speed float64) (result, error) {
	clock := testkit.NewScaledClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), speed)
	eng := testkit.NewEngine(testkit.Config{
		Clock: clock, Slots: 64, DefaultMaxTokens: maxTokens,
		PrefillPerToken: 200 * time.Microsecond, DecodePerToken: 10 * time.Millisecond,
		Limits: testkit.Limits{TPM: tpm, RPM: rpm, Window: testkit.Continuous},
	})
	srv := testkit.NewServer(eng)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	defer srv.Close()
	dir, err := os.MkdirTemp("", "luft-hosted-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		return result{}, err
	}
	defer st.Close()
	backend, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: "hosted", BaseURL: url, APIKey: "k", Model: "luft-fake"})
	if err != nil {
		return result{}, err
	}
	ex := scheduler.NewExecutor(scheduler.Config{Lanes: map[string]scheduler.LaneConfig{"hosted/*": {Scout: true}}}, schedClock{clock})
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("hosted", backend),
		Scheduler: ex, Now: clock.Now, Caller: "bench"})
	if err != nil {
		return result{}, err
	}
	rng := rand.New(rand.NewPCG(seed, 0x1f7))
	n := w.branches * w.calls
	prompts := make([]any, n)
	for i := range prompts {
		words := 1200 + rng.IntN(201) // ~1,300 tokens: one per word of at most four letters
		var b strings.Builder
		fmt.Fprintf(&b, "task %d seed %d:", i, seed)
		for range words {
			b.WriteString(" data")
		}
		prompts[i] = b.String()
	}
	wallStart := time.Now()
	start := clock.Now()
	run, err := svc.Start(context.Background(), runtime.Spec{Path: "hosted.lua", Source: []byte(workflow),
		Args:        map[string]any{"branches": float64(w.branches), "calls": float64(w.calls), "prompts": prompts, "max_tokens": float64(maxTokens)},
		Concurrency: w.branches})
	if err != nil {
		return result{}, err
	}
	var waits int
	for ev := range run.Subscribe(context.Background(), 0) {
		if ev.Type == "rate_limit" {
			waits++
		}
	}
	res := run.Wait()
	elapsed := clock.Now().Sub(start)
	r := result{Workload: w.name, Seed: seed, Calls: n, Status: string(res.Status), WallSeconds: time.Since(wallStart).Seconds(), RateLimitEvs: waits}
	if res.Status != runtime.StatusCompleted {
		return r, fmt.Errorf("run %s: %v", res.Status, res.Err)
	}
	for _, rec := range eng.Log() {
		r.Requests++
		if rec.Status == 429 {
			r.RateLimited++
			continue
		}
		r.Tokens += rec.ChargedTokens
	}
	r.Extra = r.Requests - n
	r.Seconds = elapsed.Seconds()
	r.Floor = float64(r.Tokens) / tpm * 60
	r.StrictFloor = max(0, float64(r.Tokens-tpm)) / tpm * 60
	r.Ratio = r.Seconds / r.Floor
	if r.StrictFloor > 0 {
		r.StrictRatio = r.Seconds / r.StrictFloor
	}
	return r, nil
}
