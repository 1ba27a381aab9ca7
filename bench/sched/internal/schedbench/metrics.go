package schedbench

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// Dist summarises a sample (seconds, or microseconds for decision cost).
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// quantile is the nearest-rank quantile of a sorted sample.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// NewDist summarises xs.
func NewDist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Dist{N: len(s), Mean: sum / float64(len(s)), P50: quantile(s, 0.5), P95: quantile(s, 0.95),
		P99: quantile(s, 0.99), Max: s[len(s)-1]}
}

// Result holds every figure of one policy on one workload. Times are seconds of virtual
// time from the start, except decision costs (microseconds of wall time).
type Result struct {
	Policy string `json:"policy"`

	Runs        int     `json:"runs"`
	RunsFailed  int     `json:"runs_failed"`
	Turns       int     `json:"turns"`
	TurnsOK     int     `json:"turns_ok"`
	Requests    int     `json:"requests"` // engine requests (attempts), from the log
	Stuck       bool    `json:"stuck,omitempty"`
	Unfinished  int     `json:"unfinished_runs,omitempty"`
	R429        int     `json:"rate_limited"`               // answered 429
	R429Late    int     `json:"rate_limited_after_headers"` // 429s of requests sent after the first response
	RateLimited float64 `json:"rate_limited_share"`         // R429 / Requests

	Latency map[string]Dist `json:"turn_latency"` // by class: submit → finish of the successful attempt
	// QueueWait by class: submit → start of the successful attempt (scheduler + engine queue).
	QueueWait map[string]Dist `json:"queue_wait"`

	Makespan      float64 `json:"makespan"`       // last run end
	BatchMakespan float64 `json:"batch_makespan"` // last batch run end
	// InteractiveJCT is the longest interactive run, start to end (s).
	InteractiveJCT float64 `json:"interactive_jct"`

	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	OracleCached int64   `json:"oracle_cached_tokens"`
	CacheHit     float64 `json:"cache_hit_ratio"`
	// Affinity is the share of continuation turns served on the replica of the run's
	// previous turn (multi-replica engines only).
	Affinity      float64 `json:"affinity"`
	OracleHit     float64 `json:"oracle_hit_ratio"`
	OutputTokens  int64   `json:"output_tokens"`
	ChargedTokens int64   `json:"charged_tokens"` // prompt + max_tokens of admitted requests (what TPM counts)
	// Work is the busy slot-seconds of successful requests (start → finish).
	Work float64 `json:"busy_slot_seconds"`

	Decision     *Dist `json:"decision_cost_us,omitempty"`
	DecisionDeep *Dist `json:"decision_cost_deep_us,omitempty"` // events meeting ≥ DeepQueue queued turns
	DeepQueue    int   `json:"deep_queue,omitempty"`
	MaxQueued    int   `json:"max_queued,omitempty"`
	CoreEvents   int   `json:"core_events,omitempty"`

	Waits    int `json:"luft_waits,omitempty"`
	Retries  int `json:"retries,omitempty"`
	Suspends int `json:"luft_suspends,omitempty"`
	Refused  int `json:"luft_refused,omitempty"`

	Fairness *Fairness `json:"fairness,omitempty"`
	LateJoin *LateJoin `json:"late_joiner,omitempty"`

	h *Harness
}

// Fairness is Jain's index over windows in which every caller was backlogged.
type Fairness struct {
	Callers    []string           `json:"callers"`
	Width      float64            `json:"window_s"`
	Coverage   float64            `json:"min_backlog_coverage"`
	From       float64            `json:"from"`
	To         float64            `json:"to"`
	Windows    int                `json:"windows"`
	JainMin    float64            `json:"jain_min"`
	JainMean   float64            `json:"jain_mean"`
	JainAll    float64            `json:"jain_overall"` // over the union of the counted windows
	Tokens     map[string]float64 `json:"tokens_in_windows"`
	SlotShares map[string]float64 `json:"slot_share_in_windows"`
}

