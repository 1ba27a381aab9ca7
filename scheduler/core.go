package scheduler

import (
	"math/rand/v2"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
)

// Job states.
const (
	jobQueued = iota
	jobDelayed
	jobRunning
)

type job struct {
	Job
	key   int64  // rank: effective arrival in Unix ns, kept across retries
	seq   uint64 // submission order, the tie-break
	idx   int    // position in the caller's heap or the delayed heap
	state int

	home, serving *lane
	run           *runState
	conv          *conv // the conversation, for replica affinity
	prev, next    *job  // the run's list of turns

	replica   int
	flight    uint64 // sequence of the reservation in serving's buckets
	charged   float64
	reserved  float64 // the tokens its admission reserved (estimate, correction, margin)
	resIn     float64 // of which input and output (Anthropic's separate buckets)
	resOut    float64
	probe     bool
	notified  bool // ActWait sent for the current wait
	notBefore time.Time
	attempts  int // failed attempts so far
	rateFails int
	early     bool      // the current attempt's headers came before its end (Observe)
	earlyAt   time.Time // when they came
}

// Core is the admission scheduler's pure decision core, the policy the Executor puts
// behind the Scheduler interface. It owns no goroutine, no lock and no clock. Every method takes the current time, applies one event to the state (Submit,
// Complete, Cancel, Tick) and returns the actions the event caused; the executor that
// wraps it serialises the calls, carries out the actions and calls Tick at NextWake.
// Tests drive it on a virtual clock, and the same events at the same times with the same
// Config.Seed always give the same actions.
//
// Order. A turn's rank is a key fixed when it is first submitted: its arrival, minus a
// lead for a continuation (ContinuationLead plus its run's age up to that again, so the
// continuations of older runs go first), plus BatchOffset for batch work. Class priority
// is nothing but that offset, which is also the ageing: a batch turn that has waited
// BatchOffset competes with interactive work as an equal, so batch never starves. Within
// a lane the queue is one heap of turns per caller, and callers are chosen by a virtual
// token counter (VTC): the caller served the fewest tokens goes next, among callers
// whose best turn is due (key not in the future) before any caller whose best turn is
// only batch work that has not aged. A caller that joins or returns starts at the least
// counter of those waiting, so it cannot bank credit by staying away. A retried turn
// keeps its key and so its place.
//
// Budgets. Each lane has slots per replica and dead-reckoned request and token buckets
// (and Anthropic's input and output buckets), configured or learned from the headers of
// every response (see bucket). A turn reserves its estimate corrected by the lane's
// recent mean error, plus a safety margin (see estimator), plus, when it sets no output
// cap, OutputQuantile of the lane's recent completions (see outputs), and is admitted only when
// every known bucket holds that much (batch turns must also leave InteractiveHeadroom,
// and, while an interactive turn ran in the last InteractiveLinger, InteractiveSlots);
// otherwise it waits, at the head of its lane, until the refill, with a wake at the
// time the bucket will hold it. A wait longer than SuspendAfter suspends the run. A turn
// that alone needs more than RefuseFraction of a bucket is refused. With replicas, a
// conversation's next turn (Turn.Conversation: an agent call or a session) goes back to
// the replica that served its last one while that replica carries at most
// AffinityBound turns more than the least-loaded one; and when a slot frees on a
// replica the best batch turn's conversation did not last run on, a batch turn of the
// same caller ranked within AffinityWindow whose conversation did takes it (see affine).
//
// Failures. A 429 pauses the lane until retry-after-ms, retry-after or the exhausted
// bucket's reset, raises the lane's margin (the raise decays), and requeues the turn at
// its rank. A 5xx or network error retries after jittered exponential backoff (or the
// server's retry-after) and counts towards the lane's circuit breaker; while the circuit
// is open the lane's turns go to its fallback lane, or wait, and after the cooldown one
// real turn probes the lane.
//
// Cost. Each event costs O(log n) in the queued turns, plus O(log n) for each turn it
// admits, refuses or suspends (BenchmarkDecision). The slice an event returns is reused
// by the next event; copy what you keep.
type Core struct {
	cfg      Config
	lanes    map[string]*lane
	list     []*lane // in creation order, for deterministic iteration
	jobs     map[TurnID]*job
	runs     map[string]*runState
	idle     []idleRun
	idleHead int
	delayed  indexHeap[*job] // by notBefore
	seq      uint64
	rng      *rand.Rand
	out      []Action
	// epoch is the first now the core was given. Ranks and queue times are nanoseconds
	// since it, taken with Time.Sub, so they follow the monotonic clock when the times
	// carry its reading: a system clock set back an hour must not rank a turn that
	// arrives after it an hour ahead of the turns already waiting.
	epoch time.Time
}

