package config

import (
	"fmt"
	"math"
	"net/url"
)

// Bounds of the numeric settings. The config file and the flags that set the same things
// (--max-concurrency, ...) check against these, through CheckRange, so a value is refused
// the same way wherever it comes from, before it can overflow or starve a lane.
const (
	MaxSlots        = 100_000           // max_concurrency, [scheduler] slots, --max-concurrency
	MaxTPM          = 1_000_000_000_000 // tpm: tokens per minute
	MaxRPM          = 1_000_000_000     // rpm: requests per minute
	MaxTurns        = 10_000            // max_turns of one agent's tool loop
	MaxPricePerMTok = 1_000_000         // price_*_per_mtok, in dollars
	MaxAgentCalls   = 100_000_000       // --max-agent-calls
)

// CheckRange returns nil when n lies in [lo, hi], and otherwise an error saying what is
// allowed: "must not be negative (got -1)", "must be at most 100000 (got 1e+06)", "must be
// a finite number (got NaN)". The caller names the setting.
func CheckRange[T ~int | ~int64 | ~float64](n, lo, hi T) error {
	if f := float64(n); math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("must be a finite number (got %v)", n)
	}
	switch {
	case n < lo && lo == 0:
		return fmt.Errorf("must not be negative (got %v)", n)
	case n < lo:
		return fmt.Errorf("must be at least %v (got %v)", lo, n)
	case n > hi:
		return fmt.Errorf("must be at most %v (got %v)", hi, n)
	}
	return nil
}

// CheckURL returns nil when s is an absolute http or https URL with a host, as an
// endpoint needs, and otherwise an error saying what is wrong.
func CheckURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %q (e.g. \"http://127.0.0.1:8000/v1\")", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("not an http or https URL: %q (e.g. \"http://127.0.0.1:8000/v1\")", s)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("URL has no host: %q (e.g. \"http://127.0.0.1:8000/v1\")", s)
	}
	return nil
}
