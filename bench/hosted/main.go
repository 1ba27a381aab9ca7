// Command hosted measures luft against a hosted API's rate limits: the real openai
// backend (go-openai over HTTP) and the real runtime and admission scheduler, in front
// of the test kit's fake engine limited to 6,000 tokens and 30 requests a minute, with
// time compressed so minutes of traffic take seconds: engine, scheduler and runtime
// share one scaled clock. No limits are configured; luft learns them from the responses.
//
// -model picks the provider models the engine plays (internal/testkit's Provider;
// -model all runs every one): classic (the default, the engine this bench has always
// measured: continuous refill, the output billed when each request ends, retry-after and
// retry-after-ms on every 429), openai, strict, anthropic (6,000 input and 1,500 output
// tokens a minute), fixed-window and silent. The key is the same in every model.
//
// The agents send no max_tokens, and the engine's completion lengths are heavy-tailed
// (lognormal, median 60 tokens, tail to 600, seeded), so no client knows a request's
// charge before it ends.
//
// Workloads, each one run of a workflow whose agent calls send ~1,300-token prompts:
//
//	a: 1 × 12 sequential calls
//	b: 4 parallel branches × 6 sequential calls, one API key
//	c: 16 parallel branches × 6 sequential calls
//
// Each runs through luft and, with -direct, through the naive baseline: each branch
// calls the engine itself and retries a 429 the way the OpenAI SDKs do (-retries times).
// Reported per model, workload, client and seed: requests the engine saw, 429s, requests
// beyond the run's agent calls (telemetry probes and retries), and the run's time
// against the net floor (testkit.NetFloor: what the model's buckets force on the charges
// the engine made, beyond their initial fill; no client can finish sooner). Then a table
// per model × workload of the medians and spreads over the seeds, luft beside the
// baseline, and whether each met luft's targets in every seed. Classic keeps issue 11's
// targets (0 × 429, ≤ 2 extra requests, ≤ 1.03 × the floor); the other models have issue
// 22's (0 × 429, silent at most 3 while it learns; ≤ 1.05 × the floor). A target is all
// of its parts at once: the time alone is met by the baseline too (on classic, 4 × 6, it
// finishes within 1.03 × the floor after its 429s are retried), the 429s are not.
//
//	go run ./bench/hosted [-model all] [-seeds 10] [-w a,b,c] [-speed 30] [-direct] [-json out.json]
//
// On a busy machine the scaled clock lets stalls into the figures (the machine line
// says how busy); the same measurement runs on a virtual clock in a testing/synctest
// bubble, deterministic and independent of the load, with
//
//	go test ./bench/hosted -run TestModelsTable -v [-args -model all -seeds 3]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/internal/testkit"
)

var (
	traceF  = flag.Bool("v", false, "print every request the engine saw")
	verbose = new(bool)
)

// options are what a table run measures.
type options struct {
	models  []model
	works   []workload
	seeds   int
	direct  bool
	retries int
}

func main() {
	seeds := flag.Int("seeds", 10, "seeds per workload")
	speed := flag.Float64("speed", 30, "time compression: modelled seconds per wall second (higher is faster but lets a busy machine's stalls into the figures)")
	only := flag.String("w", "a,b,c", "workloads to run")
	models := flag.String("model", "classic", "provider models, comma-separated, or all: classic, openai, strict, anthropic, fixed-window, silent")
	direct := flag.Bool("direct", false, "also run the naive baseline (SDK-style retries) beside luft")
	retries := flag.Int("retries", 8, "retries the baseline makes per call (the OpenAI SDKs' default is 2)")
	out := flag.String("json", "", "write the results as JSON to this file")
	flag.Parse()
	*verbose = *traceF
	opts, err := newOptions(*models, *only, *seeds, *direct, *retries)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	machine.Print(os.Stdout)
	fmt.Printf("luft hosted-API limits: openai backend → fake engine (TPM %d, RPM %d), no max_tokens, completions lognormal (median 60, tail 600), limits learned from the responses, time ×%g\n\n", tpm, rpm, *speed)
	results, err := runTable(os.Stdout, opts, func() env {
		return env{clock: testkit.NewScaledClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), *speed), net: newLoopback()}
	}, measure)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	machine.PrintLoad(os.Stdout)
	if *out != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*out, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if !allMet(results) {
		os.Exit(1)
	}
}

