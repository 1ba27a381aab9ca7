package scheduler

import (
	"math"
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
func (c *Core) settle(t *lane, j *job, res Result, now time.Time, scout bool) {
	u, tel := res.Usage, res.Telemetry.budgets()
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
		_, _ = t.requests.observe(j.flight, tel.Requests, 1, 0, readAt, now)
	}
	if !t.tokens.endKept(j.flight, tel.Tokens, total, out, now) {
		c, ok := t.tokens.observe(j.flight, tel.Tokens, total, unread, readAt, now)
		if ok && res.Status == StatusOK && j.EstOutput == 0 && u.Total() > 0 {
			t.learnArrival(c, in, out)
		}
	}
	if !t.inTokens.endKept(j.flight, tel.InputTokens, in, 0, now) {
		_, _ = t.inTokens.observe(j.flight, tel.InputTokens, in, 0, readAt, now)
	}
	if !t.outTokens.endKept(j.flight, tel.OutputTokens, out, out, now) {
		_, _ = t.outTokens.observe(j.flight, tel.OutputTokens, out, unread, readAt, now)
	}
	t.silentAnswered(j, res, in, total, scout)
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
	tel = tel.budgets()
	j.early, j.earlyAt = true, now
	t.requests.seen(j.flight, tel.Requests, now)
	t.tokens.seen(j.flight, tel.Tokens, now)
	t.inTokens.seen(j.flight, tel.InputTokens, now)
	t.outTokens.seen(j.flight, tel.OutputTokens, now)
	t.requests.early(tel.Requests, now)
	t.tokens.early(tel.Tokens, now)
	t.inTokens.early(tel.InputTokens, now)
	t.outTokens.early(tel.OutputTokens, now)
	if t.scouting && tel.Empty() && t.silentCandidate() {
		// The scout's headers say nothing about the limits it was to learn: go on
		// gently, one request per short window, until a 429 teaches them (silent.go).
		t.quiet.on, t.quiet.pace = true, true
	}
	if t.scouting {
		t.scouting = false
		c.tryAdmit(j.home, now)
	}
	return c.out
}

// arrivalWindow is how many clean readings of what a provider took at arrival a lane
// keeps (see learnArrival).
const arrivalWindow = 8

// arrivalMin is how many clean readings must agree before a lane takes its provider to
// reserve output at arrival: a reading taken before a completion billed at its end
// (a stream's headers) may show a little more than the turn used, now and then.
const arrivalMin = 4

// learnArrival learns from one uncapped turn's clean reading (see bucket.observe) that
// the provider took charged tokens for it at arrival, against in tokens of prompt and
// out of completion it reported. A provider that reserves its max output (max_tokens,
// or the model's longest completion when none is sent) at arrival takes more than the
// turn used: when every recent reading says so by more than noise, arrivalOut becomes
// the least output any of them took (what the next turn must find room for), and the
// lane reserves output up front.
func (l *lane) learnArrival(charged, in, out float64) {
	l.arrivals[l.arrPos] = arrival{extra: charged - in - out, output: charged - in}
	l.arrPos = (l.arrPos + 1) % arrivalWindow
	l.arrN = min(l.arrN+1, arrivalWindow)
	if l.arrN < arrivalMin {
		return
	}
	least := math.Inf(1)
	for _, a := range l.arrivals[:l.arrN] {
		if a.extra <= arrivalNoise {
			l.arrivalOut = 0
			return
		}
		least = min(least, a.output)
	}
	l.arrivalOut = least
	l.upfront = true
}

// arrivalNoise is how many tokens a clean reading may take beyond the turn's usage
// without showing that the provider reserves output at arrival: a floored remaining
// count and the refill between readings.
const arrivalNoise = 20

type arrival struct{ extra, output float64 }
