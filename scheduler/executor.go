package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/luft-run/luft/agent"
)

// NoticeKind says what a Notice reports.
type NoticeKind uint8

// The kinds of Notice, one per event the runtime shows (SPEC §5).
const (
	// NoticeQueued: the turn found no free slot or budget and is queued on Lane;
	// Position is its place in line as far as the lane's counts tell (agent_queued).
	NoticeQueued NoticeKind = iota + 1
	// NoticeWait: the turn is next in line but its lane's budget is short until
	// Until; Reason names the budget (rate_limit, action "wait"). Sent once per wait.
	NoticeWait
	// NoticeSuspend: the wait would exceed SuspendAfter, so the turn's run is
	// suspended until Until (rate_limit, action "suspend"); Admit returns a
	// *SuspendError. Sent to one turn of the run per suspension.
	NoticeSuspend
	// NoticeRetry: the turn failed (Reason ReasonRateLimited or ReasonServerError,
	// Err the failure) and is queued again at its rank; it is sent again as attempt
	// Attempt, not before Until (agent_retry).
	NoticeRetry
)

var noticeNames = [...]string{"", "queued", "wait", "suspend", "retry"}

func (k NoticeKind) String() string {
	if int(k) < len(noticeNames) && k > 0 {
		return noticeNames[k]
	}
	return fmt.Sprintf("notice(%d)", k)
}

// Notice tells a turn's Notify what happened to it inside the scheduler.
type Notice struct {
	Kind    NoticeKind
	RunID   string
	CallKey string
	Lane    string
	// Position (NoticeQueued) counts the turns queued on the lane in the turn's class
	// or a better one, itself included. Continuations and fair shares may still move
	// it, so it is where the turn stands, not a promise.
	Position int
	Until    time.Time     // end of the wait; zero when not known
	Wait     time.Duration // Until minus the time of the decision; 0 when not known
	Reason   string
	Attempt  int   // NoticeRetry: the attempt about to be made (2 = the first retry)
	Err      error // NoticeRetry: the failure being retried
}

// ExecutorStats is what a status view shows of an Executor.
type ExecutorStats struct {
	Lanes   []LaneStats // in the order lanes were first used
	Waiting int         // turns blocked in Admit or Again
	Running int         // admitted turns not yet released
}

// Executor is the admission scheduler: the decision core (Core) behind the Scheduler
// interface. One Executor per process admits every turn of every run in it.
//
// One mutex serialises every event into the core: Admit submits, a permit's Done or
// Again completes, a context that ends cancels, and a timer armed at the core's NextWake
// ticks. The actions an event returns are carried out under the same lock: an admission
// wakes the turn's Admit (or Again), a refusal or a suspension fails it with a
// *RefuseError or *SuspendError. Notices for Turn.Notify are collected under the lock
// and delivered after it, in the order they were decided; a call returns only after the
// notices it caused are delivered.
//
// Retries. The core retries a turn that got HTTP 429 (after the server's wait, at its
// original rank) or a 5xx or no response (after a jittered backoff). Its permit is a
// Retrier: a caller that reports the failure with Again waits there for the turn's
// re-admission and sends it again; a caller that reports it with Done ends the turn, and
// the core only learns from it. How a failure is classified: see HTTPStatus; an error
// without an HTTP status is final for the scheduler, a context error counts as canceled.
//
// Its permits also say where an attempt goes, for backends with a fallback lane or
// replicas: Lane() string and Replica() int.
type Executor struct {
	clock Clock

	mu      sync.Mutex
	core    *Core
	lastID  TurnID
	tickets map[TurnID]*ticket            // every turn the core knows, and admitted turns
	waiting map[string]map[TurnID]*ticket // queued turns by run, for suspensions
	acts    []Action                      // copy of the core's last actions
	timer   Timer
	gen     uint64 // generation of timer; a stale timer's wake does nothing
	wakeAt  time.Time

	nmu        sync.Mutex
	ncond      sync.Cond
	outbox     []pendingNotice
	posted     uint64
	delivered  uint64
	delivering bool

	share *shareGate // budgets shared with other nodes (Share); nil = none
}

var _ Scheduler = (*Executor)(nil)

// minWake is the shortest timer the executor arms; it keeps floating-point rounding in
// the budgets from turning into a busy loop of wakes that admit nothing.
const minWake = time.Millisecond

// Ticket states.
const (
	tkQueued  = iota // waiting for admission in the core (queued or backing off)
	tkRunning        // admitted; its permit is out
	tkOver           // the core has forgotten it
)

