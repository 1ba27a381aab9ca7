package testkit

import (
	"math"
	"math/rand/v2"
)

// Lengths makes completion lengths heavy-tailed, as real models' are: most answers are
// short, a few run ten times the median. Each generated-text completion's length is
// drawn from a lognormal distribution with the given median and log-space spread, cut
// at Max. The draw is a function of Seed and the request's messages, so the same
// conversation gets the same length in every run with the same Seed, whatever order
// requests arrive in. A request's max_tokens (or max_completion_tokens) still caps it.
// Without max_tokens the rate limiter charges the prompt plus this actual length, so a
// client cannot know a request's charge before it ends.
type Lengths struct {
	Median int     // tokens; 0 disables the draw (every completion is the request's cap or DefaultMaxTokens)
	Sigma  float64 // log-space standard deviation; default 0.8
	Max    int     // longest completion; default 10 × Median
	Seed   uint64
}

// draw returns the completion length for a request whose messages hash to reqSeed.
func (l Lengths) draw(reqSeed uint64) int {
	sigma := l.Sigma
	if sigma <= 0 {
		sigma = 0.8
	}
	hi := l.Max
	if hi <= 0 {
		hi = 10 * l.Median
	}
	r := rand.New(rand.NewPCG(l.Seed, reqSeed))
	n := int(math.Round(float64(l.Median) * math.Exp(sigma*r.NormFloat64())))
	return max(1, min(n, hi))
}
