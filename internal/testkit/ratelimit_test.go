package testkit

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

// costReq builds a request charged exactly cost tokens: 12 prompt tokens (10 words and
// two markers) plus max_tokens.
func costReq(cost int) *ChatRequest { return userReq(words("q", 10), cost-12) }

type wantDim struct {
	limit, remaining int64
	reset            time.Duration
}

func checkDim(t *testing.T, what string, got scheduler.RateLimit, now time.Time, want wantDim) {
	t.Helper()
	if !got.HasLimit || got.Limit != want.limit || !got.HasRemaining || got.Remaining != want.remaining {
		t.Errorf("%s: limit %d (%v) remaining %d (%v), want %d and %d",
			what, got.Limit, got.HasLimit, got.Remaining, got.HasRemaining, want.limit, want.remaining)
	}
	if d := got.Reset.Sub(now); d != want.reset {
		t.Errorf("%s: reset in %v, want %v", what, d, want.reset)
	}
}

func TestContinuousBuckets(t *testing.T) {
	for _, chargeTokens := range []bool{false, true} {
		s := newSim(t, Config{Limits: Limits{RPM: 60, TPM: 1200, ChargeRejectedTokens: chargeTokens}})
		s.submit("a", costReq(100))
		s.run()
		now := s.clock.Now()
		tel := scheduler.ParseTelemetry(s.result("a").Header, now)
		checkDim(t, "a tokens", tel.Tokens, now, wantDim{1200, 1100, 5 * time.Second}) // 100 tokens at 20/s
		checkDim(t, "a requests", tel.Requests, now, wantDim{60, 59, time.Second})
		if !tel.RetryAt.IsZero() {
			t.Error("a 200 carries a retry time")
		}

		s.clock.Advance(2 * time.Second) // +40 tokens, +2 requests (capped at 60)
		s.submit("b", costReq(1000))
		s.run()
		now = s.clock.Now()
		tel = scheduler.ParseTelemetry(s.result("b").Header, now)
		checkDim(t, "b tokens", tel.Tokens, now, wantDim{1200, 140, 53 * time.Second})
		checkDim(t, "b requests", tel.Requests, now, wantDim{60, 59, time.Second})

		s.submit("c", costReq(500))
		c := s.result("c")
		if c.Status != http.StatusTooManyRequests || c.Error.Error.Type != "tokens" || *c.Error.Error.Code != "rate_limit_exceeded" {
			t.Fatalf("c: %d %+v", c.Status, c.Error)
		}
		tel = scheduler.ParseTelemetry(c.Header, now)
		// The refusal is charged one request.
		checkDim(t, "c requests", tel.Requests, now, wantDim{60, 58, 2 * time.Second})
		wait, remaining, reset := 18*time.Second, int64(140), 53*time.Second // (500-140)/20 per s
		if chargeTokens {
			// 140-500 leaves a debt of 360: (500+360)/20 s; full after (1200+360)/20 s.
			wait, remaining, reset = 43*time.Second, 0, 78*time.Second
		}
		checkDim(t, "c tokens", tel.Tokens, now, wantDim{1200, remaining, reset})
		if tel.RetryAt.Sub(now) != wait || c.Record.RetryAfter != wait {
			t.Fatalf("c: retry in %v (record %v), want %v", tel.RetryAt.Sub(now), c.Record.RetryAfter, wait)
		}
		if ra := c.Header.Get("retry-after"); ra != strings.TrimSuffix(wait.String(), "s") {
			t.Fatalf("retry-after %q for %v", ra, wait)
		}
		if !strings.Contains(c.Error.Error.Message, "Please try again in") {
			t.Errorf("message %q", c.Error.Error.Message)
		}

		// Coming back exactly when told succeeds; a moment earlier does not.
		s.clock.AdvanceTo(tel.RetryAt.Add(-time.Millisecond))
		s.submit("early", costReq(500))
		if s.result("early").Status != http.StatusTooManyRequests {
			t.Fatal("a request before retry-after was admitted")
		}
		// The early refusal cost another request (and, with token charging, its tokens,
		// which pushes the wait out); coming back when it said succeeds.
		early := scheduler.ParseTelemetry(s.result("early").Header, s.clock.Now())
		s.clock.AdvanceTo(early.RetryAt)
		s.submit("c2", costReq(500))
		s.run()
		if r := s.result("c2"); r.Status != http.StatusOK {
			t.Fatalf("after retry-after: %d %+v", r.Status, r.Error)
		}
		if st := s.engine.Stats(); st.Rejected != 2 || st.Completed+st.Rejected > st.Requests {
			t.Fatalf("stats %+v", st)
		}
	}
}

