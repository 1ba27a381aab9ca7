package scheduler

import (
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzParseTelemetry feeds any header block ("Name: value" lines; names kept as written,
// so one header may come twice in different cases) to ParseTelemetry and the parsed
// budgets to a bucket. It checks that parsing never panics and gives the same answer
// every time, that counts are never negative and every reset or retry time lies between
// now and now+maxSeconds, and that a bucket fed with them keeps finite, non-negative
// limits and rates and never asks to wait until before now.
func FuzzParseTelemetry(f *testing.F) {
	for _, s := range []string{
		"x-ratelimit-limit-requests: 60\nx-ratelimit-remaining-requests: 59\nx-ratelimit-reset-requests: 1s\n" +
			"x-ratelimit-limit-tokens: 150000\nx-ratelimit-remaining-tokens: 149984\nx-ratelimit-reset-tokens: 6m0s",
		"anthropic-ratelimit-tokens-limit: 80000\nanthropic-ratelimit-tokens-remaining: 1\nanthropic-ratelimit-tokens-reset: 2026-03-01T12:00:30Z",
		"anthropic-ratelimit-input-tokens-remaining: 0\nanthropic-ratelimit-output-tokens-reset: 2999-01-01T00:00:00Z",
		"retry-after: 20\nretry-after-ms: 1500.5", "Retry-After: Sun, 01 Mar 2026 12:01:30 GMT",
		"retry-after: Fri, 31 Dec 9999 23:59:59 GMT", "retry-after: 1e300", "retry-after-ms: NaN", "retry-after: -0",
		"x-ratelimit-reset-tokens: 9999999999h", "x-ratelimit-reset-tokens: 2562047h47m16.854775807s",
		"x-ratelimit-remaining-tokens: 1234.0", "x-ratelimit-remaining-tokens: 1e18", "x-ratelimit-limit-tokens: 9223372036854775807",
		"x-ratelimit-limit-tokens: -5\nx-ratelimit-remaining-tokens: 0x10", "x-ratelimit-reset-requests: 0.000000001",
		"X-RateLimit-Limit-Tokens: 10\nx-ratelimit-limit-tokens: 20", "x-ratelimit-reset-tokens: 1e-320",
	} {
		f.Add(s, 1.0, 100.0)
		f.Add(s, 1e18, 0.5)
	}
	// One value in every field, as a proxy that mangles all of them would send it.
	for _, v := range []string{"7.66s", "2m59.56s", "450ms", "1h2m3s", "0s", "12", "2026-03-01T12:00:01Z",
		"Sun, 01 Mar 2026 12:00:00 GMT", "-1", "NaN", "1e999", "", "T-"} {
		var b strings.Builder
		for _, k := range []string{"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens",
			"anthropic-ratelimit-requests-reset", "anthropic-ratelimit-output-tokens-remaining", "retry-after", "retry-after-ms"} {
			b.WriteString(k + ": " + v + "\n")
		}
		f.Add(b.String(), 1.0, 1.0)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, block string, need, actual float64) {
		h := http.Header{}
		for line := range strings.SplitSeq(block, "\n") {
			name, val, ok := strings.Cut(line, ":")
			if ok {
				h[name] = append(h[name], val)
			}
		}
		tel := ParseTelemetry(h, now)
		for range 3 {
			if again := ParseTelemetry(h, now); !reflect.DeepEqual(again, tel) {
				t.Fatalf("ParseTelemetry is not deterministic:\n%+v\n%+v", tel, again)
			}
		}
		latest := now.Add(maxSeconds * time.Second)
		inRange := func(what string, at time.Time) {
			if !at.IsZero() && (at.Before(now) || at.After(latest)) {
				t.Fatalf("%s %v outside [now, now+%ds]", what, at, maxSeconds)
			}
		}
		inRange("retry at", tel.RetryAt)
		for name, rl := range map[string]RateLimit{"requests": tel.Requests, "tokens": tel.Tokens,
			"input tokens": tel.InputTokens, "output tokens": tel.OutputTokens} {
			if rl.Limit < 0 || rl.Remaining < 0 || (!rl.HasLimit && rl.Limit != 0) || (!rl.HasRemaining && rl.Remaining != 0) {
				t.Fatalf("%s: bad counts %+v", name, rl)
			}
			inRange(name+" reset", rl.Reset)
			checkBucket(t, rl, need, actual, now)
		}
	})
}

// checkBucket runs one turn through a fresh bucket: reserve need, settle it with the
// response's budget rl and the turn's actual use, then ask when need fits again.
func checkBucket(t *testing.T, rl RateLimit, need, actual float64, now time.Time) {
	t.Helper()
	if math.IsNaN(need) || math.IsInf(need, 0) || need < 0 || math.IsNaN(actual) || math.IsInf(actual, 0) || actual < 0 {
		return // estimates and usage come from the scheduler, not from headers
	}
	for _, perMin := range []int{0, 60} {
		b := newBucket(perMin)
		b.debit(1, need, 0, now)
		b.observe(1, rl, actual, 0, now, now)
		for _, x := range []float64{b.limit, b.rate, b.level, b.pending} {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("bucket(%d) after %+v holds a non-finite value: %+v", perMin, rl, b)
			}
		}
		if b.limit < 0 || b.rate < 0 {
			t.Fatalf("bucket(%d) after %+v: negative limit or rate: %+v", perMin, rl, b)
		}
		for _, dt := range []time.Duration{0, time.Second, time.Hour} {
			at := now.Add(dt)
			if ok, when := b.fits(need, at); !ok && when.Before(at) {
				t.Fatalf("bucket(%d) after %+v: %v fits at %v, before now %v", perMin, rl, need, when, at)
			}
		}
	}
}
