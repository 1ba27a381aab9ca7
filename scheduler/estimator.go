package scheduler

import (
	"math"
	"slices"
	"time"
)

const (
	residualWindow = 30 // residuals kept for σ and the quantile
	meanWindow     = 6  // residuals averaged for the bias correction ε
)

// estimator learns, per lane, how far the callers' token estimates miss the usage the
// provider reports, and turns that into a reservation: the estimate corrected by the
// recent mean residual ε, plus a safety margin. The margin is the larger of the residual
// quantile above ε and k·σ, so a skewed error and a wide one are both covered; before
// MinSamples completions it is k times a fixed fraction of the estimate. Every 429 that
// slips through adds a bump to the margin, which halves every MarginHalfLife, so a lane
// that misjudged once is careful for a while and then lean again (agentpause's k only
// ever grows).
type estimator struct {
	cfg *Config

	res    [residualWindow]float64 // ring of the last residuals (actual − estimate)
	n, pos int
	recent [meanWindow]float64
	rn     int
	rpos   int

	eps, sigma, upper float64 // recomputed on every record

	bump   float64 // in units of the spread, at bumpAt
	bumpAt time.Time
}

// record learns from one completed turn that was estimated at est and used actual tokens.
func (e *estimator) record(est, actual float64) {
	r := actual - est
	e.res[e.pos] = r
	e.pos = (e.pos + 1) % residualWindow
	e.n = min(e.n+1, residualWindow)
	e.recent[e.rpos] = r
	e.rpos = (e.rpos + 1) % meanWindow
	e.rn = min(e.rn+1, meanWindow)

	var sum float64
	for _, v := range e.recent[:e.rn] {
		sum += v
	}
	e.eps = math.Trunc(sum / float64(e.rn))

	var buf [residualWindow]float64
	s := buf[:e.n]
	copy(s, e.res[:e.n])
	var mean float64
	for _, v := range s {
		mean += v
	}
	mean /= float64(e.n)
	var ss float64
	for _, v := range s {
		ss += (v - mean) * (v - mean)
	}
	e.sigma = math.Sqrt(ss / float64(e.n))
	slices.Sort(s)
	i := int(math.Ceil(e.cfg.Quantile*float64(e.n))) - 1
	e.upper = s[max(0, min(i, e.n-1))]
}

// corrected is the estimate with the learned bias removed; never below one token.
func (e *estimator) corrected(est float64) float64 {
	return max(1, est+e.eps)
}

// margin is the safety margin reserved on top of corrected(est) at now.
func (e *estimator) margin(est float64, now time.Time) float64 {
	var m, spread float64
	if e.n < e.cfg.MinSamples {
		spread = e.cfg.FallbackSpread * est
		m = e.cfg.SafetyK * spread
	} else {
		spread = max(e.sigma, 0.05*est)
		m = max(0, e.upper-e.eps, e.cfg.SafetyK*e.sigma)
	}
	return m + e.bumpNow(now)*spread
}

func (e *estimator) bumpNow(now time.Time) float64 {
	if e.bump == 0 {
		return 0
	}
	dt := now.Sub(e.bumpAt)
	if dt <= 0 || e.cfg.MarginHalfLife <= 0 {
		return e.bump
	}
	return e.bump * math.Exp2(-dt.Seconds()/e.cfg.MarginHalfLife.Seconds())
}

// raise widens the margin after a 429.
func (e *estimator) raise(now time.Time) {
	e.bump = min(e.bumpNow(now)+e.cfg.MarginBump, e.cfg.MarginBumpMax)
	e.bumpAt = now
}

// outputWindow is how many recent completion lengths a lane keeps.
const outputWindow = 64

// outputs learns, per lane, the completion lengths of turns that set no output cap.
// Their length is unknown until they end, and heavy-tailed (a few answers run ten times
// the median), so the reservation for output is a high quantile of recent completions,
// not the mean: with the bucket near empty, a reserve short of the actual completion is
// a 429, while a generous one only shifts the next admission (the bucket refills at the
// same rate either way).
type outputs struct {
	ring [outputWindow]float64
	n    int
	pos  int
}

func (o *outputs) record(tokens float64) {
	o.ring[o.pos] = tokens
	o.pos = (o.pos + 1) % outputWindow
	o.n = min(o.n+1, outputWindow)
}

// quantile is the q-quantile of the recent completions; 0 before the first.
func (o *outputs) quantile(q float64) float64 {
	if o.n == 0 {
		return 0
	}
	var buf [outputWindow]float64
	s := buf[:o.n]
	copy(s, o.ring[:o.n])
	slices.Sort(s)
	i := int(math.Ceil(q*float64(o.n))) - 1
	return s[max(0, min(i, o.n-1))]
}
