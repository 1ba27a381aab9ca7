package scheduler

import (
	"net/http"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func rl(limit, remaining int64, reset time.Duration) RateLimit {
	r := RateLimit{Limit: limit, Remaining: remaining, HasLimit: limit >= 0, HasRemaining: remaining >= 0}
	if r.Limit < 0 {
		r.Limit = 0
	}
	if r.Remaining < 0 {
		r.Remaining = 0
	}
	if reset >= 0 {
		r.Reset = t0.Add(reset)
	}
	return r
}

func TestParseTelemetry(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want Telemetry
	}{
		{
			name: "openai full set",
			h: hdr(
				"x-ratelimit-limit-requests", "5000",
				"x-ratelimit-limit-tokens", "800000",
				"x-ratelimit-remaining-requests", "4999",
				"x-ratelimit-remaining-tokens", "799476",
				"x-ratelimit-reset-requests", "12ms",
				"x-ratelimit-reset-tokens", "39ms",
			),
			want: Telemetry{Requests: rl(5000, 4999, 12*time.Millisecond), Tokens: rl(800000, 799476, 39*time.Millisecond)},
		},
		{
			name: "groq daily requests and minute tokens",
			h: hdr(
				"X-RateLimit-Limit-Requests", "14400",
				"X-RateLimit-Limit-Tokens", "6000",
				"X-RateLimit-Remaining-Requests", "14370",
				"X-RateLimit-Remaining-Tokens", "5997",
				"X-RateLimit-Reset-Requests", "2m59.56s",
				"X-RateLimit-Reset-Tokens", "7.66s",
			),
			want: Telemetry{
				Requests: rl(14400, 14370, 2*time.Minute+59560*time.Millisecond),
				Tokens:   rl(6000, 5997, 7660*time.Millisecond),
			},
		},
		{
			name: "openai 429 with retry-after seconds",
			h: hdr(
				"x-ratelimit-limit-tokens", "30000",
				"x-ratelimit-remaining-tokens", "0",
				"x-ratelimit-reset-tokens", "1h2m3s",
				"retry-after", "20",
			),
			want: Telemetry{Tokens: rl(30000, 0, time.Hour+2*time.Minute+3*time.Second), RetryAt: t0.Add(20 * time.Second)},
		},
		{
			name: "retry-after-ms beats retry-after",
			h:    hdr("retry-after", "20", "retry-after-ms", "1500.5"),
			want: Telemetry{RetryAt: t0.Add(1500500 * time.Microsecond)},
		},
		{
			name: "retry-after as HTTP date",
			h:    hdr("Retry-After", t0.Add(90*time.Second).Format(http.TimeFormat)),
			want: Telemetry{RetryAt: t0.Add(90 * time.Second)},
		},
		{
			name: "retry-after HTTP date in the past is now",
			h:    hdr("Retry-After", t0.Add(-time.Hour).Format(http.TimeFormat)),
			want: Telemetry{RetryAt: t0},
		},
		{
			name: "anthropic full set",
			h: hdr(
				"anthropic-ratelimit-requests-limit", "4000",
				"anthropic-ratelimit-requests-remaining", "3999",
				"anthropic-ratelimit-requests-reset", "2026-03-01T12:00:01Z",
				"anthropic-ratelimit-tokens-limit", "480000",
				"anthropic-ratelimit-tokens-remaining", "479000",
				"anthropic-ratelimit-tokens-reset", "2026-03-01T12:00:00.5Z",
				"anthropic-ratelimit-input-tokens-limit", "400000",
				"anthropic-ratelimit-input-tokens-remaining", "399200",
				"anthropic-ratelimit-input-tokens-reset", "2026-03-01T12:00:00Z",
				"anthropic-ratelimit-output-tokens-limit", "80000",
				"anthropic-ratelimit-output-tokens-remaining", "79800",
				"anthropic-ratelimit-output-tokens-reset", "2026-03-01T12:00:03+00:00",
				"retry-after", "4",
			),
			want: Telemetry{
				Requests: rl(4000, 3999, time.Second),
				// tokens-* is the most restrictive of the split buckets, no bucket of
				// its own: with them reported it is not read. Token counts left are
				// rounded to the nearest thousand: read as the least they may be.
				InputTokens:  rl(400000, 398700, 0),
				OutputTokens: rl(80000, 79300, 3*time.Second),
				RetryAt:      t0.Add(4 * time.Second),
			},
		},
		{
			name: "anthropic tokens alone, no split buckets",
			h: hdr(
				"anthropic-ratelimit-tokens-limit", "80000",
				"anthropic-ratelimit-tokens-remaining", "79000",
				"anthropic-ratelimit-tokens-reset", "2026-03-01T12:00:00.5Z",
			),
			want: Telemetry{Tokens: rl(80000, 78500, 500*time.Millisecond)},
		},
		{
			name: "anthropic reset in the past is now",
			h:    hdr("anthropic-ratelimit-tokens-reset", "2026-03-01T11:59:00Z"),
			want: Telemetry{Tokens: rl(-1, -1, 0)},
		},
		{
			name: "duration forms",
			h: hdr(
				"x-ratelimit-reset-requests", "6m0s",
				"x-ratelimit-reset-tokens", "0s",
			),
			want: Telemetry{Requests: rl(-1, -1, 6*time.Minute), Tokens: rl(-1, -1, 0)},
		},
		{
			name: "bare number reset is seconds",
			h:    hdr("x-ratelimit-reset-tokens", "12", "x-ratelimit-reset-requests", "0.25"),
			want: Telemetry{Tokens: rl(-1, -1, 12*time.Second), Requests: rl(-1, -1, 250*time.Millisecond)},
		},
		{
			name: "float count is truncated",
			h:    hdr("x-ratelimit-remaining-tokens", "1234.0"),
			want: Telemetry{Tokens: rl(-1, 1234, -1)},
		},
		{
			name: "malformed values are ignored",
			h: hdr(
				"x-ratelimit-limit-tokens", "lots",
				"x-ratelimit-remaining-tokens", "-5",
				"x-ratelimit-reset-tokens", "bogus",
				"x-ratelimit-limit-requests", "NaN",
				"x-ratelimit-remaining-requests", "1e400",
				"x-ratelimit-reset-requests", "-3s",
				"anthropic-ratelimit-tokens-reset", "2026-13-45T99:00:00Z",
				"anthropic-ratelimit-input-tokens-remaining", "",
				"retry-after", "soon",
				"retry-after-ms", "Inf",
			),
			want: Telemetry{},
		},
		{
			name: "absurd waits are ignored rather than overflowing",
			h:    hdr("retry-after", "1e300", "x-ratelimit-reset-tokens", "9999999999h"),
			want: Telemetry{},
		},
		{
			name: "unrelated headers and unknown dimensions",
			h: hdr(
				"content-type", "application/json",
				"x-ratelimit-limit-images", "10",
				"x-ratelimit-bogus", "1",
				"anthropic-ratelimit-foo-limit", "3",
				"anthropic-ratelimit-", "3",
			),
			want: Telemetry{},
		},
		{name: "nil header", h: nil, want: Telemetry{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseTelemetry(tt.h, t0)
			if !sameTelemetry(got, tt.want) {
				t.Errorf("ParseTelemetry =\n %+v\nwant\n %+v", got, tt.want)
			}
			if sameTelemetry(tt.want, Telemetry{}) != got.Empty() {
				t.Errorf("Empty() = %v", got.Empty())
			}
		})
	}
}