func newOptions(models, works string, seeds int, direct bool, retries int) (options, error) {
	ms, err := parseModels(models)
	if err != nil {
		return options{}, err
	}
	o := options{models: ms, seeds: seeds, direct: direct, retries: retries}
	for _, w := range workloads {
		if strings.Contains(works, w.name) {
			o.works = append(o.works, w)
		}
	}
	if len(o.works) == 0 || seeds < 1 || retries < 0 {
		return o, fmt.Errorf("-w %q, -seeds %d, -retries %d: want a workload among a, b, c, a seed or more, retries ≥ 0", works, seeds, retries)
	}
	return o, nil
}

// measureFunc runs one measurement (measure, or the test's in a synctest bubble).
type measureFunc func(e env, m model, w workload, seed uint64, client string, retries int) (result, error)

// runTable runs every model × workload × seed × client, printing a row for each, then
// the summary table.
func runTable(w io.Writer, o options, newEnv func() env, run measureFunc) ([]result, error) {
	clients := []string{"luft"}
	if o.direct {
		clients = append(clients, "direct")
	}
	fmt.Fprintf(w, "%-12s %-3s %-6s %5s %6s %7s %5s %5s %6s %8s %9s %9s %7s\n", "model", "w", "client", "seed", "calls", "failed", "reqs", "429", "extra", "tokens", "time", "net floor", "ratio")
	var all []result
	for _, m := range o.models {
		for _, wl := range o.works {
			for s := 1; s <= o.seeds; s++ {
				for _, c := range clients {
					r, err := run(newEnv(), m, wl, uint64(s), c, o.retries)
					if err != nil {
						return all, fmt.Errorf("%s %s %s seed %d: %w", m.name(), wl.name, c, s, err)
					}
					fmt.Fprintf(w, "%-12s %-3s %-6s %5d %6d %7d %5d %5d %6d %8d %8.1fs %8.1fs %6.3fx\n", r.Model, r.Workload, r.Client, r.Seed,
						r.Calls, r.Failed, r.Requests, r.RateLimited, r.Extra, r.Tokens, r.Seconds, r.Floor, r.Ratio)
					if len(r.ByDimension) > 0 {
						fmt.Fprintf(w, "%-12s   429s by budget: %s\n", "", byDimension(r.ByDimension))
					}
					if r.FirstError != "" {
						fmt.Fprintf(w, "%-12s   first failed call: %.160s\n", "", r.FirstError)
					}
					all = append(all, r)
				}
			}
		}
	}
	fmt.Fprintln(w)
	summarise(w, o, all)
	return all, nil
}

// targets are luft's per model: at most max429 429s and ratio ≤ maxRatio in every seed,
// and for classic at most 2 extra requests (issue 11).
func targets(model string) (max429 int, maxExtra int, maxRatio float64) {
	switch model {
	case "classic":
		return 0, 2, 1.03
	case "silent":
		return 3, -1, 1.05
	}
	return 0, -1, 1.05
}

// verdict is "yes" when r meets its model's targets (luft's, whoever r's client is),
// else "no:" and the parts it misses. The time ratio alone does not discriminate: a naive
// client that retries patiently finishes within it too, after hundreds of 429s; the
// 429s, the failed calls and the extra requests are what it misses.
func verdict(r result) string {
	a, b, c := met(r)
	var miss []string
	if !a {
		miss = append(miss, "429s/failed")
	}
	if !b {
		miss = append(miss, "extra")
	}
	if !c {
		miss = append(miss, "time")
	}
	if len(miss) == 0 {
		return "yes"
	}
	return "no: " + strings.Join(miss, ",")
}

// met reports whether r meets its model's targets.
func met(r result) (no429, extra, ratio bool) {
	m429, mx, mr := targets(r.Model)
	return r.RateLimited <= m429 && r.Failed == 0, mx < 0 || r.Extra <= mx, r.Ratio > 0 && r.Ratio <= mr
}

func allMet(rs []result) bool {
	for _, r := range rs {
		if r.Client != "luft" {
			continue
		}
		if a, b, c := met(r); !a || !b || !c {
			return false
		}
	}
	return true
}

