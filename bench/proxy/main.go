// Command proxy measures own-loop agents through luft's proxy against the same agents
// talking to a hosted API directly. Sixteen agents, each an own-loop client speaking the
// OpenAI chat completions API over HTTP (three user steps; at each the model calls a
// tool, the agent runs it and sends the result, the model answers: 6 turns), share one
// key of the test kit's fake engine: TPM 6,000 and RPM 30 refilled continuously,
// OpenAI's rate-limit headers on every response, completions of heavy-tailed length
// (lognormal, median 60 tokens, tail to 600, seeded) billed when they end, since the
// agents send no max_tokens.
//
//   - direct: the agents' base_url is the engine; a 429 is retried the way the OpenAI
//     SDKs do (retry-after-ms, else retry-after, up to 2 minutes; else 0.5 s × 2ⁿ up to
//     8 s, jittered), -retries times (the SDKs' default is 2). The engine charges a
//     refused request to the request budget, as OpenAI does.
//   - direct-free: the same, but the engine does not charge refusals and the agents
//     retry until answered, for a baseline that finishes. (Agents that retry until
//     answered against an engine that charges refusals never finish: each retry is
//     charged, and together they keep the request budget empty.)
//   - proxy: the agents' base_url is luft's proxy (package proxy) in front of the same
//     engine, over an Executor configured as `luft proxy serve` configures an
//     OpenAI-compatible backend without limits (8 slots, scouting): budgets are learned
//     from the headers. The agents are unchanged: no luft header, their runs recognised
//     by the tool_call ids they echo.
//
// Engine, proxy, scheduler and agents share one scaled clock over loopback HTTP, so the
// minutes of modelled traffic take seconds. Reported per target and seed: the requests
// the engine saw and how many it answered 429, tokens charged, the time from the first
// request to the last answer, and that time against the net floor: what the key's
// budgets force on the tokens and requests actually answered, beyond the buckets'
// initial fill — max((tokens − TPM) ÷ TPM, (requests − RPM) ÷ RPM). Then the median and
// spread (min–max) over the seeds side by side, and whether the proxy met its targets in
// every seed: no 429, time ≤ 1.03 × the net floor.
//
//	go run ./bench/proxy [-seeds 10] [-speed 30] [-retries 8] [-model classic] [-wire chat] [-json out.json]
//
// -wire picks what the agents speak: chat (the default), responses (the Responses API,
// the whole input every turn, as Codex and the Agents SDK send it), messages (Anthropic
// Messages, with max_tokens 1,024 since that wire requires it), or all, one table each.
//
// -model picks the provider model the engine plays (internal/testkit's Provider): classic,
// the default and the engine described above, or openai, strict, anthropic (6,000 input
// and 1,500 output tokens a minute), fixed-window or silent, on the same key.
//
// The same measurement runs on a virtual clock (a testing/synctest bubble, in-memory
// HTTP) in this package's test, which holds the targets.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/internal/testkit"
)

// Targets (issue 16): no 429 in any seed, time ≤ 1.03 × the net floor.
const maxRatio = 1.03

