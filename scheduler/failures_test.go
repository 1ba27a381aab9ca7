package scheduler

import (
	"slices"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
)

func rateLimited(h map[string]string, now time.Time) Result {
	hh := hdr()
	for k, v := range h {
		hh.Set(k, v)
	}
	return Result{Status: StatusRateLimited, Telemetry: ParseTelemetry(hh, now)}
}

// A 429 that slips through: the lane pauses until the server's time, the turn goes back
// at its original rank (ahead of turns that arrived after it), and the margin rises and
// then decays again.
func TestRateLimitedHonoursRetryAfter(t *testing.T) {
	for _, tt := range []struct {
		name    string
		headers map[string]string
		pause   time.Duration
	}{
		{"retry-after-ms", map[string]string{"retry-after-ms": "2500", "retry-after": "9"}, 2500 * time.Millisecond},
		{"retry-after seconds", map[string]string{"retry-after": "4"}, 4 * time.Second},
		{"reset of the empty bucket", map[string]string{
			"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6.5s",
			"x-ratelimit-remaining-requests": "10", "x-ratelimit-reset-requests": "20s"}, 6500 * time.Millisecond},
		// Nothing said, on a lane that knows no limit: the lane is silent and paces its
		// turns at half what it sent (one turn in its first 2 s: one per 4 s).
		{"nothing said", nil, 4 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := oneSlot(Config{})
			now := sec(0)
			c.Submit(mkJob(1, "a", "u", "b", 1000), now)
			c.Submit(mkJob(2, "b", "u", "b", 1000), sec(1))
			marginBefore := c.Stats(now)[0].Margin

			now = sec(2)
			acts := c.Complete(1, rateLimited(tt.headers, now), now)
			until := now.Add(tt.pause)
			retry, found := find(acts, ActRetry)
			if !found || retry.ID != 1 || !retry.Until.Equal(until) || retry.Reason != ReasonRateLimited || retry.Attempt != 2 {
				t.Fatalf("actions: %s", dump(acts))
			}
			if got := ids(acts, ActAdmit); len(got) != 0 {
				t.Fatalf("admitted %v into a paused lane", got)
			}
			if w, _ := find(acts, ActWait); w.ID != 1 || w.Reason != ReasonRetryAfter || !w.Until.Equal(until) {
				t.Fatalf("wait notice: %s", dump(acts))
			}
			if n, _ := find(acts, ActRateLimit); n.Lane != testLane || !n.Until.Equal(until) {
				t.Fatalf("lane notice: %s", dump(acts))
			}
			if w := c.NextWake(now); !w.Equal(until) {
				t.Fatalf("NextWake %v, want %v", w, until)
			}
			st := c.Stats(now)[0]
			if st.RateLimited != 1 || !st.PausedUntil.Equal(until) || st.Margin <= marginBefore {
				t.Fatalf("stats after 429: %+v (margin before %v)", st, marginBefore)
			}
			// A turn arriving during the pause queues behind the retried one.
			c.Submit(mkJob(3, "c", "u", "b", 1000), now.Add(tt.pause/2))
			if got := ids(c.Tick(until.Add(-time.Millisecond)), ActAdmit); len(got) != 0 {
				t.Fatalf("admitted %v before the pause ended", got)
			}
			if got := ids(c.Tick(until), ActAdmit); !slices.Equal(got, []TurnID{1}) {
				t.Fatalf("after the pause admitted %v, want [1]", got)
			}
			if tt.headers == nil {
				// A 429 that says nothing makes the lane silent: the turns after the
				// retried one are paced (silent.go), in order.
				if got := drainPaced(c, 1, until.Add(time.Second), time.Minute); !slices.Equal(got, []TurnID{2, 3}) {
					t.Fatalf("then %v, want [2 3]", got)
				}
			} else if got := drain(c, 1, until.Add(time.Second)); !slices.Equal(got, []TurnID{2, 3}) {
				t.Fatalf("then %v, want [2 3]", got)
			}
			// The bump decays: after many half-lives the margin is back where it was.
			if m := c.Stats(until.Add(2 * time.Hour))[0].Margin; m > marginBefore+1e-3 {
				t.Fatalf("margin %v did not decay to %v", m, marginBefore)
			}
		})
	}
}