func sameRateLimit(a, b RateLimit) bool {
	return a.Limit == b.Limit && a.Remaining == b.Remaining && a.HasLimit == b.HasLimit &&
		a.HasRemaining == b.HasRemaining && a.Reset.Equal(b.Reset)
}

func sameTelemetry(a, b Telemetry) bool {
	return sameRateLimit(a.Requests, b.Requests) && sameRateLimit(a.Tokens, b.Tokens) &&
		sameRateLimit(a.InputTokens, b.InputTokens) && sameRateLimit(a.OutputTokens, b.OutputTokens) &&
		a.RetryAt.Equal(b.RetryAt)
}

func TestParseTelemetryNonCanonicalKeys(t *testing.T) {
	h := http.Header{"x-ratelimit-remaining-tokens": {"42"}, "RETRY-AFTER-MS": {"250"}}
	got := ParseTelemetry(h, t0)
	if !got.Tokens.HasRemaining || got.Tokens.Remaining != 42 || !got.RetryAt.Equal(t0.Add(250*time.Millisecond)) {
		t.Fatalf("got %+v", got)
	}
}

// A reset's grain is how far it may have been rounded up, which bounds the refill rate a
// reading allows: whole seconds for RFC 3339 times and bare integers, hundredths when written finer.
func TestResetGrain(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"7.66s": 10 * time.Millisecond, "2m59.56s": 10 * time.Millisecond, "6m0s": time.Second,
		"450ms": 10 * time.Millisecond, "12": time.Second, "1.5": 10 * time.Millisecond, "1h2m3s": time.Second,
		"2026-03-01T12:00:05Z": time.Second, "2026-03-01T12:00:05.25Z": 10 * time.Millisecond,
	} {
		if got := resetGrain(v); got != want {
			t.Errorf("resetGrain(%q) = %v, want %v", v, got, want)
		}
	}
}
