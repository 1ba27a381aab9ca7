package scheduler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
)

// TurnID names one turn in the decision core. The executor assigns it; a turn keeps its
// id across retries, which is how a retried turn keeps its rank.
type TurnID uint64

// Job is a turn as the decision core sees it: the runtime's Turn plus an identity and
// the times the core ranks it by.
type Job struct {
	ID TurnID
	Turn
	// EstOutput is the part of Turn.EstTokens expected as output (max_tokens); 0 =
	// unknown, then the lane's learned share is used. It matters only for lanes
	// with separate input and output buckets (Anthropic).
	EstOutput int
	// Arrival is when the turn asked to run; zero means the now of Submit.
	Arrival time.Time
	// RunStart is when the turn's run started, for ranking continuations by run age;
	// zero means the first time the core saw the run.
	RunStart time.Time
}

// Status is how a turn ended, as the decision core needs to know it.
type Status uint8

// The statuses of Result.
const (
	StatusOK          Status = iota // the turn ran; its usage is real
	StatusRateLimited               // HTTP 429: honour the wait, retry at the same rank
	StatusServerError               // 5xx, timeout, connection error: back off and retry
	StatusError                     // any other failure; the turn is over, no retry
	StatusCanceled                  // the caller gave up; the turn is over
)

var statusNames = [...]string{"ok", "rate_limited", "server_error", "error", "canceled"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// StatusFromHTTP classifies an HTTP status code; 0 means the request never got a
// response (a network error or timeout), which is retried like a 5xx. 408 and 409 are
// retried too, as the OpenAI and Anthropic SDKs do.
func StatusFromHTTP(code int) Status {
	switch {
	case code == 429:
		return StatusRateLimited
	case code == 0 || code >= 500 || code == 408 || code == 409:
		return StatusServerError
	case code >= 400:
		return StatusError
	}
	return StatusOK
}

// Result is how an admitted turn ended.
type Result struct {
	Status    Status
	Usage     agent.Usage
	Telemetry Telemetry // parsed response headers (ParseTelemetry); may be empty
}

// ActionKind says what the executor must do with an Action.
type ActionKind uint8

// The actions of the decision core.
const (
	// ActAdmit: send the turn now, to Action.Lane (the fallback lane when the turn's
	// own lane has an open circuit) and Action.Replica. Report it with Complete.
	ActAdmit ActionKind = iota + 1
	// ActWait: the turn is next in line but its lane's budget is short until
	// Action.Until (Reason says which budget). It stays queued; this is a notice for
	// the run's rate_limit{action: "wait"} event, sent once per wait.
	ActWait
	// ActRateLimit: the lane as a whole started waiting (lane-level rate_limit notice);
	// ID is zero.
	ActRateLimit
	// ActSuspend: the wait of the run's turn would exceed SuspendAfter. The core has
	// dropped every queued turn of Action.RunID (their Admit calls should fail with the
	// resume time Action.Until); turns already running finish normally.
	ActSuspend
	// ActRefuse: the turn will never run (Reason: oversize, retries_exhausted,
	// duplicate, or circuit_open for a turn with NoCircuitWait, Until then being when the
	// circuit half-opens). The core has forgotten it.
	ActRefuse
	// ActRetry: the admitted turn failed (429 or 5xx) and is queued again at its
	// original rank; it will not be admitted before Action.Until. Attempt is the
	// attempt about to be made (2 for the first retry). For agent_retry events.
	ActRetry
)

var actionNames = [...]string{"", "admit", "wait", "rate_limit", "suspend", "refuse", "retry"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k > 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", k)
}

// Action is one decision of the core for the executor to carry out.
type Action struct {
	Kind    ActionKind
	ID      TurnID
	RunID   string
	Lane    string
	Replica int
	Until   time.Time
	Reason  string
	Attempt int
}

func (a Action) String() string {
	s := fmt.Sprintf("%s #%d", a.Kind, a.ID)
	if a.Lane != "" {
		s += " lane=" + a.Lane
	}
	if a.Kind == ActAdmit {
		s += fmt.Sprintf(" replica=%d", a.Replica)
	}
	if !a.Until.IsZero() {
		s += " until=" + a.Until.Format(time.RFC3339Nano)
	}
	if a.Reason != "" {
		s += " reason=" + a.Reason
	}
	return s
}

// Reasons carried by actions.
const (
	ReasonTokens           = "tokens"            // tokens-per-minute budget short
	ReasonRequests         = "requests"          // requests-per-minute budget short
	ReasonInputTokens      = "input_tokens"      // Anthropic input-token budget short
	ReasonOutputTokens     = "output_tokens"     // Anthropic output-token budget short
	ReasonRetryAfter       = "retry_after"       // lane paused by a 429
	ReasonCircuitOpen      = "circuit_open"      // lane's circuit open and no fallback free
	ReasonRateLimited      = "rate_limited"      // retry after a 429
	ReasonServerError      = "server_error"      // retry after a 5xx or network error
	ReasonOversize         = "oversize"          // the turn alone needs about a whole window
	ReasonRetriesExhausted = "retries_exhausted" // too many failed attempts
	ReasonDuplicate        = "duplicate"         // the id is already in the core
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
	probe     bool
	notified  bool // ActWait sent for the current wait
	notBefore time.Time
	attempts  int // failed attempts so far
	rateFails int
	early     bool      // the current attempt's headers came before its end (Observe)
	earlyAt   time.Time // when they came
}

type runState struct {
	id            string
	start         time.Time
	active        int
	jobs          *job // head of the run's list of turns in the core
	convs         map[string]*conv
	idleSince     time.Time
	suspended     time.Time // until when the run is suspended
	suspendReason string
}

// conv is where a conversation's last turn ran: affinity follows the conversation (an
// agent call or a session), not the run, so the calls of a fan-out each keep their own
// replica (SPEC §7). A run's conversations are forgotten with the run.
type conv struct {
	lane    *lane
	replica int
}

func (r *runState) conv(name string) *conv {
	cv := r.convs[name]
	if cv == nil {
		cv = &conv{replica: -1}
		r.convs[name] = cv
	}
	return cv
}

type idleRun struct {
	r     *runState
	since time.Time
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

func (c *Core) run(id string, now time.Time) *runState {
	r := c.runs[id]
	if r == nil {
		r = &runState{id: id, start: now, convs: map[string]*conv{}}
		c.runs[id] = r
	}
	return r
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
	start := j.RunStart
	if start.IsZero() {
		start = r.start
	}
	base := j.Arrival
	if j.Continuation {
		// Program-level order: a continuation ranks by when its call was first
		// admitted, led by ContinuationLead and its run's age then.
		from := j.Arrival
		if !j.CallStart.IsZero() && j.CallStart.Before(from) {
			from = j.CallStart
		}
		age := min(max(from.Sub(start), 0), c.cfg.ContinuationLead)
		base = from.Add(-c.cfg.ContinuationLead - age)
	}
	if j.Class == agent.ClassBatch {
		base = base.Add(c.cfg.BatchOffset)
	}
	c.seq++
	name := j.Conversation
	if name == "" {
		name = j.CallKey
	}
	nj := &job{Job: j, key: c.nanos(base), seq: c.seq, idx: -1, run: r, conv: r.conv(name), replica: -1}
	nj.home = c.lane(j.Lane)
	c.jobs[j.ID] = nj
	r.active++
	nj.next = r.jobs
	if r.jobs != nil {
		r.jobs.prev = nj
	}
	r.jobs = nj
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
	t.running--
	if j.Class != agent.ClassBatch {
		t.lastInteractive = now
	}
	t.replicas[j.replica]--
	t.st.Completed++
	if res.Status != StatusCanceled {
		t.scouting = false // the lane has answered: its limits are known, or it has none
	}
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
		home.charge(j.Caller, -j.charged)
		t.st.RateLimited++
		t.est.raise(now)
		if j.EstOutput == 0 {
			// Admitted on its prompt and still refused: this provider wants the
			// output to fit up front.
			t.upfront = true
		}
		if j.probe {
			t.br.probing = false
		}
		until := c.retryAt(t, res.Telemetry, now)
		if until.After(t.pausedUntil) {
			t.pausedUntil = until
		}
		j.rateFails++
		if j.rateFails > c.cfg.MaxRateRetries {
			c.refuse(j, ReasonRetriesExhausted, now)
			break
		}
		t.st.Retries++
		// Back in its queue at its original key: the lane's pause holds it, and
		// when the pause ends it is first again.
		j.state, j.notified = jobQueued, false
		home.enqueue(j, c.nanos(now))
		c.emit(Action{Kind: ActRetry, ID: j.ID, RunID: j.RunID, Lane: home.name, Until: until,
			Reason: ReasonRateLimited, Attempt: j.attempts + j.rateFails + 1})
	default: // StatusServerError
		home.charge(j.Caller, -j.charged)
		if t.br.failure(now, j.probe, &c.cfg) {
			t.st.CircuitOpens++
		}
		j.attempts++
		if j.attempts > c.cfg.MaxRetries {
			c.refuse(j, ReasonRetriesExhausted, now)
			break
		}
		t.st.Retries++
		until := res.Telemetry.RetryAt
		if until.IsZero() || until.Before(now) {
			until = now.Add(c.backoff(j.attempts))
		}
		j.state, j.notBefore, j.notified = jobDelayed, until, false
		c.delayed.Push(j)
		home.delayed++
		c.emit(Action{Kind: ActRetry, ID: j.ID, RunID: j.RunID, Lane: home.name, Until: until,
			Reason: ReasonServerError, Attempt: j.attempts + j.rateFails + 1})
	}
	c.tryAdmit(t, now)
	for _, d := range t.dependents {
		c.tryAdmit(d, now)
	}
	if home != t {
		c.tryAdmit(home, now)
	}
	return c.out
}

// used is the tokens a finished attempt consumed. A successful turn from a backend that
// reports no usage is taken to have used its estimate, so that it neither refunds its
// budget nor escapes its caller's counter.
func used(res Result, j *job) float64 {
	if t := res.Usage.Total(); t > 0 || res.Status != StatusOK {
		return float64(t)
	}
	return j.charged
}

// settle reconciles the serving lane's budgets and learns from a finished attempt.
func (c *Core) settle(t *lane, j *job, res Result, now time.Time) {
	u, tel := res.Usage, res.Telemetry
	total := used(res, j)
	in, out := float64(u.Input), float64(u.Output)
	if u.Total() == 0 {
		in, out = total*(1-t.outFrac), total*t.outFrac
	}
	var unread float64
	readAt := now
	if j.early {
		readAt = j.earlyAt
		if j.EstOutput == 0 {
			unread = out
		}
	}
	if !t.requests.endKept(j.flight, tel.Requests, 1, 0, now) {
		t.requests.observe(j.flight, tel.Requests, 1, 0, readAt, now)
	}
	if !t.tokens.endKept(j.flight, tel.Tokens, total, out, now) {
		t.tokens.observe(j.flight, tel.Tokens, total, unread, readAt, now)
	}
	if !t.inTokens.endKept(j.flight, tel.InputTokens, in, 0, now) {
		t.inTokens.observe(j.flight, tel.InputTokens, in, 0, readAt, now)
	}
	if !t.outTokens.endKept(j.flight, tel.OutputTokens, out, out, now) {
		t.outTokens.observe(j.flight, tel.OutputTokens, out, unread, readAt, now)
	}
	if res.Status == StatusOK && u.Total() > 0 {
		if j.EstOutput == 0 {
			// No output cap: the estimate is the prompt's, and the completion's length
			// is learned apart (see outputs).
			t.est.record(float64(j.EstTokens), in)
			t.outs.record(out)
		} else {
			t.est.record(float64(j.EstTokens), total)
		}
		t.outFrac = 0.9*t.outFrac + 0.1*out/total
	}
}

// Observe applies the rate-limit headers of a turn whose response is still coming (a
// stream's headers, read before its body): budgets the lane knows nothing of yet are
// learned now (conservatively: see bucket.early), and a scouting lane lets the turns it
// held back through without waiting for the turn's end.
func (c *Core) Observe(id TurnID, tel Telemetry, now time.Time) []Action {
	c.out = c.out[:0]
	j := c.jobs[id]
	if j == nil || j.state != jobRunning {
		return c.out
	}
	t := j.serving
	j.early, j.earlyAt = true, now
	t.requests.seen(j.flight, tel.Requests, now)
	t.tokens.seen(j.flight, tel.Tokens, now)
	t.inTokens.seen(j.flight, tel.InputTokens, now)
	t.outTokens.seen(j.flight, tel.OutputTokens, now)
	t.requests.early(tel.Requests, now)
	t.tokens.early(tel.Tokens, now)
	t.inTokens.early(tel.InputTokens, now)
	t.outTokens.early(tel.OutputTokens, now)
	if t.scouting {
		t.scouting = false
		c.tryAdmit(j.home, now)
	}
	return c.out
}

// retryAt is when a lane that answered 429 may be tried again: retry-after-ms, then
// retry-after, then the reset of the exhausted bucket, then RateLimitBackup.
func (c *Core) retryAt(t *lane, tel Telemetry, now time.Time) time.Time {
	if tel.RetryAt.After(now) {
		return tel.RetryAt
	}
	var at time.Time
	for _, rl := range []RateLimit{tel.Requests, tel.Tokens, tel.InputTokens, tel.OutputTokens} {
		if rl.HasRemaining && rl.Remaining == 0 && rl.Reset.After(at) {
			at = rl.Reset
		}
	}
	if at.After(now) {
		return at
	}
	return now.Add(c.cfg.RateLimitBackup)
}

// backoff is the jittered exponential wait before retry attempt n (n ≥ 1).
func (c *Core) backoff(n int) time.Duration {
	d := float64(c.cfg.BackoffBase) * math.Pow(2, float64(n-1))
	d = min(d, float64(c.cfg.BackoffMax))
	d *= 1 + c.cfg.Jitter*(2*c.rng.Float64()-1)
	return time.Duration(d)
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

// reservation is what admitting a turn takes from the buckets of the lane it runs on.
type reservation struct {
	est                   float64 // corrected estimate, without margin
	tokens, input, output float64
	// tail is the part of tokens reserved for the output of a turn without an output
	// cap. It need not fit for the turn to start: a provider that charges a completion
	// when it ends lets the turn in on its prompt, and the tail holds back later turns
	// until this one ends and its actual output is known (see Core doc).
	tail  float64
	batch bool // must leave InteractiveHeadroom in every bucket
}

func (t *lane) reserve(j *job, cfg *Config, now time.Time) (reservation, bool) {
	est, f := t.estimate(j.EstTokens, j.EstOutput)
	// A turn that needs about a whole window on its own can never be served by
	// waiting: refuse it rather than wait forever. Its reservation is capped at that
	// share so that a turn just under the line still fits a full bucket.
	if _, over := t.oversized(est, f, cfg); over {
		return reservation{}, false
	}
	total := est + t.est.margin(float64(max(j.EstTokens, 1)), now)
	var tail float64
	if j.EstOutput == 0 {
		tail = t.outs.quantile(cfg.OutputQuantile) * cfg.OutputHeadroom
		total += tail
	}
	for _, b := range t.tokenBudgets(f) {
		if b.limit > 0 && b.share > 0 {
			total = min(total, cfg.RefuseFraction*b.limit/b.share)
		}
	}
	if t.upfront {
		tail = 0 // this lane's provider charges the output up front: it must fit too
	}
	return reservation{est: est, tokens: total, input: total * (1 - f), output: total * f,
		tail: min(tail, total), batch: j.Class == agent.ClassBatch}, true
}

// estimate is a turn's token estimate corrected by the lane's learned error, and the
// share of it expected as output: estOutput's when known, else the lane's learned one.
func (t *lane) estimate(estTokens, estOutput int) (est, outShare float64) {
	raw := float64(max(estTokens, 1))
	outShare = t.outFrac
	if estOutput > 0 && estOutput <= estTokens {
		outShare = float64(estOutput) / raw
	}
	return t.est.corrected(raw), outShare
}

// tokenBudget is one of a lane's token buckets as a turn's estimate meets it.
type tokenBudget struct {
	name  string
	limit float64 // 0 = unknown
	share float64 // the part of the estimate charged to it
}

func (t *lane) tokenBudgets(outShare float64) [3]tokenBudget {
	return [3]tokenBudget{
		{"tokens", t.tokens.limit, 1},
		{"input tokens", t.inTokens.limit, 1 - outShare},
		{"output tokens", t.outTokens.limit, outShare},
	}
}

// oversized returns the first token budget of which a turn estimated at est needs more
// than RefuseFraction of the limit: waiting can never serve it.
func (t *lane) oversized(est, outShare float64, cfg *Config) (tokenBudget, bool) {
	for _, b := range t.tokenBudgets(outShare) {
		if b.limit > 0 && est*b.share > cfg.RefuseFraction*b.limit {
			return b, true
		}
	}
	return tokenBudget{}, false
}

// fits reports whether r fits every known budget of t at now, and if not, until when
// and which budget is short (the one that refills last). A batch turn must leave
// InteractiveHeadroom of each bucket's limit unused, so that an interactive turn
// arriving at a lane that batch work keeps drained finds budget at once; in steady
// state a bucket passes its refill rate whatever level it hovers at, so batch loses
// only that slice of the first burst.
func (t *lane) fits(r reservation, cfg *Config, now time.Time) (bool, time.Time, string) {
	ok := true
	var until time.Time
	var reason string
	check := func(b *bucket, need float64, why string) {
		if r.batch && b.limit > 0 {
			need = max(need, min(need+cfg.InteractiveHeadroom*b.limit, cfg.RefuseFraction*b.limit))
		}
		if fit, at := b.fits(need, now); !fit {
			ok = false
			if at.After(until) {
				until, reason = at, why
			}
		}
	}
	check(&t.requests, 1, ReasonRequests)
	check(&t.tokens, r.tokens-r.tail, ReasonTokens)
	check(&t.inTokens, r.input, ReasonInputTokens)
	check(&t.outTokens, r.output, ReasonOutputTokens)
	return ok, until, reason
}

// tryAdmit admits turns from l's queue for as long as the best one can run now.
// Budgets are checked for the best turn only: a smaller turn behind it does not jump
// the queue, or large turns would starve.
func (c *Core) tryAdmit(l *lane, now time.Time) {
	ns := c.nanos(now)
	for {
		_, j := l.head(ns)
		if j == nil {
			l.unblock()
			return
		}
		t, probe := l, false
		switch l.br.current(now) {
		case breakerOpen:
			if fb := l.fallback; fb != nil && fb.br.current(now) == breakerClosed {
				t = fb
				l.wakeAt = l.br.openUntil // the probe is due then
			} else if j.NoCircuitWait {
				l.unqueue(j, ns)
				c.refuseUntil(j, ReasonCircuitOpen, l.br.openUntil, now)
				continue
			} else {
				if c.block(l, j, l.br.openUntil, ReasonCircuitOpen, now) {
					continue
				}
				return
			}
		case breakerHalfOpen:
			if !l.br.probing {
				probe = true
			} else if fb := l.fallback; fb != nil && fb.br.current(now) == breakerClosed {
				t = fb
			} else if j.NoCircuitWait {
				l.unqueue(j, ns)
				c.refuseUntil(j, ReasonCircuitOpen, time.Time{}, now)
				continue
			} else {
				// Wait for the probe's verdict; its Complete runs tryAdmit again.
				c.block(l, j, time.Time{}, ReasonCircuitOpen, now)
				return
			}
		}
		if t.pausedUntil.After(now) {
			if c.block(l, j, t.pausedUntil, ReasonRetryAfter, now) {
				continue
			}
			return
		}
		if !t.hasSlot() || t.scouting && t.running > 0 {
			// Plain queueing for a slot (or for the scout's answer): a Complete frees one.
			if t == l {
				l.unblock()
			}
			return
		}
		if j.Class == agent.ClassBatch {
			if held, until := t.slotHeld(&c.cfg, now); held {
				// The last free slots wait for interactive work until it has been
				// quiet for InteractiveLinger; a Complete or that wake looks again.
				if t == l {
					l.unblock()
					l.wakeAt = until
				}
				return
			}
		}
		if alt := c.affine(l, t, j); alt != nil {
			if r, ok := t.reserve(alt, &c.cfg, now); ok {
				if fit, _, _ := t.fits(r, &c.cfg, now); fit {
					c.admit(l, t, alt, r, probe, now)
					continue
				}
			}
		}
		r, ok := t.reserve(j, &c.cfg, now)
		if !ok {
			l.unqueue(j, ns)
			c.refuse(j, ReasonOversize, now)
			continue
		}
		if fit, until, why := t.fits(r, &c.cfg, now); !fit {
			if c.block(l, j, until, why, now) {
				continue
			}
			return
		}
		c.admit(l, t, j, r, probe, now)
	}
}

// affineScan bounds how many queued turns affine looks at.
const affineScan = 32

// affine returns a turn to admit in place of l's best turn j, or nil. When j is batch
// work of a conversation whose previous replica on t cannot take it now (full, or loaded
// past AffinityBound), its turn would land on replica r and lose its KV cache; if a batch
// turn of the same caller whose conversation last ran on r is ranked within AffinityWindow of j,
// that turn takes r's slot instead and j keeps its place at the head, so it gets the
// next slot its own replica frees (or, failing that, any slot). Only j's caller's heap
// is searched, pruned at the window and capped at affineScan turns, so the cost stays
// bounded and the fair shares across callers are untouched.
func (c *Core) affine(l, t *lane, j *job) *job {
	if c.cfg.AffinityBound < 0 || c.cfg.AffinityWindow <= 0 || len(t.replicas) < 2 ||
		j.Class != agent.ClassBatch || j.conv.lane != t || j.conv.replica < 0 {
		return nil
	}
	prev := j.conv.replica
	r := t.pickReplica(prev, c.cfg.AffinityBound)
	if r == prev || r < 0 {
		return nil
	}
	cl := l.callers[j.Caller]
	if cl == nil {
		return nil
	}
	limit := j.key + int64(c.cfg.AffinityWindow)
	h := cl.jobs.s
	var best *job
	stack := [affineScan]int{0}
	sp, seen := 1, 0
	for sp > 0 && seen < affineScan {
		sp--
		i := stack[sp]
		x := h[i]
		seen++
		if x != j && x.Class == agent.ClassBatch && x.conv.lane == t && x.conv.replica == r &&
			(best == nil || x.key < best.key || (x.key == best.key && x.seq < best.seq)) {
			best = x
		}
		for _, k := range [2]int{2*i + 1, 2*i + 2} {
			if k < len(h) && h[k].key <= limit && sp < affineScan {
				stack[sp] = k
				sp++
			}
		}
	}
	if best == nil || t.pickReplica(r, c.cfg.AffinityBound) != r {
		return nil
	}
	return best
}

func (l *lane) unblock() {
	l.blocked, l.blockedReason, l.wakeAt = false, "", time.Time{}
}

// block records that l's best turn j cannot run before until for reason. When the wait
// would exceed SuspendAfter, j's run is suspended instead and block reports true: the
// queue changed and the caller should look at the new best turn.
func (c *Core) block(l *lane, j *job, until time.Time, reason string, now time.Time) bool {
	if !until.IsZero() && until.Sub(now) > c.cfg.SuspendAfter {
		c.suspend(j.run, until, reason, l, now)
		return true
	}
	if !l.blocked || l.blockedReason != reason {
		c.emit(Action{Kind: ActRateLimit, Lane: l.name, Until: until, Reason: reason})
	}
	l.blocked, l.blockedReason, l.wakeAt = true, reason, until
	if !j.notified {
		j.notified = true
		l.st.Waits++
		c.emit(Action{Kind: ActWait, ID: j.ID, RunID: j.RunID, Lane: l.name, Until: until, Reason: reason})
	}
	return false
}

// suspend drops every queued turn of run r; its running turns finish normally.
func (c *Core) suspend(r *runState, until time.Time, reason string, l *lane, now time.Time) {
	r.suspended, r.suspendReason = until, reason
	l.st.Suspended++
	var first TurnID
	for j := r.jobs; j != nil; {
		next := j.next
		if j.state != jobRunning {
			if first == 0 {
				first = j.ID
			}
			c.unlink(j, now)
			c.finish(j, now)
		}
		j = next
	}
	c.emit(Action{Kind: ActSuspend, ID: first, RunID: r.id, Lane: l.name, Until: until, Reason: reason})
}

// admit takes j off home's queue and starts it on lane t.
func (c *Core) admit(home, t *lane, j *job, r reservation, probe bool, now time.Time) {
	home.unqueue(j, c.nanos(now))
	home.unblock()
	c.seq++
	t.flightID++
	j.state, j.serving, j.flight, j.probe, j.notified = jobRunning, t, t.flightID, probe, false
	if probe {
		t.br.probing = true
	}
	j.early = false
	t.requests.debit(j.flight, 1, 0, now)
	t.tokens.debit(j.flight, r.tokens, r.tail, now)
	t.inTokens.debit(j.flight, r.input, 0, now)
	t.outTokens.debit(j.flight, r.output, 0, now)

	j.charged = r.est
	if cl := home.callers[j.Caller]; cl != nil {
		cl.lastServed = c.seq
	}
	home.charge(j.Caller, r.est)

	prev := -1
	if j.conv.lane == t {
		prev = j.conv.replica
	}
	j.replica = t.pickReplica(prev, c.cfg.AffinityBound)
	j.conv.lane, j.conv.replica = t, j.replica
	t.replicas[j.replica]++
	t.running++
	if j.Class != agent.ClassBatch {
		t.lastInteractive = now
	}
	t.st.Admitted++
	c.emit(Action{Kind: ActAdmit, ID: j.ID, RunID: j.RunID, Lane: t.name, Replica: j.replica})
}

// gcRuns forgets runs that have had no turn in the core for RunIdleTTL. Runs go idle
// in time order, so the idle list is oldest first; an entry whose run came back (or went
// idle again later) is stale and skipped.
func (c *Core) gcRuns(now time.Time) {
	for c.idleHead < len(c.idle) {
		e := c.idle[c.idleHead]
		if now.Sub(e.since) < c.cfg.RunIdleTTL {
			break
		}
		c.idle[c.idleHead] = idleRun{}
		c.idleHead++
		r := e.r
		if r.active != 0 || !r.idleSince.Equal(e.since) || c.runs[r.id] != r {
			continue // came back since, or already forgotten
		}
		if r.suspended.After(now) {
			// Keep a suspended run until its suspension is over.
			r.idleSince = now
			c.idle = append(c.idle, idleRun{r: r, since: now})
			continue
		}
		delete(c.runs, r.id)
	}
	if c.idleHead == len(c.idle) {
		c.idle, c.idleHead = c.idle[:0], 0
	} else if c.idleHead > 64 && c.idleHead > len(c.idle)/2 {
		n := copy(c.idle, c.idle[c.idleHead:])
		c.idle, c.idleHead = c.idle[:n], 0
	}
}

// LaneStats are counters a status view can show for one lane.
type LaneStats struct {
	Lane              string
	QueuedInteractive int
	QueuedBatch       int
	Delayed           int // waiting out a backoff before a retry
	Running           int

	Admitted, Completed, Waits, RateLimited, Retries, Refused, Suspended, CircuitOpens uint64

	// Dead-reckoned budgets at the time of Stats; -1 when unknown.
	TokensLeft, TokenLimit     float64
	RequestsLeft, RequestLimit float64

	Margin      float64 // safety margin a 1,000-token turn would get now
	PausedUntil time.Time
	Circuit     string // closed, open, half-open
}

// Stats returns every lane's counters at now, in the order lanes were first used.
func (c *Core) Stats(now time.Time) []LaneStats {
	out := make([]LaneStats, 0, len(c.list))
	for _, l := range c.list {
		s := l.st
		s.Lane = l.name
		s.QueuedInteractive, s.QueuedBatch = l.queued[0], l.queued[1]
		s.Delayed, s.Running = l.delayed, l.running
		s.TokensLeft, s.TokenLimit = -1, -1
		s.RequestsLeft, s.RequestLimit = -1, -1
		if v, ok := l.tokens.levelAt(now); ok {
			s.TokensLeft = v
		}
		if l.tokens.limit > 0 {
			s.TokenLimit = l.tokens.limit
		}
		if v, ok := l.requests.levelAt(now); ok {
			s.RequestsLeft = v
		}
		if l.requests.limit > 0 {
			s.RequestLimit = l.requests.limit
		}
		s.Margin = l.est.margin(1000, now)
		if l.pausedUntil.After(now) {
			s.PausedUntil = l.pausedUntil
		}
		br := l.br
		br.current(now)
		s.Circuit = br.String()
		out = append(out, s)
	}
	return out
}
