package scheduler

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
)

// How real providers count, as issue 22's provider models play them: the lessons the
// core takes from what a provider says, and from what it does not.

// A 429 that names its wait only in its message (OpenAI's token refusals) is honoured
// exactly: the lane pauses that long, not RateLimitBackup.
func TestRetryHintFromTheMessage(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want time.Duration
		ok   bool
	}{
		{"Rate limit reached for gpt-4o on tokens per min (TPM): Limit 6000, Used 5200, Requested 1900. Please try again in 6.5s.", 6500 * time.Millisecond, true},
		{"please TRY AGAIN IN 1.85s", 1850 * time.Millisecond, true},
		{"Please try again in 450ms.", 450 * time.Millisecond, true},
		{"Please try again in 1m2.5s.", 62500 * time.Millisecond, true},
		{"try again in 20 seconds", 20 * time.Second, true},
		{"try again in 500 ms", 500 * time.Millisecond, true},
		{"try again in a moment. Or try again in 3s", 3 * time.Second, true},
		{"try again in later", 0, false},
		{"try again in -5s", 0, false},
		{"try again in 99999999999999999999s", 0, false},
		{"try again in 1e400 seconds", 0, false},
		{"Too Many Requests", 0, false},
		{"try again in", 0, false},
	} {
		got, ok := retryHint(tc.msg)
		if ok != tc.ok || got != tc.want {
			t.Errorf("retryHint(%q) = %v, %v; want %v, %v", tc.msg, got, ok, tc.want, tc.ok)
		}
	}
	h := http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}}
	res, _ := outcomeResult(Outcome{StatusCode: 429, Header: h, Err: errors.New("HTTP 429: Please try again in 6.5s.")}, sec(10))
	if !res.Telemetry.RetryAt.Equal(sec(16.5)) {
		t.Fatalf("RetryAt %v, want 6.5 s after the answer", res.Telemetry.RetryAt)
	}
	// A header still wins over the message.
	h.Set("retry-after", "2")
	res, _ = outcomeResult(Outcome{StatusCode: 429, Header: h, Err: errors.New("Please try again in 6.5s")}, sec(10))
	if !res.Telemetry.RetryAt.Equal(sec(12)) {
		t.Fatalf("RetryAt %v, want retry-after's 2 s", res.Telemetry.RetryAt)
	}
}

func FuzzRetryHint(f *testing.F) {
	f.Add("Please try again in 6.5s.")
	f.Add("try again in 1h2m3.5s")
	f.Add("try again in µµµ")
	f.Fuzz(func(t *testing.T, msg string) {
		if d, ok := retryHint(msg); ok && (d < 0 || d > maxSeconds*time.Second) {
			t.Fatalf("retryHint(%q) = %v", msg, d)
		}
	})
}

// A request budget the provider reports per minute is held one request per second when
// its share of a second is less than one: OpenAI and Anthropic enforce a minute's
// budget over short windows, so a burst that the minute would take is refused.
func TestReportedRequestBudgetIsPacedPerSecond(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Scout: true}}})
	for i := TurnID(1); i <= 4; i++ {
		c.Submit(mkJob(i, "r", "u", "i", 100), sec(0))
	}
	h := hdr("x-ratelimit-limit-requests", "30", "x-ratelimit-remaining-requests", "29", "x-ratelimit-reset-requests", "2s",
		"x-ratelimit-limit-tokens", "100000", "x-ratelimit-remaining-tokens", "99800", "x-ratelimit-reset-tokens", "1s")
	acts := c.Complete(1, Result{Status: StatusOK, Usage: agent.Usage{Input: 100, Output: 10}, Telemetry: ParseTelemetry(h, sec(0.5))}, sec(0.5))
	if got := ids(acts, ActAdmit); len(got) != 0 {
		t.Fatalf("admitted %v within the scout's second", got)
	}
	if got := ids(c.Tick(sec(1)), ActAdmit); len(got) != 1 {
		t.Fatalf("at 1 s admitted %v, want one turn", got)
	}
	if got := ids(c.Tick(sec(1.5)), ActAdmit); len(got) != 0 {
		t.Fatalf("at 1.5 s admitted %v, want none: the last went out within the second", got)
	}
	if got := ids(c.Tick(sec(2)), ActAdmit); len(got) != 1 {
		t.Fatalf("at 2 s admitted %v, want one turn", got)
	}
}

// Configured limits are the operator's own: no pacing (a burst the minute allows goes).
func TestConfiguredRequestBudgetIsNotPaced(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {RPM: 30, TPM: 100000}}})
	var got []TurnID
	for i := TurnID(1); i <= 4; i++ {
		got = append(got, ids(c.Submit(mkJob(i, "r", "u", "i", 100), sec(0)), ActAdmit)...)
	}
	if len(got) != 4 {
		t.Fatalf("admitted %v, want the whole burst", got)
	}
}

