package scheduler

import (
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// RateLimit is one rate-limit dimension (requests, tokens, input or output tokens) as a
// provider reported it on one response. A provider that omits a header leaves the
// matching Has flag false: an absent header is unknown, never zero, because "0 remaining"
// and "not reported" call for opposite decisions.
type RateLimit struct {
	Limit        int64     // the bucket's capacity, when HasLimit
	Remaining    int64     // what is left now, when HasRemaining
	Reset        time.Time // when the bucket is full again; zero when not reported
	HasLimit     bool
	HasRemaining bool

	grain time.Duration // how far Reset may have been rounded up; 0 = 10 ms
	// slack is how far the true count may be above Remaining beyond the floor's one
	// token: Anthropic rounds token counts to the nearest thousand, and Remaining is
	// then the rounded count less 500, the least the true count may be.
	slack int64
}

// Known reports whether the response said anything about this dimension.
func (r RateLimit) Known() bool { return r.HasLimit || r.HasRemaining || !r.Reset.IsZero() }

// Telemetry is the rate-limit information of one response, parsed into absolute times
// relative to the now it was parsed at; each is that now plus a wait, so it keeps now's
// monotonic clock reading and a change of the system clock does not move it. Both header families map onto the same fields:
// OpenAI-compatible servers (OpenAI, Groq, vLLM, luft's fake engine) send
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}; Anthropic sends
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}.
type Telemetry struct {
	Requests     RateLimit
	Tokens       RateLimit
	InputTokens  RateLimit // Anthropic's separate input-token bucket
	OutputTokens RateLimit // Anthropic's separate output-token bucket

	// RetryAt is when the server asked to be called again (retry-after-ms, else
	// retry-after as seconds or an HTTP date, else a 429's "Please try again in 6.5s");
	// zero when it did not say.
	RetryAt time.Time
	// Requested is the tokens a 429's words said the request needed (OpenAI's
	// "Requested 1900"): what the provider charges it at arrival. 0 = not said.
	Requested int64
}

var (
	reTryAgain  = regexp.MustCompile(`(?i)try again in ((?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h))+)`)
	reRequested = regexp.MustCompile(`\bRequested ([0-9]{1,12})\b`)
)

// readBody reads what a 429's error text says (received at now): OpenAI's "Please try
// again in 6.5s" when no header gave a wait, and "Requested N". Text that does not
// parse, or a wait beyond maxSeconds, is ignored.
func (t *Telemetry) readBody(text string, now time.Time) {
	if len(text) > 4096 {
		text = text[:4096]
	}
	if m := reTryAgain.FindStringSubmatch(text); m != nil && t.RetryAt.IsZero() {
		if d, err := time.ParseDuration(strings.ToLower(m[1])); err == nil && d >= 0 && d.Seconds() < maxSeconds {
			t.RetryAt = now.Add(d)
		}
	}
	if m := reRequested.FindStringSubmatch(text); m != nil {
		if n, err := strconv.ParseInt(m[1], 10, 64); err == nil {
			t.Requested = n
		}
	}
}

// Empty reports whether the response carried no rate-limit information at all.
func (t Telemetry) Empty() bool {
	return !t.Requests.Known() && !t.Tokens.Known() && !t.InputTokens.Known() &&
		!t.OutputTokens.Known() && t.RetryAt.IsZero()
}

