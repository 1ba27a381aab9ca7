package schedbench

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// Policy names, as they appear in tables and JSON.
const (
	PolLuft    = "luft"
	PolFIFO    = "fifo"     // fixed-slot FIFO gate, least-loaded replica
	PolNoSched = "nosched"  // send at once, client-side retry like the OpenAI SDKs
	PolRR      = "rr"       // fixed-slot FIFO gate, round-robin replicas
	PolIsolate = "isolated" // luft with only the interactive runs (the latency floor)
	PolSticky  = "sticky"   // FIFO gate, each run pinned to its first replica without a load check (B3)
)

// NewPolicy returns a fresh policy by name for workload w.
func NewPolicy(name string, w *Workload) Policy {
	switch name {
	case PolLuft, PolIsolate:
		return NewLuft(name, w)
	case PolFIFO:
		return &Gate{name: name, Cap: w.GateCap}
	case PolRR:
		return &Gate{name: name, Cap: w.GateCap, RoundRobin: true}
	case PolSticky:
		return &Gate{name: name, Cap: w.GateCap, Sticky: true}
	case PolNoSched:
		return &NoSched{}
	}
	panic("unknown policy " + name)
}

// ---------------------------------------------------------------------------------------
// luft: the decision core

// Cost is the wall time of one decision-core event and the queue depth it met.
type Cost struct {
	D      time.Duration
	Queued int
}

// Luft puts scheduler.Core in front of the engine: one lane with the engine's slots and
// replicas, every response's headers fed back through ParseTelemetry.
type Luft struct {
	name  string
	Cfg   scheduler.Config
	h     *Harness
	core  *scheduler.Core
	turns map[scheduler.TurnID]*Turn
	ids   map[*Turn]scheduler.TurnID
	next  scheduler.TurnID

	queued int // turns in the core not running (queued or waiting out a backoff)
	Costs  []Cost

	Waits, Retries, Suspends, Refused int
}

// NewLuft configures the core for w: its lane gets the engine's replicas and
// Workload.Slots slots each; budgets are left to be learned from headers.
func NewLuft(name string, w *Workload) *Luft {
	reps := max(1, w.Engine.Replicas)
	cfg := scheduler.Config{
		Lanes: map[string]scheduler.LaneConfig{Lane: {Slots: w.Slots, Replicas: reps}},
		Seed:  w.Seed,
	}
	return &Luft{name: name, Cfg: cfg, turns: map[scheduler.TurnID]*Turn{}, ids: map[*Turn]scheduler.TurnID{}}
}

func (l *Luft) Name() string { return l.name }

func (l *Luft) Start(h *Harness) {
	l.h = h
	l.core = scheduler.NewCore(l.Cfg)
}

// timed runs one core event, measuring only the core call, and applies its actions.
func (l *Luft) timed(f func(now time.Time) []scheduler.Action) {
	now := l.h.Now()
	q := l.queued
	start := time.Now()
	acts := f(now)
	d := time.Since(start)
	l.Costs = append(l.Costs, Cost{D: d, Queued: q})
	// The core reuses its slice; an action may lead to another core call.
	for _, a := range slices.Clone(acts) {
		l.apply(a)
	}
}

func (l *Luft) Submit(t *Turn) {
	l.next++
	id := l.next
	l.turns[id] = t
	l.ids[t] = id
	l.queued++
	job := scheduler.Job{
		ID: id,
		Turn: scheduler.Turn{RunID: t.Run.ID, CallKey: t.Run.ID + "/" + strconv.Itoa(t.Index), Lane: Lane,
			Class: t.Run.Class, Caller: t.Run.Caller, EstTokens: t.Est, Continuation: t.Continuation(),
			EstOutput: t.Output, Conversation: t.Run.ID, CallStart: t.Run.admitted},
		RunStart: t.Run.Start,
	}
	l.timed(func(now time.Time) []scheduler.Action { return l.core.Submit(job, now) })
}