// ticket is the executor's side of one turn, kept across its retries.
type ticket struct {
	id      TurnID
	turn    Turn
	state   int
	ch      chan error // answers the current wait: nil = admitted
	lane    string     // where the current admission runs
	replica int
	sends   int   // attempts reported so far
	lastErr error // the last attempt's failure
	final   bool  // released with Done: a retry is not wanted
	retried bool  // the core queued it again during the current report
}

type pendingNotice struct {
	fn func(Notice)
	n  Notice
}

// NewExecutor returns an Executor over a decision core with cfg, reading time from
// clock (nil = RealClock).
func NewExecutor(cfg Config, clock Clock) *Executor {
	if clock == nil {
		clock = RealClock()
	}
	e := &Executor{
		clock:   clock,
		core:    NewCore(cfg),
		tickets: map[TurnID]*ticket{},
		waiting: map[string]map[TurnID]*ticket{},
	}
	e.ncond.L = &e.nmu
	return e
}

// Admit submits t and blocks until the scheduler admits it. It fails with a
// *RefuseError for a turn that can never run, a *SuspendError when t's run is
// suspended, or ctx's cause when ctx ends first (t is then withdrawn). The permit it
// returns is a Retrier (see Finish).
func (e *Executor) Admit(ctx context.Context, t Turn) (Permit, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("admit %s: %w", t.CallKey, context.Cause(ctx))
	}
	ch := make(chan error, 1)
	e.mu.Lock()
	now := e.clock.Now()
	e.lastID++
	tk := &ticket{id: e.lastID, turn: t, state: tkQueued, ch: ch}
	e.tickets[tk.id] = tk
	e.queue(tk)
	acts := e.core.Submit(Job{ID: tk.id, Turn: t, EstOutput: t.EstOutput, RunStart: t.RunStart, Arrival: now}, now)
	if !decided(acts, tk) {
		e.post(tk, Notice{Kind: NoticeQueued, Position: e.core.position(t.Lane, t.Class)})
	}
	e.apply(acts, now)
	e.rearm(now)
	e.mu.Unlock()
	e.flush()
	return e.await(ctx, tk, ch)
}

// decided reports whether acts settle tk at once (admitted, refused or suspended).
func decided(acts []Action, tk *ticket) bool {
	for _, a := range acts {
		switch {
		case a.ID == tk.id && (a.Kind == ActAdmit || a.Kind == ActRefuse):
			return true
		case a.Kind == ActSuspend && a.RunID == tk.turn.RunID:
			return true
		}
	}
	return false
}

// await blocks until tk's current wait is answered on ch or ctx ends.
func (e *Executor) await(ctx context.Context, tk *ticket, ch chan error) (Permit, error) {
	if ctx.Err() == nil {
		select {
		case err := <-ch:
			e.flush()
			if err != nil {
				return nil, err
			}
			// tk.lane and tk.replica were set before the answer was sent.
			p := &permit{e: e, t: tk, lane: tk.lane, replica: tk.replica}
			if e.share != nil {
				e.mu.Lock()
				need := e.core.reservedShare(tk.id)
				e.mu.Unlock()
				need[dimTok] = max(need[dimTok], float64(tk.turn.EstTokens))
				st, err := e.share.acquire(ctx, p.lane, need)
				if err != nil {
					p.Done(Outcome{Err: err})
					return nil, fmt.Errorf("admit %s: %w", tk.turn.CallKey, err)
				}
				p.shared, p.granted = st, time.Now()
			}
			return p, nil
		case <-ctx.Done():
		}
	}
	e.withdraw(tk, ch)
	e.flush()
	return nil, fmt.Errorf("admit %s: %w", tk.turn.CallKey, context.Cause(ctx))
}

// withdraw takes back a turn whose caller stopped waiting.
func (e *Executor) withdraw(tk *ticket, ch chan error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	select {
	case err := <-ch:
		if err != nil {
			return // refused or suspended meanwhile: the core has forgotten it
		}
		// Admitted meanwhile: hand the slot and the reservation back unused.
		e.forget(tk)
		e.apply(e.core.Complete(tk.id, Result{Status: StatusCanceled}, now), now)
	default:
		e.forget(tk)
		e.apply(e.core.Cancel(tk.id, now), now)
	}
	e.rearm(now)
}

// Stats returns the lanes' counters and the executor's turns now.
func (e *Executor) Stats() ExecutorStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := ExecutorStats{Lanes: e.core.Stats(e.clock.Now())}
	for _, tk := range e.tickets {
		switch tk.state {
		case tkQueued:
			s.Waiting++
		case tkRunning:
			s.Running++
		}
	}
	return s
}