func TestRateLimitRetriesExhausted(t *testing.T) {
	c := oneSlot(Config{MaxRateRetries: 2})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	now := sec(0)
	for i := 0; i < 2; i++ {
		now = now.Add(time.Second)
		acts := c.Complete(1, rateLimited(map[string]string{"retry-after": "1"}, now), now)
		if _, found := find(acts, ActRetry); !found {
			t.Fatalf("attempt %d: %s", i, dump(acts))
		}
		now = now.Add(time.Second)
		c.Tick(now)
	}
	acts := c.Complete(1, rateLimited(map[string]string{"retry-after": "1"}, now), now)
	if a, _ := find(acts, ActRefuse); a.ID != 1 || a.Reason != ReasonRetriesExhausted {
		t.Fatalf("actions: %s", dump(acts))
	}
}

// A wait longer than SuspendAfter suspends the run: its queued turns are dropped,
// running ones are left alone, and a later turn of the run is suspended at once.
func TestSuspendWhenWaitExceedsSuspendAfter(t *testing.T) {
	tests := []struct {
		name   string
		result func(now time.Time) Result
		until  time.Duration
		reason string
	}{
		{
			name: "retry-after beyond suspend_after",
			result: func(now time.Time) Result {
				return rateLimited(map[string]string{"retry-after": "600"}, now)
			},
			until: 10 * time.Minute, reason: ReasonRetryAfter,
		},
		{
			name: "token budget empty until a distant reset",
			result: func(now time.Time) Result {
				return Result{Status: StatusOK, Usage: agent.Usage{Input: 500}, Telemetry: ParseTelemetry(hdr(
					"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "5m"), now)}
			},
			until: 5 * time.Minute, reason: ReasonTokens,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Slots: 2}}})
			c.Submit(mkJob(1, "a", "u", "i", 500), sec(0))
			c.Submit(mkJob(2, "b", "u", "i", 500), sec(0)) // b keeps running throughout
			c.Submit(mkJob(3, "a", "u", "i", 500), sec(1)) // a's parallel branch, queued
			c.Submit(mkJob(4, "c", "u", "i", 500), sec(2))
			now := sec(3)
			acts := c.Complete(1, tt.result(now), now)
			until := now.Add(tt.until)
			var suspended []string
			for _, a := range acts {
				if a.Kind == ActSuspend {
					suspended = append(suspended, a.RunID)
					if !a.Until.Equal(until) || a.Reason != tt.reason {
						t.Fatalf("suspend: %s", a)
					}
				}
				if a.Kind == ActAdmit || a.Kind == ActWait {
					t.Fatalf("unexpected %s", a)
				}
			}
			if !slices.Equal(suspended, []string{"a", "c"}) {
				t.Fatalf("suspended %v, want [a c]: %s", suspended, dump(acts))
			}
			if _, running := c.jobs[2]; !running || len(c.jobs) != 1 {
				t.Fatalf("jobs left: %d", len(c.jobs))
			}
			acts = c.Submit(mkJob(5, "a", "u", "i", 500), now.Add(time.Second))
			if a, _ := find(acts, ActSuspend); a.RunID != "a" || !a.Until.Equal(until) {
				t.Fatalf("late turn of a suspended run: %s", dump(acts))
			}
			if s := c.Stats(now)[0]; s.Suspended != 2 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// A wait within SuspendAfter is a wait: notices once, a wake at the refill, then admit.
func TestWaitForRefill(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {TPM: 6000}}})
	// 6,000 TPM refills 100 tokens a second. The first turn's reservation (estimate
	// plus the default margin of 54 %) leaves too little for the second.
	acts := c.Submit(mkJob(1, "a", "u", "i", 2000), sec(0))
	if got := ids(acts, ActAdmit); !slices.Equal(got, []TurnID{1}) {
		t.Fatalf("first: %s", dump(acts))
	}
	acts = c.Submit(mkJob(2, "b", "u", "i", 2000), sec(0))
	w, found := find(acts, ActWait)
	if !found || w.ID != 2 || w.Reason != ReasonTokens {
		t.Fatalf("second: %s", dump(acts))
	}
	// Level 6000 − 3080 = 2920; needs 3080: 160 tokens at 100/s = 1.6 s (+1 ms slack).
	want := sec(1.601)
	if !w.Until.Equal(want) || !c.NextWake(sec(0)).Equal(want) {
		t.Fatalf("wait until %v, NextWake %v, want %v", w.Until, c.NextWake(sec(0)), want)
	}
	// A third turn queues silently behind: one notice per turn at the head, one per lane.
	if acts := c.Submit(mkJob(3, "c", "u", "i", 2000), sec(1)); len(acts) != 0 {
		t.Fatalf("third: %s", dump(acts))
	}
	if acts := c.Tick(sec(1.5)); len(acts) != 0 {
		t.Fatalf("early tick: %s", dump(acts))
	}
	acts = c.Tick(want)
	if got := ids(acts, ActAdmit); !slices.Equal(got, []TurnID{2}) {
		t.Fatalf("at refill: %s", dump(acts))
	}
	if w, _ := find(acts, ActWait); w.ID != 3 {
		t.Fatalf("third turn's wait: %s", dump(acts))
	}
	if s := c.Stats(want)[0]; s.Waits != 2 || s.Admitted != 2 || s.QueuedInteractive != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestServerErrorBackoffIsJitteredAndDeterministic(t *testing.T) {
	run := func(seed uint64) []time.Duration {
		c := NewCore(Config{Seed: seed, MaxRetries: 4, BreakerThreshold: 100})
		now := sec(0)
		c.Submit(mkJob(1, "a", "u", "i", 100), now)
		var waits []time.Duration
		for {
			acts := c.Complete(1, Result{Status: StatusServerError}, now)
			a := acts[0]
			if a.Kind == ActRefuse {
				if a.Reason != ReasonRetriesExhausted {
					t.Fatalf("refuse: %s", a)
				}
				return waits
			}
			if a.Kind != ActRetry || a.Reason != ReasonServerError || a.Attempt != len(waits)+2 {
				t.Fatalf("actions: %s", dump(acts))
			}
			waits = append(waits, a.Until.Sub(now))
			if got := ids(c.Tick(a.Until.Add(-time.Nanosecond)), ActAdmit); len(got) != 0 {
				t.Fatal("admitted during backoff")
			}
			if !c.NextWake(now).Equal(a.Until) {
				t.Fatalf("NextWake %v, want %v", c.NextWake(now), a.Until)
			}
			now = a.Until
			if got := ids(c.Tick(now), ActAdmit); !slices.Equal(got, []TurnID{1}) {
				t.Fatalf("after backoff admitted %v", got)
			}
		}
	}
	a, b, other := run(7), run(7), run(8)
	if len(a) != 4 || !slices.Equal(a, b) || slices.Equal(a, other) {
		t.Fatalf("waits %v %v %v", a, b, other)
	}
	for i, w := range a {
		base := time.Second << i
		if w < base*3/4 || w > base*5/4 {
			t.Fatalf("retry %d waited %v, want %v ± 25%%", i+1, w, base)
		}
	}
}