func (l *Luft) Done(t *Turn, r *testkit.Result) {
	id := l.ids[t]
	res := scheduler.Result{Status: scheduler.StatusFromHTTP(r.Status),
		Telemetry: scheduler.ParseTelemetry(r.Header, l.h.Now())}
	if r.Response != nil && r.Response.Usage != nil {
		u := r.Response.Usage
		res.Usage = agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
		if u.PromptTokensDetails != nil {
			res.Usage.Cached = u.PromptTokensDetails.CachedTokens
		}
	}
	l.timed(func(now time.Time) []scheduler.Action { return l.core.Complete(id, res, now) })
	switch res.Status {
	case scheduler.StatusOK:
		l.forget(t)
		l.h.Finish(t, r)
	case scheduler.StatusError, scheduler.StatusCanceled:
		l.forget(t)
		l.h.Fail(t, "http "+strconv.Itoa(r.Status))
	}
	// 429 and 5xx: the core answered ActRetry (the turn is queued again) or ActRefuse.
}

func (l *Luft) forget(t *Turn) {
	delete(l.turns, l.ids[t])
	delete(l.ids, t)
}

func (l *Luft) apply(a scheduler.Action) {
	switch a.Kind {
	case scheduler.ActAdmit:
		t := l.turns[a.ID]
		l.queued--
		if t.Run.admitted.IsZero() {
			t.Run.admitted = l.h.Now() // the agent call's first admission ranks its later turns
		}
		l.h.Send(t, a.Replica)
	case scheduler.ActRetry:
		l.Retries++
		l.queued++
	case scheduler.ActWait:
		l.Waits++
	case scheduler.ActRefuse:
		l.Refused++
		t := l.turns[a.ID]
		if t == nil {
			return
		}
		if a.Reason != scheduler.ReasonRetriesExhausted {
			l.queued-- // refused from the queue; a retry refusal comes from a running turn
		}
		l.forget(t)
		l.h.post(func() { l.h.Fail(t, "refused: "+a.Reason) })
	case scheduler.ActSuspend:
		// The run is journaled and resumes at Until (luft run --resume): its queued
		// turn is submitted again then, under a new id.
		l.Suspends++
		t := l.turns[a.ID]
		if t == nil {
			return
		}
		l.queued--
		l.forget(t)
		l.h.After(max(0, a.Until.Sub(l.h.Now())), func() { l.Submit(t) })
	}
}

func (l *Luft) Wake() time.Time { return l.core.NextWake(l.h.Now()) }

func (l *Luft) Tick() {
	l.timed(func(now time.Time) []scheduler.Action { return l.core.Tick(now) })
}

// ---------------------------------------------------------------------------------------
// Client-side retry as in the OpenAI SDKs (openai-python _calculate_retry_timeout): a
// retry-after-ms or retry-after of at most 60 s is honoured; otherwise
// min(0.5 s × 2^n, 8 s) × (1 − 0.25·U) with U from a seeded source.

// SDKRetry is the client retry policy of the baselines.
type SDKRetry struct {
	Max int // retries after the first attempt
	rng *rand.Rand
}

func newSDKRetry(seed uint64) SDKRetry {
	return SDKRetry{Max: 6, rng: rand.New(rand.NewPCG(seed, 0x5d4e1))}
}

// Backoff is the wait before retry n+1 (n retries made so far) of an attempt that got r,
// and whether to retry at all.
func (s SDKRetry) Backoff(r *testkit.Result, n int) (time.Duration, bool) {
	if !(r.Status == 429 || r.Status == 408 || r.Status == 409 || r.Status >= 500) || n >= s.Max {
		return 0, false
	}
	if v := r.Header.Get("retry-after-ms"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f <= 60_000 {
			return time.Duration(f * float64(time.Millisecond)), true
		}
	}
	if v := r.Header.Get("retry-after"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f <= 60 {
			return time.Duration(f * float64(time.Second)), true
		}
	}
	d := math.Min(0.5*math.Pow(2, float64(n)), 8) * (1 - 0.25*s.rng.Float64())
	return time.Duration(d * float64(time.Second)), true
}