// permit is the Executor's Permit for one attempt of a turn.
type permit struct {
	e       *Executor
	t       *ticket
	lane    string
	replica int
	spent   bool // guarded by e.mu

	shared  shareTicket // its grant of a shared budget (Share)
	granted time.Time   // when that grant was had; zero without one
	sent    sync.Once
}

// Sent records that the attempt's request went out (the runtime calls it when the
// request is written): the spread from admission to it sizes the shared budgets'
// margin (see SharedConfig.Spread).
func (p *permit) Sent() {
	if p.e.share == nil || p.granted.IsZero() {
		return
	}
	p.sent.Do(func() { p.e.share.sent(time.Since(p.granted)) })
}

// shareReading passes a reading to the shared budgets, with the refill rates the core
// learned; outside e.mu. ok: the reading is a successful answer's (see observe).
func (p *permit) shareReading(tm Telemetry, ok bool) {
	if p.e.share == nil {
		return
	}
	p.e.mu.Lock()
	learned := p.e.core.learnedLevels(p.lane)
	p.e.mu.Unlock()
	p.e.share.observe(p.lane, tm, learned, ok)
}

var (
	_ Retrier  = (*permit)(nil)
	_ Router   = (*permit)(nil)
	_ Observer = (*permit)(nil)
)

// Lane is the lane the attempt runs on: the turn's own, or its fallback while the
// turn's lane has an open circuit.
func (p *permit) Lane() string { return p.lane }

// Replica is the replica of the lane the attempt should go to.
func (p *permit) Replica() int { return p.replica }

// Observe passes on the rate-limit headers of the attempt's response while its body is
// still coming (a stream's headers): see Core.Observe. Calls after the permit is
// released do nothing.
func (p *permit) Observe(h http.Header) {
	e, tk := p.e, p.t
	e.mu.Lock()
	if p.spent || tk.state != tkRunning {
		e.mu.Unlock()
		return
	}
	now := e.clock.Now()
	tm := ParseTelemetry(h, now)
	e.apply(e.core.Observe(tk.id, tm, now), now)
	e.rearm(now)
	e.mu.Unlock()
	e.flush()
	p.shareReading(tm, false) // a stream's headers: its end tells whether it was silent
}

// Done implements Permit: it reports o and ends the turn, even when the scheduler
// would have retried it.
func (p *permit) Done(o Outcome) { _, _ = p.report(context.Background(), o, false) }

// Again implements Retrier.
func (p *permit) Again(ctx context.Context, o Outcome) (Permit, error) {
	return p.report(ctx, o, true)
}

func (p *permit) report(ctx context.Context, o Outcome, retry bool) (Permit, error) {
	e, tk := p.e, p.t
	e.mu.Lock()
	if p.spent || tk.state != tkRunning {
		e.mu.Unlock()
		return nil, nil // a second release is harmless
	}
	p.spent = true
	now := e.clock.Now()
	res, failure := outcomeResult(o, now)
	tk.sends++
	if failure != nil {
		tk.lastErr = failure
	}
	tk.final, tk.retried = !retry, false
	ch := make(chan error, 1)
	tk.ch = ch
	if res.Status == StatusCanceled && res.Usage.Total() == 0 {
		// Given up after it was sent, with no usage known: Cancel counts the estimate,
		// since the provider may have billed it.
		e.apply(e.core.Cancel(tk.id, now), now)
	} else {
		e.apply(e.core.Complete(tk.id, res, now), now)
	}
	answer := false
	switch {
	case tk.state == tkRunning && !tk.retried:
		e.forget(tk) // over: the core has forgotten it
	case !retry && tk.state == tkQueued:
		// The core queued it for a retry that its holder does not want.
		e.forget(tk)
		e.apply(e.core.Cancel(tk.id, now), now)
	case !retry && tk.state == tkRunning:
		e.forget(tk)
		e.apply(e.core.Complete(tk.id, Result{Status: StatusCanceled}, now), now)
	default:
		// Queued again, already re-admitted, refused or suspended: ch answers.
		answer = retry
	}
	e.rearm(now)
	e.mu.Unlock()
	e.flush()
	if e.share != nil {
		u := res.Usage
		// A usage of 0 is not known unless the provider refused the request: what it
		// spent then stays spent.
		known := u.Total() != 0 || res.Status == StatusRateLimited
		e.share.release(p.shared, [nDims]float64{dimTok: float64(u.Total()), dimIn: float64(u.Input), dimOut: float64(u.Output)}, known)
		p.shareReading(res.Telemetry, res.Status == StatusOK && o.Err == nil)
	}
	if !answer {
		return nil, nil
	}
	return e.await(ctx, tk, ch)
}