// ParseTelemetry reads the rate-limit headers of a response received at now. Header
// names match case-insensitively (a map built by hand need not be canonical). A value
// that does not parse is ignored as if absent, and so is a wait or a time more than
// maxSeconds (a year) ahead; ParseTelemetry never panics and never returns a negative
// count or a reset before now. A field sent twice under differently cased names takes
// the most cautious value (the smaller count, the later time).
func ParseTelemetry(h http.Header, now time.Time) Telemetry {
	var t Telemetry
	if len(h) == 0 {
		return t
	}
	// A header may come more than once under different spellings of its name (a map
	// built by hand, a proxy adding its own); map order is random, so repeats merge to
	// the most cautious reading instead of the last one seen.
	var retryMS, retry time.Time
	var aggregate RateLimit // anthropic-ratelimit-tokens-*: see below
	ref := wallRef(h, now)
	for name, vals := range h {
		if len(vals) == 0 {
			continue
		}
		v := strings.TrimSpace(vals[0])
		n := strings.ToLower(name)
		switch {
		case n == "retry-after":
			if at, ok := parseRetryAfter(v, now, ref); ok {
				retry = later(retry, at)
			}
		case n == "retry-after-ms":
			if d, ok := parseMillis(v); ok {
				retryMS = later(retryMS, now.Add(d))
			}
		case strings.HasPrefix(n, "x-ratelimit-"):
			// x-ratelimit-<field>-<dimension>
			rest := n[len("x-ratelimit-"):]
			field, dim, ok := strings.Cut(rest, "-")
			if !ok {
				continue
			}
			setField(openAIDim(&t, dim), field, v, now, ref)
		case strings.HasPrefix(n, "anthropic-ratelimit-"):
			// anthropic-ratelimit-<dimension>-<field>
			rest := n[len("anthropic-ratelimit-"):]
			i := strings.LastIndexByte(rest, '-')
			if i < 0 {
				continue
			}
			dim := anthropicDim(&t, rest[:i])
			if rest[:i] == "tokens" {
				dim = &aggregate
			}
			setField(dim, rest[i+1:], v, now, ref)
		}
	}
	// Anthropic's token counts left are rounded to the nearest thousand (its documented
	// headers): read the least they may be.
	for _, r := range []*RateLimit{&t.InputTokens, &t.OutputTokens, &aggregate} {
		if r.HasRemaining {
			r.Remaining, r.slack = max(0, r.Remaining-anthropicRounding/2), anthropicRounding
		}
	}
	// Anthropic's tokens-* is no bucket of its own but the most restrictive of its input
	// and output buckets: read as one bucket of whole turns, a 1,500-output-token limit
	// refused a turn of 1,700 tokens that was mostly prompt. It counts only where the
	// split buckets are not reported.
	if !t.InputTokens.Known() && !t.OutputTokens.Known() {
		t.Tokens = cautious(t.Tokens, aggregate)
	}
	t.RetryAt = retryMS
	if t.RetryAt.IsZero() {
		t.RetryAt = retry
	}
	return t
}

// anthropicRounding is the unit Anthropic rounds its token counts left to.
const anthropicRounding = 1000

// cautious merges two readings of one bucket into the most cautious one: the smaller
// counts, the later reset.
func cautious(a, b RateLimit) RateLimit {
	if b.HasLimit && (!a.HasLimit || b.Limit < a.Limit) {
		a.Limit, a.HasLimit = b.Limit, true
	}
	if b.HasRemaining && (!a.HasRemaining || b.Remaining < a.Remaining) {
		a.Remaining, a.HasRemaining, a.slack = b.Remaining, true, b.slack
	}
	if b.Reset.After(a.Reset) {
		a.Reset, a.grain = b.Reset, b.grain
	}
	return a
}

// later is the later of two times, either of which may be zero.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func openAIDim(t *Telemetry, dim string) *RateLimit {
	switch dim {
	case "requests":
		return &t.Requests
	case "tokens":
		return &t.Tokens
	}
	return nil
}

func anthropicDim(t *Telemetry, dim string) *RateLimit {
	switch dim {
	case "requests":
		return &t.Requests
	case "tokens":
		return &t.Tokens
	case "input-tokens":
		return &t.InputTokens
	case "output-tokens":
		return &t.OutputTokens
	}
	return nil
}

func setField(r *RateLimit, field, v string, now, ref time.Time) {
	if r == nil {
		return
	}
	switch field {
	case "limit":
		if n, ok := parseCount(v); ok && (!r.HasLimit || n < r.Limit) {
			r.Limit, r.HasLimit = n, true
		}
	case "remaining":
		if n, ok := parseCount(v); ok && (!r.HasRemaining || n < r.Remaining) {
			r.Remaining, r.HasRemaining = n, true
		}
	case "reset":
		if at, ok := parseReset(v, now, ref); ok {
			r.Reset = later(r.Reset, at)
			r.grain = max(r.grain, resetGrain(v))
		}
	}
}

// maxSeconds bounds every parsed wait so that converting it to a time.Duration cannot
// overflow; no provider asks for a wait of more than a few days.
const maxSeconds = 365 * 24 * 3600