func main() {
	seeds := flag.Int("seeds", 10, "seeds (each runs both targets)")
	speed := flag.Float64("speed", 30, "time compression: modelled seconds per wall second")
	retries := flag.Int("retries", 8, "retries an agent makes per request (openai-python's default is 2)")
	out := flag.String("json", "", "write every result as JSON to this file")
	verbose := flag.Bool("v", false, "print every request the engine saw")
	modelF := flag.String("model", "classic", "the provider model the engine plays: classic, openai, strict, anthropic, fixed-window or silent")
	wireF := flag.String("wire", "chat", "the wire the agents speak: chat, responses, messages, or all (each in turn)")
	flag.Parse()
	run := []string{*wireF}
	if *wireF == "all" {
		run = wires
	} else if !slices.Contains(wires, *wireF) {
		fmt.Fprintf(os.Stderr, "-wire: %q is not one of chat, responses, messages, all\n", *wireF)
		os.Exit(2)
	}
	prov, err := testkit.ParseProvider(*modelF)
	if err != nil {
		fmt.Fprintln(os.Stderr, "-model:", err)
		os.Exit(2)
	}
	if *verbose {
		trace = os.Stdout
	}
	machine.Print(os.Stdout)
	var all []Result
	ok := true
	for _, wire := range run {
		fmt.Printf("own-loop agents (%d × %d turns, %s over HTTP, tool calls between turns) on one key: fake engine as provider model %s, TPM %d, RPM %d, %s, completions lognormal (median 60, tail 600); time ×%g\n\n",
			Full.Agents, 2*Full.Steps, wireTitle[wire], prov, tpm, rpm, maxTokensOf(wire), *speed)
		byTarget := map[string][]Result{}
		printRowHeader(os.Stdout)
		for s := 1; s <= *seeds; s++ {
			for _, tgt := range []target{direct{}, direct{free: true}, viaProxy{}} {
				clock := testkit.NewScaledClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), *speed)
				r, err := measure(context.Background(), env{clock: clock, net: newLoopback(), model: prov, wire: wire}, tgt, Full, uint64(s), *retries)
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s %s seed %d: %v\n", wire, tgt.name(), s, err)
					os.Exit(1)
				}
				r.Wire = wire
				printRow(os.Stdout, r)
				byTarget[r.Target] = append(byTarget[r.Target], r)
				all = append(all, r)
			}
		}
		fmt.Println()
		if !summarise(os.Stdout, byTarget) {
			ok = false
		}
		fmt.Println()
	}
	if *out != "" {
		b, _ := json.MarshalIndent(all, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if !ok {
		os.Exit(1)
	}
}

// wireTitle names a wire in the table's heading.
var wireTitle = map[string]string{wireChat: "OpenAI chat completions", wireResponses: "OpenAI Responses API", wireMessages: "Anthropic Messages"}

// maxTokensOf says what a wire's agents send as their completion cap.
func maxTokensOf(wire string) string {
	if wire == wireMessages {
		return fmt.Sprintf("max_tokens %d (required by the wire)", messagesMaxTokens)
	}
	return "no max_tokens"
}

func printRowHeader(w io.Writer) {
	fmt.Fprintf(w, "%-7s %4s %6s %5s %5s %6s %8s %9s %9s %7s\n", "target", "seed", "turns", "failed", "reqs", "429", "tokens", "time", "net floor", "ratio")
}

func printRow(w io.Writer, r Result) {
	fmt.Fprintf(w, "%-7s %4d %6d %6d %5d %5d %8d %8.1fs %8.1fs %6.3fx\n", r.Target, r.Seed, r.Turns, r.FailedRuns,
		r.Requests, r.RateLimited, r.Tokens, r.Seconds, r.Floor, r.Ratio)
}

// columns are the targets in the order the table shows them.
var columns = []struct{ key, title string }{
	{"direct", "direct (SDK retries)"},
	{"direct-free", "direct-free (patient)"},
	{"proxy", "through luft's proxy"},
}

// summarise prints the side-by-side table of medians and spreads and reports whether the
// proxy met both targets in every seed.
func summarise(w io.Writer, by map[string][]Result) bool {
	col := func(rs []Result, f func(Result) float64, prec int) string {
		if len(rs) == 0 {
			return "-"
		}
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return fmt.Sprintf("%s [%s–%s]", num(median(v), prec), num(slices.Min(v), prec), num(slices.Max(v), prec))
	}
	rows := []struct {
		name string
		f    func(Result) float64
		prec int
	}{
		{"turns answered", func(r Result) float64 { return float64(r.Turns) }, 0},
		{"agents that gave up", func(r Result) float64 { return float64(r.FailedRuns) }, 0},
		{"requests the engine saw", func(r Result) float64 { return float64(r.Requests) }, 0},
		{"429s from the engine", func(r Result) float64 { return float64(r.RateLimited) }, 0},
		{"429s the agents got", func(r Result) float64 { return float64(r.SeenByAgent) }, 0},
		{"tokens charged", func(r Result) float64 { return float64(r.Tokens) }, 0},
		{"time until the last agent stopped (s)", func(r Result) float64 { return r.Seconds }, 1},
		{"net floor (s)", func(r Result) float64 { return r.Floor }, 1},
		{"time ÷ net floor", func(r Result) float64 { return r.Ratio }, 3},
	}
	n := 0
	for _, rs := range by {
		n = max(n, len(rs))
	}
	fmt.Fprintf(w, "median [min–max] over %d seeds\n%-38s", n, "")
	for _, c := range columns {
		fmt.Fprintf(w, " %-26s", c.title)
	}
	fmt.Fprintln(w)
	for _, row := range rows {
		fmt.Fprintf(w, "%-38s", row.name)
		for _, c := range columns {
			fmt.Fprintf(w, " %-26s", col(by[c.key], row.f, row.prec))
		}
		fmt.Fprintln(w)
	}
	met := func(rs []Result, ok func(Result) bool) string {
		if len(rs) == 0 {
			return "not run"
		}
		for _, r := range rs {
			if !ok(r) {
				return "MISSED"
			}
		}
		return "met"
	}
	no429 := func(r Result) bool { return r.RateLimited == 0 && r.SeenByAgent == 0 && r.FailedRuns == 0 }
	fast := func(r Result) bool { return r.FailedRuns == 0 && r.Ratio > 0 && r.Ratio <= maxRatio }
	fmt.Fprintf(w, "\ntargets in every seed (0 × 429; every agent done within %.2f × the net floor):\n", maxRatio)
	ok := true
	for _, c := range columns {
		a, b := met(by[c.key], no429), met(by[c.key], fast)
		fmt.Fprintf(w, "  %-24s 0 × 429 %-8s time %s\n", c.title, a, b)
		if c.key == "proxy" {
			ok = a == "met" && b == "met"
		}
	}
	return ok
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