// A 429 whose headers show room in the minute's budgets teaches that the provider
// enforces its token budget over a short window too: from then on the lane paces
// tokens as well.
func TestShortWindowLearnedFromA429WithRoom(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {}}})
	c.Submit(mkJob(1, "r", "u", "i", 1000), sec(0))
	room := map[string]string{"x-ratelimit-limit-tokens": "60000", "x-ratelimit-remaining-tokens": "50000", "x-ratelimit-reset-tokens": "10s"}
	c.Complete(1, rateLimited(room, sec(0.1)), sec(0.1))
	l := c.lanes[testLane]
	if !l.tokens.short || !l.requests.short {
		t.Fatalf("short window not learned: tokens %v requests %v", l.tokens.short, l.requests.short)
	}
	// A 429 that shows a budget empty teaches nothing of the kind.
	c2 := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {}}})
	c2.Submit(mkJob(1, "r", "u", "i", 1000), sec(0))
	empty := map[string]string{"x-ratelimit-limit-tokens": "60000", "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "10s"}
	c2.Complete(1, rateLimited(empty, sec(0.1)), sec(0.1))
	if c2.lanes[testLane].tokens.short {
		t.Fatal("a 429 on an empty budget taught a short window")
	}
}

// Anthropic's input and output budgets are separate: a prompt is admitted against the
// input budget and the expected completion against the output one; the summary
// tokens-* (the tighter of the two) is no budget of its own, so a 1,600-token prompt is
// not refused because the output budget is 1,500 a minute.
func TestAnthropicSplitBudgets(t *testing.T) {
	c := NewCore(Config{})
	c.Submit(mkJob(1, "r", "u", "i", 1200), sec(0))
	h := hdr(
		"anthropic-ratelimit-input-tokens-limit", "6000", "anthropic-ratelimit-input-tokens-remaining", "5000",
		"anthropic-ratelimit-input-tokens-reset", sec(12).Format(time.RFC3339),
		"anthropic-ratelimit-output-tokens-limit", "1500", "anthropic-ratelimit-output-tokens-remaining", "1000",
		"anthropic-ratelimit-output-tokens-reset", sec(3).Format(time.RFC3339),
		"anthropic-ratelimit-tokens-limit", "1500", "anthropic-ratelimit-tokens-remaining", "1000",
		"anthropic-ratelimit-tokens-reset", sec(3).Format(time.RFC3339))
	c.Complete(1, Result{Status: StatusOK, Usage: agent.Usage{Input: 1200, Output: 60}, Telemetry: ParseTelemetry(h, sec(1))}, sec(1))
	acts := c.Submit(mkJob(2, "r", "u", "i", 1600), sec(30))
	if _, refused := find(acts, ActRefuse); refused {
		t.Fatalf("refused a prompt the input budget takes: %s", dump(acts))
	}
	if l := c.lanes[testLane]; l.tokens.limit != 0 || l.inTokens.limit != 6000 || l.outTokens.limit != 1500 {
		t.Fatalf("budgets: tokens %v input %v output %v", l.tokens.limit, l.inTokens.limit, l.outTokens.limit)
	}
	// Counts rounded to a thousand bound the level: 5000 means 4500 to 5499.
	if tel := ParseTelemetry(h, sec(1)); tel.InputTokens.rounded != 1000 || !strings.Contains(dump(acts), "admit") {
		t.Fatalf("rounded %v; actions %s", tel.InputTokens.rounded, dump(acts))
	}
}

// A provider that reports nothing: the scout's headerless answer makes the lane send
// one request a second, the first 429 teaches its token budget on the per-minute
// convention, and that 429 is not held against the turn's retries.
func TestSilentLaneLearnsFrom429s(t *testing.T) {
	c := NewCore(Config{MaxRateRetries: 1, Lanes: map[string]LaneConfig{testLane: {Scout: true}}})
	for i := TurnID(1); i <= 8; i++ {
		c.Submit(mkJob(i, "r", "u", "i", 1300), sec(0))
	}
	answer := Result{Status: StatusOK, Usage: agent.Usage{Input: 1300, Output: 60}}
	if got := ids(c.Complete(1, answer, sec(0.5)), ActAdmit); len(got) != 0 {
		t.Fatalf("after a headerless answer admitted %v at once, want one a second", got)
	}
	for s := 1.0; s <= 3; s++ {
		got := ids(c.Tick(sec(s)), ActAdmit)
		if len(got) != 1 {
			t.Fatalf("at %v s admitted %v, want one", s, got)
		}
		c.Complete(got[0], answer, sec(s+0.5))
	}
	got := ids(c.Tick(sec(4)), ActAdmit)
	if len(got) != 1 {
		t.Fatalf("at 4 s admitted %v", got)
	}
	acts := c.Complete(got[0], Result{Status: StatusRateLimited}, sec(4))
	if _, refused := find(acts, ActRefuse); refused {
		t.Fatalf("the lesson's 429 used up the turn's retries: %s", dump(acts))
	}
	l := c.lanes[testLane]
	// Four answers of 1,360 by 4 s, and a 1,300 refused: the limit is below
	// (5,440 + 1,300) / (1 + 4/60) ≈ 6,319 a minute; the lane takes 98 % of that.
	if !l.tokens.known || l.tokens.limit < 5500 || l.tokens.limit > 6319 || l.tokens.rate*60 != l.tokens.limit {
		t.Fatalf("learned limit %v rate %v/min", l.tokens.limit, l.tokens.rate*60)
	}
	// The next turn waits for the learned bucket's refill, not a second.
	if got := ids(c.Tick(sec(5.1)), ActAdmit); len(got) != 0 {
		t.Fatalf("admitted %v straight into the learned bucket's deficit", got)
	}
}
