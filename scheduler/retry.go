package scheduler

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