// LateJoin is how the late joiner was admitted.
type LateJoin struct {
	Caller       string  `json:"caller"`
	Join         float64 `json:"join"`
	FirstStart   float64 `json:"first_start"`
	Delay        float64 `json:"delay_s"`
	OthersBefore int     `json:"others_admitted_before"` // turns of other callers started in [join, first start)
	Turnover     float64 `json:"slot_turnover_s"`        // mean interval between slot releases in the minute before joining
	ShareNext    float64 `json:"share_of_next_8"`        // its share of the 8 admissions from its first
}

func secs(t time.Time) float64 { return t.Sub(T0).Seconds() }

// Measure computes the figures of a finished harness.
func Measure(h *Harness) *Result {
	r := &Result{Policy: h.Pol.Name(), h: h, Latency: map[string]Dist{}, QueueWait: map[string]Dist{}, Stuck: h.Stuck}
	log := h.Engine.Log()
	r.Requests = len(log)
	for _, rec := range log {
		if rec.Status == 429 {
			r.R429++
			if !h.FirstResponse.IsZero() && rec.Arrival.After(h.FirstResponse) {
				r.R429Late++
			}
		}
		if rec.Status == 200 {
			r.PromptTokens += int64(rec.PromptTokens)
			r.CachedTokens += int64(rec.CachedTokens)
			r.OutputTokens += int64(rec.OutputTokens)
			r.ChargedTokens += int64(rec.ChargedTokens)
			r.Work += rec.Finish.Sub(rec.Start).Seconds()
		}
	}
	if r.Requests > 0 {
		r.RateLimited = float64(r.R429) / float64(r.Requests)
	}
	if r.PromptTokens > 0 {
		r.CacheHit = float64(r.CachedTokens) / float64(r.PromptTokens)
	}
	r.Runs = len(h.Runs)
	for _, run := range h.Runs {
		if run.Failed {
			r.RunsFailed++
		}
		if run.End.IsZero() {
			r.Unfinished++
			continue
		}
		e := run.End.Sub(h.origin()).Seconds()
		r.Makespan = max(r.Makespan, e)
		if run.Class == agent.ClassBatch {
			r.BatchMakespan = max(r.BatchMakespan, e)
		} else {
			r.InteractiveJCT = max(r.InteractiveJCT, run.End.Sub(run.Start).Seconds())
		}
	}
	lat := map[string][]float64{}
	wait := map[string][]float64{}
	r.Turns = len(h.Turns)
	for _, t := range h.Turns {
		if t.Final == nil {
			continue
		}
		r.TurnsOK++
		c := string(t.Run.Class)
		lat[c] = append(lat[c], t.Final.Finish.Sub(t.Submitted).Seconds())
		wait[c] = append(wait[c], t.Final.Start.Sub(t.Submitted).Seconds())
	}
	same, conts := 0, 0
	for _, t := range h.Turns {
		if t.Final == nil || t.Index == 0 || h.Engine.Config().Replicas < 2 {
			continue
		}
		if p := t.Run.Turns[t.Index-1].Final; p != nil {
			conts++
			if p.Replica == t.Final.Replica {
				same++
			}
		}
	}
	if conts > 0 {
		r.Affinity = float64(same) / float64(conts)
	}
	for c, xs := range lat {
		r.Latency[c] = NewDist(xs)
		r.QueueWait[c] = NewDist(wait[c])
	}
	r.OracleCached = oracleCached(h)
	if r.PromptTokens > 0 {
		r.OracleHit = float64(r.OracleCached) / float64(r.PromptTokens)
	}
	if l, ok := h.Pol.(*Luft); ok {
		r.Waits, r.Retries, r.Suspends, r.Refused = l.Waits, l.Retries, l.Suspends, l.Refused
		r.CoreEvents = len(l.Costs)
		var all []float64
		for _, c := range l.Costs {
			all = append(all, float64(c.D.Nanoseconds())/1e3)
			r.MaxQueued = max(r.MaxQueued, c.Queued)
		}
		d := NewDist(all)
		r.Decision = &d
	} else {
		for _, t := range h.Turns {
			r.Retries += max(0, len(t.Attempts)-1)
		}
	}
	return r
}

