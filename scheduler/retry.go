package scheduler

// What a failed attempt teaches. A 429 says the lane's budget is spent: the lane pauses
// until the server's retry-after or the spent bucket's reset, its safety margin rises,
// a turn without an output cap learns that the provider charges its output up front,
// and the turn goes back to its queue at its rank. A 5xx or a network error says the
// lane may be unwell: the turn waits out a jittered backoff and the failure counts
// towards the lane's circuit breaker.

import (
	"math"
	"time"
)

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

// retryRateLimited handles a running j's 429: the lane that served it pauses and
// learns, and j is queued again at its rank, or refused after MaxRateRetries.
func (c *Core) retryRateLimited(j *job, tel Telemetry, now time.Time) {
	t, home := j.serving, j.home
	home.charge(j.Caller, -j.charged)
	t.st.RateLimited++
	t.est.raise(now)
	if !j.capped() {
		// Admitted on its prompt and still refused: this provider wants the
		// output to fit up front, and may have said how much it wanted.
		t.upfront = true
		if tel.Requested > 0 {
			t.upOut = max(t.upOut, float64(tel.Requested)-j.charged)
		}
	}
	if j.probe {
		t.br.probing = false
	}
	if t.limitsKnown() {
		t.short.on = true // a 429 though the buckets are known: see short.go
	}
	if tel.Empty() && !t.limitsKnown() {
		t.silent.refused(j.flight, t.flightID, now) // a 429 that says nothing: see silent.go
	}
	until := c.retryAt(t, tel, now)
	if t.silent.on {
		until = later(until, t.silent.nextReq)
	}
	if until.After(t.pausedUntil) {
		t.pausedUntil = until
	}
	j.rateFails++
	if j.rateFails > c.cfg.MaxRateRetries {
		c.refuse(j, ReasonRetriesExhausted, now)
		return
	}
	t.st.Retries++
	// Back in its queue at its original key: the lane's pause holds it, and
	// when the pause ends it is first again.
	j.state, j.notified = jobQueued, false
	home.enqueue(j, c.nanos(now))
	c.emit(Action{Kind: ActRetry, ID: j.ID, RunID: j.RunID, Lane: home.name, Until: until,
		Reason: ReasonRateLimited, Attempt: j.attempts + j.rateFails + 1})
}

// retryServerError handles a running j's 5xx or network error: it counts towards the
// serving lane's breaker, and j waits out the server's retry-after or a backoff before
// it is queued again, or is refused after MaxRetries.
func (c *Core) retryServerError(j *job, tel Telemetry, now time.Time) {
	t, home := j.serving, j.home
	home.charge(j.Caller, -j.charged)
	if t.br.failure(now, j.probe, &c.cfg) {
		t.st.CircuitOpens++
	}
	j.attempts++
	if j.attempts > c.cfg.MaxRetries {
		c.refuse(j, ReasonRetriesExhausted, now)
		return
	}
	t.st.Retries++
	until := tel.RetryAt
	if until.IsZero() || until.Before(now) {
		until = now.Add(c.backoff(j.attempts))
	}
	j.state, j.notBefore, j.notified = jobDelayed, until, false
	c.delayed.Push(j)
	home.delayed++
	c.emit(Action{Kind: ActRetry, ID: j.ID, RunID: j.RunID, Lane: home.name, Until: until,
		Reason: ReasonServerError, Attempt: j.attempts + j.rateFails + 1})
}