func TestServerErrorHonoursRetryAfter(t *testing.T) {
	c := NewCore(Config{})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	acts := c.Complete(1, Result{Status: StatusServerError, Telemetry: ParseTelemetry(hdr("retry-after", "7"), sec(1))}, sec(1))
	if a, _ := find(acts, ActRetry); !a.Until.Equal(sec(8)) {
		t.Fatalf("actions: %s", dump(acts))
	}
}

// The circuit opens after BreakerThreshold consecutive failures, fails fast while open,
// lets exactly one real turn through as a probe after the cooldown, and closes when the
// probe succeeds (or opens again when it fails).
func TestCircuitBreaker(t *testing.T) {
	for _, probeOK := range []bool{true, false} {
		name := "probe fails"
		if probeOK {
			name = "probe succeeds"
		}
		t.Run(name, func(t *testing.T) {
			c := NewCore(Config{BreakerThreshold: 2, BreakerCooldown: 30 * time.Second, MaxRetries: 10})
			now := sec(0)
			c.Submit(mkJob(1, "a", "u", "i", 100), now)
			c.Submit(mkJob(2, "b", "u", "i", 100), now)
			c.Complete(1, Result{Status: StatusServerError}, sec(1))
			acts := c.Complete(2, Result{Status: StatusServerError}, sec(1))
			if s := c.Stats(sec(1))[0]; s.Circuit != "open" || s.CircuitOpens != 1 {
				t.Fatalf("after 2 failures: %+v", s)
			}
			_ = acts
			// New work and the retries wait for the cooldown; nothing is sent.
			acts = c.Submit(mkJob(3, "c", "u", "i", 100), sec(2))
			if w, _ := find(acts, ActWait); w.Reason != ReasonCircuitOpen || !w.Until.Equal(sec(31)) {
				t.Fatalf("while open: %s", dump(acts))
			}
			if got := ids(c.Tick(sec(10)), ActAdmit); len(got) != 0 {
				t.Fatalf("admitted %v while open", got)
			}
			if !c.NextWake(sec(10)).Equal(sec(31)) {
				t.Fatalf("NextWake %v", c.NextWake(sec(10)))
			}
			// Cooldown over: one probe, however many turns are queued.
			acts = c.Tick(sec(31))
			probe := ids(acts, ActAdmit)
			if len(probe) != 1 {
				t.Fatalf("half-open admitted %v, want one probe: %s", probe, dump(acts))
			}
			if s := c.Stats(sec(31))[0]; s.Circuit != "half-open" || s.QueuedInteractive != 2 {
				t.Fatalf("half-open: %+v", s)
			}
			if got := ids(c.Tick(sec(32)), ActAdmit); len(got) != 0 {
				t.Fatalf("second probe %v", got)
			}
			if probeOK {
				acts = c.Complete(probe[0], ok(100), sec(33))
				if got := ids(acts, ActAdmit); len(got) != 2 {
					t.Fatalf("after a good probe admitted %v", got)
				}
				if s := c.Stats(sec(33))[0]; s.Circuit != "closed" {
					t.Fatalf("after a good probe: %+v", s)
				}
				return
			}
			acts = c.Complete(probe[0], Result{Status: StatusServerError}, sec(33))
			if got := ids(acts, ActAdmit); len(got) != 0 {
				t.Fatalf("after a failed probe admitted %v", got)
			}
			if s := c.Stats(sec(33))[0]; s.Circuit != "open" || s.CircuitOpens != 2 {
				t.Fatalf("after a failed probe: %+v", s)
			}
			if got := ids(c.Tick(sec(63)), ActAdmit); len(got) != 1 {
				t.Fatalf("second cooldown: probe %v", got)
			}
		})
	}
}