// DeepCost summarises the decision cost of the events that met at least q queued turns.
func (r *Result) DeepCost(q int) {
	l, ok := r.h.Pol.(*Luft)
	if !ok {
		return
	}
	var xs []float64
	for _, c := range l.Costs {
		if c.Queued >= q {
			xs = append(xs, float64(c.D.Nanoseconds())/1e3)
		}
	}
	d := NewDist(xs)
	r.DecisionDeep, r.DeepQueue = &d, q
}

// oracleCached sets every successful turn's Oracle: its cached prompt tokens had every
// replica an unbounded cache holding every prompt sent before. A turn hits the longer of
// its run's previous prompt and the shared system prompt (once anyone has sent it), in
// whole blocks, never the prompt's last block. It returns the sum.
func oracleCached(h *Harness) int64 {
	bs := h.Engine.Config().BlockSize
	seen := map[string]bool{}
	turns := slices.Clone(h.Turns)
	sort.SliceStable(turns, func(i, j int) bool {
		a, b := turns[i].Final, turns[j].Final
		if a == nil || b == nil {
			return a != nil
		}
		return a.Start.Before(b.Start)
	})
	var sum int64
	for _, t := range turns {
		if t.Final == nil {
			continue
		}
		prefix := 0
		if seen[t.Run.Spec.System] {
			prefix = t.Run.sharedPT
		}
		seen[t.Run.Spec.System] = true
		if t.Index > 0 {
			if p := t.Run.Turns[t.Index-1].Final; p != nil {
				prefix = max(prefix, p.PromptTokens)
			}
		}
		t.Oracle = cachedBlocks(prefix, t.Final.PromptTokens, bs) * bs
		sum += int64(t.Oracle)
	}
	return sum
}

// cachedBlocks mirrors the engine: the leading full blocks shared, less the last block
// when that would cover the whole prompt.
func cachedBlocks(prefix, prompt, bs int) int {
	n := min(prefix, prompt) / bs
	if n > 0 && n*bs >= prompt {
		n--
	}
	return n
}

// OracleWork is the slot time a request would take with the oracle's cache hit, at a
// given load factor: what an ideal schedule must spend on it.
func OracleWork(cfg testkit.Config, prompt, cached, output int, load float64) time.Duration {
	return cfg.PrefillOverhead + time.Duration(prompt-cached)*cfg.PrefillPerToken +
		time.Duration(cached)*cfg.CachedPrefillPerToken +
		time.Duration(float64(time.Duration(output)*cfg.DecodePerToken)*load)
}

// ---------------------------------------------------------------------------------------
// Fairness

type interval struct{ a, b time.Time }

// backlog is, per caller, the merged intervals during which it had a turn submitted and
// not yet started (waiting in a scheduler, a client backoff or an engine queue).
func backlog(h *Harness, callers []string) map[string][]interval {
	out := map[string][]interval{}
	want := map[string]bool{}
	for _, c := range callers {
		want[c] = true
	}
	for _, t := range h.Turns {
		c := t.Run.Caller
		if !want[c] {
			continue
		}
		end := h.Now()
		switch {
		case t.Final != nil:
			end = t.Final.Start
		case len(t.Attempts) > 0:
			end = t.Attempts[len(t.Attempts)-1].Finish
		}
		if end.After(t.Submitted) {
			out[c] = append(out[c], interval{t.Submitted, end})
		}
	}
	for c, iv := range out {
		sort.Slice(iv, func(i, j int) bool { return iv[i].a.Before(iv[j].a) })
		merged := iv[:0]
		for _, x := range iv {
			if n := len(merged); n > 0 && !x.a.After(merged[n-1].b) {
				if x.b.After(merged[n-1].b) {
					merged[n-1].b = x.b
				}
				continue
			}
			merged = append(merged, x)
		}
		out[c] = merged
	}
	return out
}