// parseCount reads a non-negative integer count. A decimal is accepted and truncated,
// because some proxies re-serialise counts as floats.
func parseCount(v string) (int64, bool) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, n >= 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 1e18 {
		return 0, false
	}
	return int64(f), true
}

// parseSeconds reads a non-negative, finite number of seconds.
func parseSeconds(v string) (time.Duration, bool) { return parseUnits(v, time.Second) }

func parseMillis(v string) (time.Duration, bool) { return parseUnits(v, time.Millisecond) }

// parseUnits reads a non-negative number of units of at most maxSeconds.
func parseUnits(v string, unit time.Duration) (time.Duration, bool) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > maxSeconds*float64(time.Second/unit) {
		return 0, false
	}
	return time.Duration(f * float64(unit)), true
}

// parseReset reads a reset value: an RFC 3339 time (Anthropic), a Go-style duration
// such as 7.66s, 2m59.56s, 450ms or 1h2m3s (OpenAI, Groq), or a bare number of seconds.
// A time in the past means "now": a reset is never negative. An RFC 3339 time is read
// against ref (see wallRef).
func parseReset(v string, now, ref time.Time) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	if strings.ContainsAny(v, "T:") && strings.Contains(v, "-") {
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, false
		}
		return clampAt(at, now, ref)
	}
	if d, ok := parseSeconds(v); ok {
		return now.Add(d), true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > maxSeconds*time.Second {
		return time.Time{}, false
	}
	return now.Add(d), true
}

// resetGrain is how coarsely a reset value is written: hundredths or finer when it has
// a fraction or a sub-second unit (OpenAI's 7.66s, 2m59.56s, 450ms), else whole seconds
// (6m0s, a bare 12, Anthropic's RFC 3339 times).
func resetGrain(v string) time.Duration {
	if strings.Contains(v, ".") || strings.HasSuffix(v, "ms") || strings.HasSuffix(v, "µs") ||
		strings.HasSuffix(v, "us") || strings.HasSuffix(v, "ns") {
		return 10 * time.Millisecond
	}
	return time.Second
}

// parseRetryAfter reads retry-after as seconds (integer or decimal) or an HTTP date,
// read against ref (see wallRef).
func parseRetryAfter(v string, now, ref time.Time) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	if d, ok := parseSeconds(v); ok {
		return now.Add(d), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	return clampAt(at, now, ref)
}

// maxSkew is how far luft's wall clock may be from a server's, as its Date header
// tells it (whole seconds, rounded down, and sent a moment before it is read), before
// the server's absolute times are read against the Date rather than luft's clock.
const maxSkew = 5 * time.Second

// wallRef is the wall time, as the server's clock has it, that the response's absolute
// times (Anthropic's RFC 3339 resets, an HTTP-date retry-after) are measured from:
// luft's own clock at now, which is finer than a Date header's whole seconds, unless
// the response's Date disagrees with it by more than maxSkew — the system clock was set
// ahead or back, or is simply wrong — and then that Date. An absolute time is the
// server's, so the wait it means is its distance from the server's now.
func wallRef(h http.Header, now time.Time) time.Time {
	local := now.Round(0)
	for name, vals := range h {
		if len(vals) == 0 || !strings.EqualFold(name, "date") {
			continue
		}
		date, err := http.ParseTime(strings.TrimSpace(vals[0]))
		if err != nil {
			return local
		}
		if skew := local.Sub(date); skew > maxSkew || skew < -maxSkew {
			return date
		}
		return local
	}
	return local
}

// clampAt takes a time a server named, as the wait from ref (see wallRef) to it: one
// in the past means now; one more than maxSeconds away is as absurd as such a wait in
// seconds and is ignored.
//
// The wait is returned as now plus the wait, so it carries now's monotonic clock
// reading like every other time the scheduler keeps. A parsed date has only a wall
// reading, and Go compares such a time with now by the wall clock: kept as parsed, it
// would end a wait early when the system clock is set ahead while the turn waits (a
// burst of 429s), and stretch it by as much when the clock is set back.
func clampAt(at, now, ref time.Time) (time.Time, bool) {
	d := at.Sub(ref)
	switch {
	case d <= 0:
		return now, true
	case d > maxSeconds*time.Second:
		return time.Time{}, false
	}
	return now.Add(d), true
}