// outcomeResult maps what the caller reports to the core's Result, and returns the
// failure it describes (nil for a success).
func outcomeResult(o Outcome, now time.Time) (Result, error) {
	code, header, hasCode := o.StatusCode, o.Header, o.StatusCode != 0
	if c, h, ok := HTTPStatus(o.Err); ok {
		if !hasCode {
			code, hasCode = c, true
		}
		if header == nil {
			header = h
		}
	}
	var st Status
	switch {
	case errors.Is(o.Err, context.Canceled) || errors.Is(o.Err, context.DeadlineExceeded):
		st = StatusCanceled // the caller gave up; a timeout of its own is no server failure
	case hasCode:
		st = StatusFromHTTP(code)
	case o.Err == nil:
		st = StatusOK
	default:
		st = StatusError
	}
	failure := o.Err
	if failure == nil && st != StatusOK {
		failure = fmt.Errorf("HTTP %d", code)
	}
	tel := ParseTelemetry(header, now)
	if st == StatusRateLimited && o.Err != nil {
		tel.readBody(o.Err.Error(), now)
	}
	return Result{Status: st, Usage: o.Usage, Telemetry: tel}, failure
}

// queue records tk as waiting for admission.
func (e *Executor) queue(tk *ticket) {
	tk.state = tkQueued
	m := e.waiting[tk.turn.RunID]
	if m == nil {
		m = map[TurnID]*ticket{}
		e.waiting[tk.turn.RunID] = m
	}
	m[tk.id] = tk
}

// unqueue records that tk waits no longer.
func (e *Executor) unqueue(tk *ticket) {
	if m := e.waiting[tk.turn.RunID]; m != nil {
		delete(m, tk.id)
		if len(m) == 0 {
			delete(e.waiting, tk.turn.RunID)
		}
	}
}

// forget drops tk from the executor.
func (e *Executor) forget(tk *ticket) {
	e.unqueue(tk)
	tk.state = tkOver
	delete(e.tickets, tk.id)
}

// apply carries out the core's actions. It copies them first: the core reuses its
// slice on the next call, and apply may be followed by one.
func (e *Executor) apply(acts []Action, now time.Time) {
	e.acts = append(e.acts[:0], acts...)
	for _, a := range e.acts {
		tk := e.tickets[a.ID]
		switch a.Kind {
		case ActAdmit:
			if tk == nil || tk.state != tkQueued {
				continue
			}
			e.unqueue(tk)
			tk.state, tk.lane, tk.replica = tkRunning, a.Lane, a.Replica
			tk.ch <- nil
		case ActWait:
			if tk != nil && !tk.final {
				e.post(tk, Notice{Kind: NoticeWait, Lane: a.Lane, Until: a.Until, Wait: waitFor(a.Until, now), Reason: a.Reason})
			}
		case ActSuspend:
			e.suspend(a, now)
		case ActRefuse:
			if tk != nil {
				e.refuse(tk, a)
			}
		case ActRetry:
			if tk == nil {
				continue
			}
			e.queue(tk)
			tk.retried = true
			if !tk.final {
				e.post(tk, Notice{Kind: NoticeRetry, Lane: a.Lane, Until: a.Until, Wait: waitFor(a.Until, now),
					Reason: a.Reason, Attempt: a.Attempt, Err: tk.lastErr})
			}
		}
	}
}

func waitFor(until, now time.Time) time.Duration {
	if until.IsZero() || !until.After(now) {
		return 0
	}
	return until.Sub(now)
}

// suspend fails every queued turn of the suspended run: the core has dropped them all.
func (e *Executor) suspend(a Action, now time.Time) {
	queued := e.waiting[a.RunID]
	// One notice per suspension: to the turn the core named, else the oldest one.
	first := queued[a.ID]
	if first == nil || first.final {
		first = nil
		for _, tk := range queued {
			if !tk.final && (first == nil || tk.id < first.id) {
				first = tk
			}
		}
	}
	if first != nil {
		e.post(first, Notice{Kind: NoticeSuspend, Lane: a.Lane, Until: a.Until, Wait: waitFor(a.Until, now), Reason: a.Reason})
	}
	err := &SuspendError{RunID: a.RunID, Lane: a.Lane, Until: a.Until, Reason: a.Reason}
	for _, tk := range queued {
		tk.state = tkOver
		delete(e.tickets, tk.id)
		tk.ch <- err
	}
	delete(e.waiting, a.RunID)
}