// While a lane's circuit is open its turns go to the fallback lane; after the cooldown
// one probe goes back to the lane itself.
func TestFallbackLane(t *testing.T) {
	const fb = "fake/fallback"
	c := NewCore(Config{BreakerThreshold: 1, BreakerCooldown: 30 * time.Second,
		Lanes: map[string]LaneConfig{testLane: {Fallback: fb}, fb: {Slots: 1}}})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	acts := c.Complete(1, Result{Status: StatusServerError}, sec(1))
	if _, found := find(acts, ActRetry); !found {
		t.Fatalf("actions: %s", dump(acts))
	}
	retryAt := acts[0].Until
	acts = c.Submit(mkJob(2, "b", "u", "i", 100), sec(2))
	a, found := find(acts, ActAdmit)
	if !found || a.ID != 2 || a.Lane != fb {
		t.Fatalf("new turn: %s", dump(acts))
	}
	// The retried turn waits for the fallback's only slot.
	if acts := c.Tick(retryAt); len(ids(acts, ActAdmit)) != 0 {
		t.Fatalf("fallback slot taken, yet: %s", dump(acts))
	}
	acts = c.Complete(2, ok(100), sec(5))
	if a, _ := find(acts, ActAdmit); a.ID != 1 || a.Lane != fb {
		t.Fatalf("retry on fallback: %s", dump(acts))
	}
	c.Complete(1, ok(100), sec(6))
	// Cooldown over: the next turn is the lane's own probe.
	acts = c.Submit(mkJob(3, "c", "u", "i", 100), sec(40))
	if a, _ := find(acts, ActAdmit); a.ID != 3 || a.Lane != testLane {
		t.Fatalf("probe: %s", dump(acts))
	}
	// While the probe runs, other turns keep using the fallback.
	acts = c.Submit(mkJob(4, "d", "u", "i", 100), sec(41))
	if a, _ := find(acts, ActAdmit); a.ID != 4 || a.Lane != fb {
		t.Fatalf("during the probe: %s", dump(acts))
	}
}