// nanos is t as nanoseconds since the core's epoch (see Core.epoch).
func (c *Core) nanos(t time.Time) int64 {
	if c.epoch.IsZero() {
		c.epoch = t
	}
	return int64(t.Sub(c.epoch))
}

// NewCore returns a decision core with cfg (zero fields take their defaults).
func NewCore(cfg Config) *Core {
	cfg = cfg.withDefaults()
	c := &Core{
		cfg:   cfg,
		lanes: map[string]*lane{},
		jobs:  map[TurnID]*job{},
		runs:  map[string]*runState{},
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	c.delayed = indexHeap[*job]{
		less: func(a, b *job) bool {
			if !a.notBefore.Equal(b.notBefore) {
				return a.notBefore.Before(b.notBefore)
			}
			return a.seq < b.seq
		},
		setIdx: func(j *job, i int) { j.idx = i },
	}
	return c
}

func (c *Core) lane(name string) *lane {
	if l := c.lanes[name]; l != nil {
		return l
	}
	cfg, ok := c.cfg.Lanes[name]
	if !ok {
		if i := strings.IndexByte(name, '/'); i >= 0 {
			cfg, ok = c.cfg.Lanes[name[:i]+"/*"]
		}
	}
	if !ok {
		cfg = c.cfg.DefaultLane
		cfg.Fallback = ""
	}
	l := newLane(name, cfg, &c.cfg)
	c.lanes[name] = l
	c.list = append(c.list, l)
	if cfg.Fallback != "" && cfg.Fallback != name {
		fb := c.lane(cfg.Fallback)
		l.fallback = fb
		fb.dependents = append(fb.dependents, l)
	}
	return l
}

// Submit enqueues a turn that wants to run and admits whatever can run now. Any class
// other than agent.ClassBatch is interactive (the runtime's default). A turn of a run
// that is suspended is answered with ActSuspend and not queued.
func (c *Core) Submit(j Job, now time.Time) []Action {
	c.out = c.out[:0]
	if _, dup := c.jobs[j.ID]; dup {
		c.emit(Action{Kind: ActRefuse, ID: j.ID, RunID: j.RunID, Lane: j.Lane, Reason: ReasonDuplicate})
		return c.out
	}
	c.gcRuns(now)
	if j.Arrival.IsZero() {
		j.Arrival = now
	}
	r := c.run(j.RunID, j.Arrival)
	if r.suspended.After(now) {
		c.emit(Action{Kind: ActSuspend, ID: j.ID, RunID: r.id, Lane: j.Lane, Until: r.suspended, Reason: r.suspendReason})
		return c.out
	}
	c.seq++
	name := j.Conversation
	if name == "" {
		name = j.CallKey
	}
	nj := &job{Job: j, key: c.nanos(c.rankBase(j, r)), seq: c.seq, idx: -1, run: r, conv: r.conv(name), replica: -1}
	nj.home = c.lane(j.Lane)
	c.jobs[j.ID] = nj
	r.link(nj)
	nj.home.enqueue(nj, c.nanos(now))
	c.tryAdmit(nj.home, now)
	return c.out
}

// Complete reports how an admitted turn ended: it frees the slot, reconciles the
// budgets and learns from the usage and headers, then retries or forgets the turn and
// admits whatever can run now. An unknown or not-running id is ignored.
func (c *Core) Complete(id TurnID, res Result, now time.Time) []Action {
	c.out = c.out[:0]
	j := c.jobs[id]
	if j == nil || j.state != jobRunning {
		return c.out
	}
	t, home := j.serving, j.home
	t.release(j, res.Status, now)
	c.settle(t, j, res, now)

	switch res.Status {
	case StatusOK:
		home.charge(j.Caller, used(res, j)-j.charged)
		t.br.success()
		c.finish(j, now)
	case StatusError, StatusCanceled:
		home.charge(j.Caller, float64(res.Usage.Total())-j.charged)
		if j.probe {
			t.br.probing = false // says nothing about the lane's health
		}
		c.finish(j, now)
	case StatusRateLimited:
		c.retryRateLimited(j, res.Telemetry, now)
	default: // StatusServerError
		c.retryServerError(j, res.Telemetry, now)
	}
	c.admitFreed(t, home, now)
	return c.out
}

// release frees the slot an attempt of j held on t, the lane that served it.
func (t *lane) release(j *job, st Status, now time.Time) {
	t.running--
	if j.Class != agent.ClassBatch {
		t.lastInteractive = now
	}
	t.replicas[j.replica]--
	t.st.Completed++
	if st != StatusCanceled {
		t.scouting = false // the lane has answered: its limits are known, or it has none
	}
}

// admitFreed admits what can run now that an attempt on t, j's serving lane, ended: on
// t, on the lanes whose fallback t is, and on home, j's own lane, when it is another.
func (c *Core) admitFreed(t, home *lane, now time.Time) {
	c.tryAdmit(t, now)
	for _, d := range t.dependents {
		c.tryAdmit(d, now)
	}
	if home != t {
		c.tryAdmit(home, now)
	}
}

// Cancel withdraws a turn whose caller gave up. A queued or delayed turn is dropped. A
// running one is completed as canceled, counted as having used its estimate (it may
// have been billed); an executor that knows the usage should Complete it instead.
func (c *Core) Cancel(id TurnID, now time.Time) []Action {
	j := c.jobs[id]
	if j == nil {
		c.out = c.out[:0]
		return c.out
	}
	if j.state == jobRunning {
		return c.Complete(id, Result{Status: StatusCanceled, Usage: agent.Usage{Input: int(j.charged)}}, now)
	}
	c.out = c.out[:0]
	c.unlink(j, now)
	c.finish(j, now)
	c.tryAdmit(j.home, now)
	return c.out
}

// unlink takes a queued or delayed turn out of its queue.
func (c *Core) unlink(j *job, now time.Time) {
	switch j.state {
	case jobQueued:
		j.home.unqueue(j, c.nanos(now))
	case jobDelayed:
		c.delayed.Remove(j.idx)
		j.home.delayed--
	}
}

// finish forgets a turn that is not in any queue.
func (c *Core) finish(j *job, now time.Time) {
	delete(c.jobs, j.ID)
	r := j.run
	if j.prev != nil {
		j.prev.next = j.next
	} else {
		r.jobs = j.next
	}
	if j.next != nil {
		j.next.prev = j.prev
	}
	j.prev, j.next = nil, nil
	r.active--
	if r.active == 0 {
		r.idleSince = now
		c.idle = append(c.idle, idleRun{r: r, since: now})
	}
}

func (c *Core) refuse(j *job, reason string, now time.Time) {
	c.refuseUntil(j, reason, time.Time{}, now)
}

// refuseUntil refuses j, saying when it could run (zero: not known).
func (c *Core) refuseUntil(j *job, reason string, until time.Time, now time.Time) {
	j.home.st.Refused++
	c.emit(Action{Kind: ActRefuse, ID: j.ID, RunID: j.RunID, Lane: j.home.name, Until: until, Reason: reason})
	c.finish(j, now)
}

// Tick applies the passage of time: backoffs that are over, breakers whose cooldown is
// over, budgets that refilled. Call it at NextWake (calling it more often is harmless).
func (c *Core) Tick(now time.Time) []Action {
	c.out = c.out[:0]
	for c.delayed.Len() > 0 && !c.delayed.Peek().notBefore.After(now) {
		j := c.delayed.Pop()
		j.home.delayed--
		j.state = jobQueued
		j.home.enqueue(j, c.nanos(now))
	}
	c.gcRuns(now)
	for _, l := range c.list {
		c.tryAdmit(l, now)
	}
	return c.out
}

// NextWake is when the core next needs a Tick: the earliest refill, pause end, breaker
// cooldown or backoff that some queued turn is waiting for. The zero time means no
// Tick is needed until the next Submit or Complete.
func (c *Core) NextWake(now time.Time) time.Time {
	var w time.Time
	for _, l := range c.list {
		if l.queued[0]+l.queued[1] > 0 && !l.wakeAt.IsZero() && (w.IsZero() || l.wakeAt.Before(w)) {
			w = l.wakeAt
		}
	}
	if c.delayed.Len() > 0 {
		if d := c.delayed.Peek().notBefore; w.IsZero() || d.Before(w) {
			w = d
		}
	}
	return w
}

func (c *Core) emit(a Action) { c.out = append(c.out, a) }

// learnt is what a lane's core knows of one bucket, for the shared budgets.
type learnt struct {
	rate    float64 // refill per second; 0 = none yet
	learned bool    // rate is measured from readings, not the limit per minute
	fixed   bool    // a fixed window: all of it refills at its reset
}

// learnedLevels is what lane's core learned of its buckets, in the shared budgets'
// order (requests, tokens, input, output).
func (c *Core) learnedLevels(name string) [nDims]learnt {
	var out [nDims]learnt
	if l := c.lanes[name]; l != nil {
		for i, b := range [nDims]*bucket{&l.requests, &l.tokens, &l.inTokens, &l.outTokens} {
			out[i] = learnt{rate: b.rate, learned: b.lo > 0 || b.fixed, fixed: b.fixed}
		}
	}
	return out
}

// reservedShare is what the admission of the running turn id reserved in its lane's
// buckets, in the shared budgets' order (all 0 for a turn not running).
func (c *Core) reservedShare(id TurnID) [nDims]float64 {
	if j := c.jobs[id]; j != nil && j.state == jobRunning {
		return [nDims]float64{1, j.reserved, j.resIn, j.resOut}
	}
	return [nDims]float64{}
}