func covered(iv []interval, a, b time.Time) time.Duration {
	var d time.Duration
	for _, x := range iv {
		lo, hi := x.a, x.b
		if lo.Before(a) {
			lo = a
		}
		if hi.After(b) {
			hi = b
		}
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// MeasureFairness computes Jain's index of tokens served (prompt + output, as the
// scheduler's virtual token counter charges them; each request's tokens spread evenly
// over its start → finish) per caller, over consecutive windows of width w in [from, to)
// in which every caller was backlogged at least coverage of the time.
func (r *Result) MeasureFairness(callers []string, from, to time.Time, w time.Duration, coverage float64) {
	h := r.h
	bl := backlog(h, callers)
	f := &Fairness{Callers: callers, Width: w.Seconds(), Coverage: coverage, From: secs(from), To: secs(to),
		JainMin: 1, Tokens: map[string]float64{}, SlotShares: map[string]float64{}}
	log := h.Engine.Log()
	var sumJ float64
	tot := make([]float64, len(callers))
	slot := make([]float64, len(callers))
	idx := map[string]int{}
	for i, c := range callers {
		idx[c] = i
	}
	for a := from; !a.Add(w).After(to); a = a.Add(w) {
		b := a.Add(w)
		ok := true
		for _, c := range callers {
			if covered(bl[c], a, b).Seconds() < coverage*w.Seconds() {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		got := make([]float64, len(callers))
		for _, rec := range log {
			i, in := idx[rec.Caller]
			if rec.Status != 200 || !in {
				continue
			}
			span := rec.Finish.Sub(rec.Start)
			ov := covered([]interval{{rec.Start, rec.Finish}}, a, b)
			if span <= 0 || ov <= 0 {
				continue
			}
			frac := ov.Seconds() / span.Seconds()
			got[i] += frac * float64(rec.PromptTokens+rec.OutputTokens)
			slot[i] += ov.Seconds()
		}
		j := jain(got)
		f.Windows++
		sumJ += j
		f.JainMin = min(f.JainMin, j)
		for i := range got {
			tot[i] += got[i]
		}
	}
	if f.Windows > 0 {
		f.JainMean = sumJ / float64(f.Windows)
		f.JainAll = jain(tot)
		var slots float64
		for _, s := range slot {
			slots += s
		}
		for i, c := range callers {
			f.Tokens[c] = tot[i]
			if slots > 0 {
				f.SlotShares[c] = slot[i] / slots
			}
		}
	} else {
		f.JainMin = 0
	}
	r.Fairness = f
}

// MeasureLateJoin finds how the caller joining at join was first admitted.
func (r *Result) MeasureLateJoin(caller string, join time.Time) {
	h := r.h
	log := h.Engine.Log()
	lj := &LateJoin{Caller: caller, Join: secs(join)}
	var first time.Time
	for _, rec := range log {
		if rec.Caller == caller && rec.Status == 200 && (first.IsZero() || rec.Start.Before(first)) {
			first = rec.Start
		}
	}
	if first.IsZero() {
		r.LateJoin = lj
		return
	}
	lj.FirstStart = secs(first)
	lj.Delay = first.Sub(join).Seconds()
	releases := 0
	var starts []testkit.Record
	for _, rec := range log {
		if rec.Status != 200 {
			continue
		}
		if rec.Caller != caller && !rec.Start.Before(join) && rec.Start.Before(first) {
			lj.OthersBefore++
		}
		if !rec.Finish.Before(join.Add(-time.Minute)) && rec.Finish.Before(join) {
			releases++
		}
		if !rec.Start.Before(first) {
			starts = append(starts, rec)
		}
	}
	if releases > 0 {
		lj.Turnover = 60 / float64(releases)
	}
	sort.SliceStable(starts, func(i, j int) bool { return starts[i].Start.Before(starts[j].Start) })
	n, mine := 0, 0
	for _, rec := range starts {
		if n == 8 {
			break
		}
		n++
		if rec.Caller == caller {
			mine++
		}
	}
	if n > 0 {
		lj.ShareNext = float64(mine) / float64(n)
	}
	r.LateJoin = lj
}
