package scheduler

import (
	"time"
)

// What a lane learns when its provider says nothing: no rate-limit header on any
// response (a local vLLM or Ollama behind a gateway that limits without saying so).
// Its first answer without headers makes it silent: from then on it sends at most one
// request per ShortWindow, since a limit may be enforced over a second. The first 429
// then teaches its token budget from the lane's own accounting, on the conventions of
// every provider that states one: a limit L per minute, refilling continuously at L/60
// a second, full when the lane first sent. Each answered turn proves that its prompt
// fitted, L·(1 + t/60) ≥ (tokens used before it) + prompt, t the minutes since the
// first send, so the largest such L is a lower bound; a 429 proves the opposite for
// the turn it refused, an upper bound. The lane's token bucket takes the lower bound,
// raised as later answers prove more, lowered when a 429 shows even that was too much;
// the 429 that taught it does not count towards the turn's MaxRateRetries.

// silent is a lane's learning state for a provider that reports no budget.
type silent struct {
	on    bool      // a scout's answer, or a 429, came without rate-limit headers
	pace  bool      // one request per short window: a scout's answer said nothing
	t0    time.Time // the lane's first admission
	used  float64   // tokens of the turns answered so far
	lower float64   // the largest per-minute limit the answers prove
	upper float64   // the least per-minute limit a 429 proves too much; 0 = none yet
	last  time.Time // the last admission, for the short window
	// inflight is the prompt estimates of the lane's running attempts: tokens the
	// provider has taken for them at least.
	inflight float64
}

// silentCandidate reports whether l can only learn its budget from 429s: nothing
// configured, nothing reported.
func (l *lane) silentCandidate() bool {
	return l.cfg.TPM == 0 && l.cfg.RPM == 0 && !l.tokens.known && l.tokens.limit == 0 &&
		l.inTokens.limit == 0 && l.outTokens.limit == 0 && l.requests.limit == 0 || l.quiet.on && l.quiet.lower > 0
}

// minutes is how many minutes of refill a lane's budget had by at.
func (q *silent) minutes(at time.Time) float64 { return at.Sub(q.t0).Minutes() }

// admitted records an admission on the lane at now.
func (l *lane) silentAdmitted(j *job, now time.Time) {
	if l.quiet.t0.IsZero() {
		l.quiet.t0 = now
	}
	l.quiet.last = now
	j.usedAtAdmit, j.admittedAt = l.quiet.used+l.quiet.inflight, now
	l.quiet.inflight += j.charged
}

// silentAnswered learns from a finished attempt: whether the lane's provider is silent,
// and from an answer how much the budget must at least be.
func (l *lane) silentAnswered(j *job, res Result, prompt, total float64, scout bool) {
	l.quiet.inflight = max(0, l.quiet.inflight-j.charged)
	if res.Status != StatusOK {
		return
	}
	if scout && res.Telemetry.Empty() && l.silentCandidate() {
		// The scout's answer said nothing about the limits it was to learn: go on
		// gently, one request per short window, until a 429 teaches them.
		l.quiet.on, l.quiet.pace = true, true
	}
	if !l.quiet.on {
		return
	}
	l.quiet.used += total
	if lb := (j.usedAtAdmit + prompt) / (1 + l.quiet.minutes(j.admittedAt)); lb > l.quiet.lower {
		l.quiet.lower = lb
		if l.tokens.known && l.quiet.upper == 0 || l.tokens.known && lb < l.quiet.upper {
			l.silentBudget(j.admittedAt)
		}
	}
}

// silentRefused learns from a 429 without telemetry on a silent lane; it reports
// whether the 429 taught the lane its budget (the turn's retry is then not counted).
func (l *lane) silentRefused(j *job, tel Telemetry, now time.Time) bool {
	if !tel.Empty() || !l.quiet.on && !l.silentCandidate() || l.cfg.TPM > 0 {
		return false
	}
	l.quiet.on = true
	need := j.charged
	// A refusal before anything was used says only that the bucket was not full (the
	// key is shared, or was used before): no bound.
	if ub := (j.usedAtAdmit + need) / (1 + l.quiet.minutes(j.admittedAt)); j.usedAtAdmit > 0 && (l.quiet.upper == 0 || ub < l.quiet.upper) {
		l.quiet.upper = ub
	}
	first := !l.tokens.known
	l.silentBudget(now)
	return first
}

// silentBudget sets the lane's token bucket to the limit learned so far: the lower
// bound, or just under the upper one when a 429 showed the lower bound too much.
func (l *lane) silentBudget(now time.Time) {
	q := &l.quiet
	lim := q.lower
	if q.upper > 0 {
		// The refused turn found the bucket all but empty: the limit is just under
		// what that bound allows (unless the bucket had sat full, which only makes
		// the bound loose, and the next 429 tightens it).
		lim = min(max(lim, silentShare*q.upper), silentShare*q.upper)
	}
	if lim <= 0 {
		return
	}
	b := &l.tokens
	b.advance(now)
	b.limit, b.rate = lim, lim/60
	b.level = min(lim, lim*(1+q.minutes(now))-q.used-b.pending)
	b.known, b.at = true, now
}

// silentShare is the share of a 429's upper bound a silent lane takes as its limit.
const silentShare = 0.98

// silentPaced is when a silent lane may send next: one request per short window, once
// its scout's answer said nothing or a 429 taught it a budget.
func (l *lane) silentPaced(q time.Duration) time.Time {
	if !l.quiet.on || !l.quiet.pace && l.quiet.upper == 0 || q <= 0 || l.quiet.last.IsZero() {
		return time.Time{}
	}
	return l.quiet.last.Add(q)
}