// summarise prints, per model and workload, the median [min–max] over the seeds of
// 429s, extra requests and time ÷ net floor for luft and the baseline, and whether luft
// met its targets in every seed.
func summarise(w io.Writer, o options, rs []result) {
	fmt.Fprintf(w, "median [min–max] over %d seeds; luft's targets, all at once in every seed: 0 × 429 (silent ≤ 3), no failed call, time ≤ 1.05 × net floor (classic: ≤ 1.03×, ≤ 2 extra)\n", o.seeds)
	fmt.Fprintf(w, "met: whether every seed met them, luft's and the baseline's (held to luft's targets); the time alone is met by a baseline that retries patiently, the 429s are what it misses\n")
	fmt.Fprintf(w, "failed: luft's agent calls that ended without an answer; gave up: the baseline's branches whose call failed after every retry (their later calls never sent, so their time ÷ floor is not comparable)\n")
	fmt.Fprintf(w, "%-12s %-6s | %-16s %-16s %-14s %-22s %-7s", "model", "w", "luft 429s", "luft extra", "luft failed", "luft time ÷ floor", "met")
	if o.direct {
		fmt.Fprintf(w, " | %-16s %-16s %-22s %-10s %s", "direct 429s", "direct extra", "direct time ÷ floor", "direct gave up", "direct met")
	}
	fmt.Fprintln(w)
	for _, m := range o.models {
		for _, wl := range o.works {
			pick := func(client string) []result {
				var out []result
				for _, r := range rs {
					if r.Model == m.name() && r.Workload == wl.name && r.Client == client {
						out = append(out, r)
					}
				}
				return out
			}
			luft := pick("luft")
			ok := "yes"
			for _, r := range luft {
				if a, b, c := met(r); !a || !b || !c {
					ok = "MISSED"
				}
			}
			fmt.Fprintf(w, "%-12s %-6s | %-16s %-16s %-14s %-22s %-7s", m.name(), wl.shape(),
				stat(luft, func(r result) float64 { return float64(r.RateLimited) }, 0),
				stat(luft, func(r result) float64 { return float64(r.Extra) }, 0),
				stat(luft, func(r result) float64 { return float64(r.Failed) }, 0),
				stat(luft, func(r result) float64 { return r.Ratio }, 3), ok)
			if o.direct {
				d := pick("direct")
				dm := "yes"
				for _, r := range d {
					if v := verdict(r); v != "yes" {
						dm = v
						break
					}
				}
				fmt.Fprintf(w, " | %-16s %-16s %-22s %-10s %s",
					stat(d, func(r result) float64 { return float64(r.RateLimited) }, 0),
					stat(d, func(r result) float64 { return float64(r.Extra) }, 0),
					stat(d, func(r result) float64 { return r.Ratio }, 3),
					stat(d, func(r result) float64 { return float64(r.Failed) }, 0), dm)
			}
			fmt.Fprintln(w)
		}
	}
}

func stat(rs []result, f func(result) float64, prec int) string {
	if len(rs) == 0 {
		return "-"
	}
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return fmt.Sprintf("%s [%s–%s]", num(median(v), prec), num(slices.Min(v), prec), num(slices.Max(v), prec))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(f float64, prec int) string { return strconv.FormatFloat(f, 'f', prec, 64) }

// runOne is workload w of seed through luft on the classic model, time ×speed on the
// loopback.
func runOne(w workload, seed uint64, speed float64) (result, error) {
	e := env{clock: testkit.NewScaledClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), speed), net: newLoopback()}
	return measure(e, modelFor(testkit.ProviderClassic), w, seed, "luft", 0)
}

// trace prints every request the engine saw with the time it arrived.
func trace(log []testkit.Record, start time.Time) {
	for _, r := range log {
		fmt.Printf("      t=%7.2fs  prompt %5d  output %4d  charged %5d  status %d %-14s retry %5.2fs  took %.2fs\n",
			r.Arrival.Sub(start).Seconds(), r.PromptTokens, r.OutputTokens, r.ChargedTokens, r.Status, r.Error,
			r.RetryAfter.Seconds(), r.Finish.Sub(r.Arrival).Seconds())
	}
}

// byDimension lists 429 counts by budget, in name order.
func byDimension(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