func TestRejectedRequestsAreCharged(t *testing.T) {
	for _, free := range []bool{false, true} {
		// 3 per minute: one request every 20 s.
		s := newSim(t, Config{Limits: Limits{RPM: 3, NoChargeRejected: free}})
		for _, n := range []string{"a", "b", "c", "d"} {
			s.submit(n, userReq("x", 1))
		}
		d := s.result("d")
		if d.Status != http.StatusTooManyRequests || d.Error.Error.Type != "requests" {
			t.Fatalf("d: %d %+v", d.Status, d.Error)
		}
		now := s.clock.Now()
		tel := scheduler.ParseTelemetry(d.Header, now)
		wantWait, wantReset := 40*time.Second, 80*time.Second // the refusal left a debt of one
		if free {
			wantWait, wantReset = 20*time.Second, 60*time.Second
		}
		checkDim(t, "d requests", tel.Requests, now, wantDim{3, 0, wantReset})
		if got := tel.RetryAt.Sub(now); got != wantWait || d.Header.Get("retry-after-ms") != strings.TrimSuffix(wantWait.String(), "s")+"000" {
			t.Fatalf("free=%v: retry in %v (%s ms), want %v", free, got, d.Header.Get("retry-after-ms"), wantWait)
		}
		if !free {
			// Blind retries dig deeper, at most one window into debt.
			for range 5 {
				s.submit("retry", userReq("x", 1))
				delete(s.results, "retry")
			}
			s.submit("last", userReq("x", 1))
			if got := s.result("last").Record.RetryAfter; got != 80*time.Second {
				t.Fatalf("after hammering: retry in %v, want 80s (debt capped at one window)", got)
			}
		}
	}
}

func TestFixedWindow(t *testing.T) {
	s := newSim(t, Config{Limits: Limits{RPM: 2, TPM: 100, Window: Fixed}})
	s.clock.Advance(10 * time.Second)
	s.submit("a", costReq(30))
	s.submit("b", costReq(30))
	s.run()
	now := s.clock.Now()
	tel := scheduler.ParseTelemetry(s.result("b").Header, now)
	checkDim(t, "b requests", tel.Requests, now, wantDim{2, 0, 50 * time.Second})
	checkDim(t, "b tokens", tel.Tokens, now, wantDim{100, 40, 50 * time.Second})

	s.submit("c", costReq(30))
	c := s.result("c")
	tel = scheduler.ParseTelemetry(c.Header, now)
	if c.Status != http.StatusTooManyRequests || tel.RetryAt.Sub(now) != 50*time.Second || c.Header.Get("retry-after") != "50" {
		t.Fatalf("c: %d, retry in %v", c.Status, tel.RetryAt.Sub(now))
	}
	// No refill inside a window, however long one waits in it.
	s.clock.Advance(49 * time.Second)
	s.submit("d", costReq(30))
	if s.result("d").Status != http.StatusTooManyRequests {
		t.Fatal("admitted before the window ended")
	}
	// The next window starts at t0+60s, full.
	s.clock.AdvanceTo(t0.Add(time.Minute))
	s.submit("e", costReq(70))
	s.run()
	now = s.clock.Now()
	tel = scheduler.ParseTelemetry(s.result("e").Header, now)
	if s.result("e").Status != http.StatusOK {
		t.Fatal("new window refused")
	}
	checkDim(t, "e requests", tel.Requests, now, wantDim{2, 1, time.Minute})
	checkDim(t, "e tokens", tel.Tokens, now, wantDim{100, 30, time.Minute})
	s.submit("f", costReq(40))
	if r := s.result("f"); r.Status != http.StatusTooManyRequests || r.Error.Error.Type != "tokens" {
		t.Fatalf("f: %d", r.Status)
	}
}

