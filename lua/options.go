package lua

import (
	"fmt"
	"math"
	"strings"

	"github.com/luft-run/luft/internal/suggest"
)

// Upper bounds of numeric options: large enough for any real use, small enough that the
// conversions to Go integers and durations cannot overflow.
const (
	maxWidth        = 1_000_000        // max_concurrency, max_inflight
	maxBudgetTimeMS = 1e12             // about 31 years
	maxBudgetCount  = 1 << 53          // agents, tokens: exact in a float
	maxBudgetUSD    = 1e12             // dollars
	maxRandom       = float64(1 << 53) // |m|, |n| of luft.random: exact in a float
)

// wholeIn reports whether f is a whole number in [lo, hi] (false for NaN and ±inf).
func wholeIn(f, lo, hi float64) bool {
	return f >= lo && f <= hi && f == math.Trunc(f)
}

// unknownOption is the error text for an option name that is none of known: it names
// the nearest known one when the name looks like a typo of it (promt: prompt).
func unknownOption(key string, known []string) string {
	msg := fmt.Sprintf("unknown option %q", key)
	if near := suggest.Nearest(key, known); near != "" {
		msg += fmt.Sprintf(": did you mean %q?", near)
	}
	return msg + " (known: " + strings.Join(known, ", ") + ")"
}