// An error that says the request was bad ends the turn without a retry and without
// counting against the lane's health.
func TestErrorIsFinal(t *testing.T) {
	c := NewCore(Config{BreakerThreshold: 1})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	if acts := c.Complete(1, Result{Status: StatusError}, sec(1)); len(acts) != 0 {
		t.Fatalf("actions: %s", dump(acts))
	}
	if s := c.Stats(sec(1))[0]; s.Circuit != "closed" || len(c.jobs) != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestStatusFromHTTP(t *testing.T) {
	for code, want := range map[int]Status{200: StatusOK, 0: StatusServerError, 400: StatusError, 401: StatusError,
		408: StatusServerError, 409: StatusServerError, 429: StatusRateLimited, 500: StatusServerError,
		503: StatusServerError, 529: StatusServerError} {
		if got := StatusFromHTTP(code); got != want {
			t.Errorf("StatusFromHTTP(%d) = %s, want %s", code, got, want)
		}
	}
}

// Anthropic's separate output-token bucket: a turn's expected output (EstOutput) is
// checked against it, and a short output budget is the named reason for the wait.
func TestAnthropicOutputBucket(t *testing.T) {
	c := NewCore(Config{})
	j := mkJob(1, "a", "u", "i", 1000)
	j.EstOutput = 500
	c.Submit(j, sec(0))
	h := hdr(
		"anthropic-ratelimit-input-tokens-limit", "80000",
		"anthropic-ratelimit-input-tokens-remaining", "79000",
		"anthropic-ratelimit-input-tokens-reset", sec(1).Format(time.RFC3339),
		"anthropic-ratelimit-output-tokens-limit", "8000",
		"anthropic-ratelimit-output-tokens-remaining", "200",
		"anthropic-ratelimit-output-tokens-reset", sec(31).Format(time.RFC3339),
	)
	c.Complete(1, Result{Status: StatusOK, Usage: agent.Usage{Input: 500, Output: 500},
		Telemetry: ParseTelemetry(h, sec(1))}, sec(1))
	j = mkJob(2, "b", "u", "i", 1000)
	j.EstOutput = 500
	acts := c.Submit(j, sec(1))
	w, found := find(acts, ActWait)
	if !found || w.Reason != ReasonOutputTokens {
		t.Fatalf("actions: %s", dump(acts))
	}
	// Reservation: the prompt's 500 + 54 % of it and the cap of 500 whole; its output
	// part is the cap, 500 against 200 left, which Anthropic rounded to the nearest
	// thousand, so at least 0; refilling at least (8000 − 0 − 1 − 1000) / 31 s = 225.8 a
	// second (the count may be 1,000 above what is read, the reset is written in whole
	// seconds): 2.21 s.
	if d := w.Until.Sub(sec(1)); d < 2209*time.Millisecond || d > 2219*time.Millisecond {
		t.Fatalf("wait %v, want about 2.21 s", d)
	}
	if got := ids(c.Tick(w.Until), ActAdmit); !slices.Equal(got, []TurnID{2}) {
		t.Fatalf("after the refill admitted %v", got)
	}
}

// drainPaced is drain on a paced lane: it completes the running turn at at, then ticks at
// each wake the core asks for (up to within) until the next turn is admitted, and so on.
func drainPaced(c *Core, first TurnID, at time.Time, within time.Duration) []TurnID {
	var order []TurnID
	running, end := first, at.Add(within)
	acts := c.Complete(running, ok(100), at)
	for at.Before(end) {
		a := ids(acts, ActAdmit)
		if len(a) > 0 {
			order = append(order, a...)
			running = a[0]
			acts = c.Complete(running, ok(100), at)
			continue
		}
		w := c.NextWake(at)
		if w.IsZero() || !w.After(at) {
			break
		}
		at = w
		acts = c.Tick(at)
	}
	return order
}