func TestAnthropicHeaders(t *testing.T) {
	s := newSim(t, Config{Limits: Limits{RPM: 60, TPM: 6000, Anthropic: true}})
	s.clock.Advance(300 * time.Millisecond) // off the whole second: resets round up
	s.submit("a", costReq(150))
	s.run()
	now := s.clock.Now()
	only := http.Header{}
	for k, v := range s.result("a").Header {
		if strings.HasPrefix(strings.ToLower(k), "anthropic-ratelimit-") {
			only[k] = v
		}
	}
	if len(only) != 6 {
		t.Fatalf("anthropic headers: %v", only)
	}
	if _, err := time.Parse(time.RFC3339, only.Get("anthropic-ratelimit-tokens-reset")); err != nil {
		t.Fatal(err)
	}
	tel := scheduler.ParseTelemetry(only, now)
	// Exact resets are 1 s and 1.5 s; RFC 3339 whole seconds round them up to 12:00:02.
	// The token count, 5,850 here, is read as Anthropic's are sent: rounded to the nearest
	// thousand, so at least 500 less.
	checkDim(t, "requests", tel.Requests, now, wantDim{60, 59, 1700 * time.Millisecond})
	checkDim(t, "tokens", tel.Tokens, now, wantDim{6000, 5350, 1700 * time.Millisecond})
}

func TestRequestLargerThanLimit(t *testing.T) {
	s := newSim(t, Config{Limits: Limits{TPM: 100}})
	s.submit("big", costReq(500))
	r := s.result("big")
	if r.Status != http.StatusTooManyRequests || !strings.Contains(r.Error.Error.Message, "too large") {
		t.Fatalf("%d %+v", r.Status, r.Error)
	}
	if r.Header.Get("retry-after") != "" || r.Header.Get("retry-after-ms") != "" {
		t.Fatal("a request that can never fit was told to retry")
	}
	if tel := scheduler.ParseTelemetry(r.Header, s.clock.Now()); !tel.Tokens.HasRemaining || tel.Tokens.Remaining != 100 {
		t.Fatalf("telemetry %+v", tel.Tokens)
	}
}

func TestEveryResponseCarriesHeaders(t *testing.T) {
	s := newSim(t, Config{Limits: Limits{RPM: 10, TPM: 1000}, Models: []string{"m"}})
	s.submit("ok", userReq("x", 1))
	s.submit("invalid", &ChatRequest{Model: "m"})
	s.submit("unknown", &ChatRequest{Model: "nope", Messages: []Message{{Role: "user", Content: "x"}}})
	s.run()
	for _, n := range []string{"ok", "invalid", "unknown"} {
		tel := scheduler.ParseTelemetry(s.result(n).Header, s.clock.Now())
		if !tel.Requests.Known() || !tel.Tokens.Known() {
			t.Errorf("%s (%d): no rate-limit headers", n, s.result(n).Status)
		}
	}
}

func TestFormatResetDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                 "0s",
		-time.Second:                      "0s",
		450 * time.Millisecond:            "450ms",
		449*time.Millisecond + 1:          "450ms",
		time.Second:                       "1s",
		7660 * time.Millisecond:           "7.66s",
		7651 * time.Millisecond:           "7.66s",
		7600 * time.Millisecond:           "7.6s",
		59999 * time.Millisecond:          "1m0s",
		179560 * time.Millisecond:         "2m59.56s",
		6 * time.Minute:                   "6m0s",
		time.Hour + 2*time.Minute + 3e9:   "1h2m3s",
		time.Hour + 2*time.Minute + 3.5e9: "1h2m3.5s",
	} {
		got := FormatResetDuration(d)
		if got != want {
			t.Errorf("FormatResetDuration(%v) = %q, want %q", d, got, want)
			continue
		}
		parsed, err := time.ParseDuration(got)
		if err != nil || parsed < d {
			t.Errorf("%q parses to %v (%v), below %v", got, parsed, err, d)
		}
	}
	if got := FormatResetTime(t0, 1500*time.Millisecond); got != "2026-03-01T12:00:02Z" {
		t.Errorf("FormatResetTime = %q", got)
	}
	if _, err := ParseWindow("weekly"); err == nil {
		t.Error("ParseWindow accepted weekly")
	}
	if w, _ := ParseWindow("Fixed"); w != Fixed || w.String() != "fixed" {
		t.Error("ParseWindow(Fixed)")
	}
}