// ---------------------------------------------------------------------------------------
// Gate: a fixed number of slots, first come first served; the turn holds its slot through
// its client-side retries (the SDK retries inside the call the permit covers).

// Gate is the FIFO baseline (least-loaded replica) or, with RoundRobin, the round-robin
// routing baseline.
type Gate struct {
	name       string
	Cap        int
	RoundRobin bool
	Sticky     bool // a run's turns go to the replica of its first turn, whatever its load

	h       *Harness
	running int
	perRep  []int
	queue   []*Turn
	qhead   int
	rr      int
	retry   SDKRetry
	rep     map[*Turn]int
	home    map[*Run]int
}

func (g *Gate) Name() string { return g.name }

func (g *Gate) Start(h *Harness) {
	g.h = h
	g.perRep = make([]int, max(1, h.W.Engine.Replicas))
	g.retry = newSDKRetry(h.W.Seed)
	g.rep = map[*Turn]int{}
	g.home = map[*Run]int{}
	if g.Cap <= 0 {
		g.Cap = 8
	}
}

func (g *Gate) Submit(t *Turn) {
	g.queue = append(g.queue, t)
	g.pump()
}

func (g *Gate) pump() {
	for g.running < g.Cap && g.qhead < len(g.queue) {
		t := g.queue[g.qhead]
		g.queue[g.qhead] = nil
		g.qhead++
		r := 0
		if g.RoundRobin {
			r = g.rr % len(g.perRep)
			g.rr++
		} else if h, ok := g.home[t.Run]; ok && g.Sticky {
			r = h
		} else {
			for i, n := range g.perRep {
				if n < g.perRep[r] {
					r = i
				}
			}
			g.home[t.Run] = r
		}
		g.running++
		g.perRep[r]++
		g.rep[t] = r
		g.h.Send(t, r)
	}
	if g.qhead > 1024 && g.qhead*2 > len(g.queue) {
		g.queue = append(g.queue[:0], g.queue[g.qhead:]...)
		g.qhead = 0
	}
}

func (g *Gate) release(t *Turn) {
	g.running--
	g.perRep[g.rep[t]]--
	delete(g.rep, t)
}

func (g *Gate) Done(t *Turn, r *testkit.Result) {
	if r.Status == 200 {
		g.release(t)
		g.h.Finish(t, r)
		g.pump()
		return
	}
	if d, ok := g.retry.Backoff(r, len(t.Attempts)-1); ok {
		rep := g.rep[t]
		g.h.After(d, func() { g.h.Send(t, rep) })
		return
	}
	g.release(t)
	g.h.Fail(t, "http "+strconv.Itoa(r.Status))
	g.pump()
}

func (g *Gate) Wake() time.Time { return time.Time{} }
func (g *Gate) Tick()           {}

// ---------------------------------------------------------------------------------------
// NoSched: every turn goes to the engine at once (the engine routes it to its least-loaded
// replica and queues it FCFS there); 429s are retried client-side like the SDKs.

// NoSched is the no-scheduler baseline.
type NoSched struct {
	h     *Harness
	retry SDKRetry
}

func (n *NoSched) Name() string { return PolNoSched }
func (n *NoSched) Start(h *Harness) {
	n.h = h
	n.retry = newSDKRetry(h.W.Seed)
}
func (n *NoSched) Submit(t *Turn) { n.h.Send(t, -1) }
func (n *NoSched) Done(t *Turn, r *testkit.Result) {
	if r.Status == 200 {
		n.h.Finish(t, r)
		return
	}
	if d, ok := n.retry.Backoff(r, len(t.Attempts)-1); ok {
		n.h.After(d, func() { n.h.Send(t, -1) })
		return
	}
	n.h.Fail(t, "http "+strconv.Itoa(r.Status))
}
func (n *NoSched) Wake() time.Time { return time.Time{} }
func (n *NoSched) Tick()           {}
