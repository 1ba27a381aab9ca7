package scheduler

import (
	"time"

	"github.com/luft-run/luft/agent"
)

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
	// The margin covers the estimate's error: a capped turn's is its prompt's alone.
	total := est + t.est.margin(float64(max(j.promptEstimate(), 1)), now)
	var tail float64
	if !j.capped() {
		tail = max(t.outs.quantile(cfg.OutputQuantile)*cfg.OutputHeadroom, t.upOut)
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
	input, output := total*(1-f), total*f
	if j.capped() {
		// The cap bounds the output: the margin is the prompt's.
		output = min(total, float64(j.EstOutput))
		input = total - output
	}
	return reservation{est: est, tokens: total, input: input, output: output,
		tail: min(tail, total), batch: j.Class == agent.ClassBatch}, true
}

// capped reports whether a turn estimated at estTokens sends an output cap of
// estOutput (one larger than the whole estimate is taken as none).
func capped(estTokens, estOutput int) bool { return estOutput > 0 && estOutput <= estTokens }

// capped reports whether the job's turn sends an output cap (see capped).
func (j *job) capped() bool { return capped(j.EstTokens, j.EstOutput) }

// promptEstimate is the job's estimate of its prompt: all of it, less a cap.
func (j *job) promptEstimate() int {
	if j.capped() {
		return j.EstTokens - j.EstOutput
	}
	return j.EstTokens
}

// estimate is a turn's token estimate corrected by the lane's learned error, and the
// share of it expected as output: estOutput's when known, else the lane's learned one.
func (t *lane) estimate(estTokens, estOutput int) (est, outShare float64) {
	raw := float64(max(estTokens, 1))
	outShare = t.outFrac
	if capped(estTokens, estOutput) {
		// A capped turn: its prompt's estimate is corrected as the lane learned, its cap
		// is reserved whole (a provider may keep it, as OpenAI does, or hold it while the
		// turn runs, as Anthropic does; the turn's end reconciles what it used).
		est = t.est.corrected(float64(max(estTokens-estOutput, 1))) + float64(estOutput)
		return est, float64(estOutput) / est
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
	if fit, at, why := t.shortFits(r, now); !fit {
		ok = false
		if at.After(until) {
			until, reason = at, why
		}
	}
	if at, why := t.silent.paced(now); !at.IsZero() {
		ok = false
		if at.After(until) {
			until, reason = at, why
		}
	}
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
		t, probe, s := c.route(l, j, ns, now)
		if s == stepOn {
			s = c.ready(l, t, j, now)
		}
		if s == stepOn {
			s = c.place(l, t, j, probe, ns, now)
		}
		if s == stepStop {
			return
		}
	}
}

// step is what tryAdmit does after one of its steps for the best turn.
type step uint8

const (
	stepOn   step = iota // the turn may go on to the next step
	stepNext             // the queue changed (a turn left it): look at the new best turn
	stepStop             // nothing more can run on the lane now
)

// route picks the lane t that l's best turn j would run on, given l's circuit breaker:
// l itself, or its fallback while l's circuit is open (or half open with its probe out).
// probe says that j would be the half-open lane's probe. A turn that may not wait for
// the circuit is refused (stepNext); one that waits blocks the lane (stepStop, or
// stepNext when the wait suspended its run).
func (c *Core) route(l *lane, j *job, ns int64, now time.Time) (t *lane, probe bool, s step) {
	switch l.br.current(now) {
	case breakerOpen:
		if fb := l.fallback; fb != nil && fb.br.current(now) == breakerClosed {
			l.wakeAt = l.br.openUntil // the probe is due then
			return fb, false, stepOn
		}
		if j.NoCircuitWait {
			l.unqueue(j, ns)
			c.refuseUntil(j, ReasonCircuitOpen, l.br.openUntil, now)
			return nil, false, stepNext
		}
		return nil, false, c.blockStep(l, j, l.br.openUntil, ReasonCircuitOpen, now)
	case breakerHalfOpen:
		if !l.br.probing {
			return l, true, stepOn
		}
		if fb := l.fallback; fb != nil && fb.br.current(now) == breakerClosed {
			return fb, false, stepOn
		}
		if j.NoCircuitWait {
			l.unqueue(j, ns)
			c.refuseUntil(j, ReasonCircuitOpen, time.Time{}, now)
			return nil, false, stepNext
		}
		// Wait for the probe's verdict; its Complete runs tryAdmit again.
		c.block(l, j, time.Time{}, ReasonCircuitOpen, now)
		return nil, false, stepStop
	}
	return l, false, stepOn
}

// ready reports whether t, the lane l's best turn j would run on, can take a turn now:
// it is not paused by a 429, has a free slot (and no scout out), and, for batch work,
// does not keep its last slots for interactive work.
func (c *Core) ready(l, t *lane, j *job, now time.Time) step {
	if t.pausedUntil.After(now) {
		return c.blockStep(l, j, t.pausedUntil, ReasonRetryAfter, now)
	}
	if !t.hasSlot() || t.scouting && t.running > 0 {
		// Plain queueing for a slot (or for the scout's answer): a Complete frees one.
		if t == l {
			l.unblock()
		}
		return stepStop
	}
	if j.Class == agent.ClassBatch {
		if held, until := t.slotHeld(&c.cfg, now); held {
			// The last free slots wait for interactive work until it has been
			// quiet for InteractiveLinger; a Complete or that wake looks again.
			if t == l {
				l.unblock()
				l.wakeAt = until
			}
			return stepStop
		}
	}
	return stepOn
}

// place admits l's best turn j on t when its reservation fits t's budgets, or a turn of
// the same caller that keeps its conversation's replica in its place (see affine). A
// turn too large for any window is refused; one that does not fit yet blocks the lane.
func (c *Core) place(l, t *lane, j *job, probe bool, ns int64, now time.Time) step {
	if alt := c.affine(l, t, j); alt != nil {
		if r, ok := t.reserve(alt, &c.cfg, now); ok {
			if fit, _, _ := t.fits(r, &c.cfg, now); fit {
				c.admit(l, t, alt, r, probe, now)
				return stepNext
			}
		}
	}
	r, ok := t.reserve(j, &c.cfg, now)
	if !ok {
		l.unqueue(j, ns)
		c.refuse(j, ReasonOversize, now)
		return stepNext
	}
	if fit, until, why := t.fits(r, &c.cfg, now); !fit {
		return c.blockStep(l, j, until, why, now)
	}
	c.admit(l, t, j, r, probe, now)
	return stepNext
}

// blockStep is block as a step of tryAdmit: stepNext when the wait suspended j's run
// (the queue changed), else stepStop.
func (c *Core) blockStep(l *lane, j *job, until time.Time, reason string, now time.Time) step {
	if c.block(l, j, until, reason, now) {
		return stepNext
	}
	return stepStop
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
	if !t.limitsKnown() {
		t.silent.admitted(r.tokens, now)
	}
	t.short.admitted(r, now)

	j.charged, j.reserved, j.resIn, j.resOut = r.est, r.tokens, r.input, r.output
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
