package scheduler

import (
	"time"
)

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
		if !j.capped() {
			unread = out
		}
	}
	if !t.requests.endKept(j.flight, tel.Requests, 1, 0, now) {
		t.requests.observe(j.flight, tel.Requests, 1, 0, readAt, now)
	}
	if !t.tokens.endKept(j.flight, tel.Tokens, total, out, now) {
		charge, alone := t.tokens.observe(j.flight, tel.Tokens, total, unread, readAt, now)
		if alone && res.Status == StatusOK && !j.capped() && u.Total() > 0 {
			t.learnCharge(charge, in, out)
		}
	}
	if !t.inTokens.endKept(j.flight, tel.InputTokens, in, 0, now) {
		t.inTokens.observe(j.flight, tel.InputTokens, in, 0, readAt, now)
	}
	if !t.outTokens.endKept(j.flight, tel.OutputTokens, out, out, now) {
		t.outTokens.observe(j.flight, tel.OutputTokens, out, unread, readAt, now)
	}
	t.heard(tel)
	if res.Status == StatusOK {
		t.silent.answered()
	}
	if res.Status == StatusOK && u.Total() > 0 {
		// What is learned is the prompt's estimate, as for any turn (a capped turn's cap
		// is reserved whole: see estimate); without a cap the completion's length is
		// learned apart (see outputs).
		t.est.record(float64(max(j.promptEstimate(), 1)), in)
		if !j.capped() {
			t.outs.record(out)
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

// learnCharge learns from the charge a provider took for a turn without an output cap
// that ran alone, which used in and out tokens: a charge beyond them is a completion
// reserved at arrival and kept (OpenAI reserves max_tokens, or the model's longest
// output when none is sent), which every later such turn must fit up front. One reading
// may also count another client's use of the key: only two in a row teach it, the
// smaller of them. Noise of the refill's dead reckoning (2% of the limit, 20 tokens at
// least) teaches nothing.
func (t *lane) learnCharge(charge, in, out float64) {
	reserved := charge - in
	if reserved <= out+max(20, 0.02*t.tokens.limit) {
		t.chargeSeen = 0
		return
	}
	if t.chargeSeen > 0 {
		t.upOut = max(t.upOut, min(reserved, t.chargeSeen))
		t.upfront = true
	}
	t.chargeSeen = reserved
}