// refuse fails a turn the core refused.
func (e *Executor) refuse(tk *ticket, a Action) {
	err := &RefuseError{CallKey: tk.turn.CallKey, Lane: a.Lane, Reason: a.Reason}
	switch a.Reason {
	case ReasonOversize:
		err.Need, err.Allow, err.Budget = e.core.oversize(tk.turn, a.Lane)
	case ReasonRetriesExhausted:
		err.Attempts, err.Err = tk.sends, tk.lastErr
	case ReasonCircuitOpen:
		err.Attempts, err.Err, err.Until = tk.sends, tk.lastErr, a.Until
	}
	e.forget(tk)
	tk.ch <- err
}

// rearm points the timer at the core's next wake. A wake that is already due is
// ticked at once (a few times at most; then the timer takes over).
func (e *Executor) rearm(now time.Time) {
	for i := 0; ; i++ {
		w := e.core.NextWake(now)
		if w.IsZero() {
			e.stopTimer()
			return
		}
		if w.After(now) || i == 3 {
			if e.timer != nil && e.wakeAt.Equal(w) {
				return
			}
			e.stopTimer()
			e.gen++
			gen := e.gen
			e.wakeAt = w
			e.timer = e.clock.AfterFunc(max(w.Sub(now), minWake), func() { e.wake(gen) })
			return
		}
		e.apply(e.core.Tick(now), now)
	}
}

func (e *Executor) stopTimer() {
	if e.timer != nil {
		e.timer.Stop()
		e.timer, e.wakeAt = nil, time.Time{}
	}
}

// wake is the timer's call: time has passed, let the core act on it.
func (e *Executor) wake(gen uint64) {
	e.mu.Lock()
	if gen != e.gen || e.timer == nil {
		e.mu.Unlock()
		return // a timer stopped too late to keep it from firing
	}
	e.timer, e.wakeAt = nil, time.Time{}
	now := e.clock.Now()
	e.apply(e.core.Tick(now), now)
	e.rearm(now)
	e.mu.Unlock()
	e.flush()
}

// post queues a notice for tk's Notify; e.mu is held, so notices queue in the order
// the core decided.
func (e *Executor) post(tk *ticket, n Notice) {
	if tk.turn.Notify == nil {
		return
	}
	n.RunID, n.CallKey = tk.turn.RunID, tk.turn.CallKey
	if n.Lane == "" {
		n.Lane = tk.turn.Lane
	}
	e.nmu.Lock()
	e.outbox = append(e.outbox, pendingNotice{fn: tk.turn.Notify, n: n})
	e.posted++
	e.nmu.Unlock()
}

// flush returns once every notice posted so far is delivered. One goroutine at a time
// delivers, so notices reach their Notify in order; the others wait for it.
func (e *Executor) flush() {
	e.nmu.Lock()
	defer e.nmu.Unlock()
	target := e.posted
	for e.delivered < target {
		if e.delivering {
			e.ncond.Wait()
			continue
		}
		batch := e.outbox
		e.outbox = nil
		e.delivering = true
		e.nmu.Unlock()
		func() {
			defer func() { // relock even if a Notify panics
				e.nmu.Lock()
				e.delivering = false
				e.delivered += uint64(len(batch))
				e.ncond.Broadcast()
			}()
			for _, p := range batch {
				p.fn(p.n)
			}
		}()
	}
}

// position is where a turn of class just queued on lane stands by the lane's counts:
// the queued turns of its class or a better one.
func (c *Core) position(lane string, class agent.Class) int {
	l := c.lanes[lane]
	if l == nil {
		return 0
	}
	if class == agent.ClassBatch {
		return l.queued[0] + l.queued[1]
	}
	return l.queued[0]
}

// oversize says which budget of lane a refused turn t exceeds and by how much: the
// tokens it needs (its estimate corrected by the lane's learned error), the bucket's
// limit and its name, by the refusal test of reserve.
func (c *Core) oversize(t Turn, lane string) (need, allow int, budget string) {
	if l := c.lanes[lane]; l != nil {
		est, f := l.estimate(t.EstTokens, t.EstOutput)
		if b, over := l.oversized(est, f, &c.cfg); over {
			return int(math.Ceil(est * b.share)), int(b.limit), b.name
		}
	}
	return t.EstTokens, 0, "tokens"
}
