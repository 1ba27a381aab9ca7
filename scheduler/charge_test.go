package scheduler

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
)

// A provider that reserves a completion's longest output at arrival and keeps it (OpenAI
// without max_tokens) shows it in the fall of the tokens left after a turn that ran
// alone: two such turns in a row teach the lane to reserve it up front for every turn
// without an output cap. A provider that charges what a turn used teaches nothing.
func TestProviderReservedOutputIsLearned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		charged int // the provider's charge per turn of 1,000 prompt tokens and 60 output
		learn   bool
	}{
		{"reserves 600 at arrival", 1600, true},
		{"charges the usage", 1060, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCore(Config{})
			left := 6000.0 // the provider's count, refilled at 100 a second
			for i := TurnID(1); i <= 3; i++ {
				now := sec(float64(i - 1))
				c.Submit(mkJob(i, "r", "u", "i", 1000), now)
				if i == 3 {
					break
				}
				left = min(6000, left+100) - float64(tc.charged)
				if i == 1 {
					left += 100 // the bucket was full: the refill before the first turn is lost
				}
				h := hdr("x-ratelimit-limit-tokens", "6000", "x-ratelimit-remaining-tokens", strconv.Itoa(int(left)),
					"x-ratelimit-reset-tokens", strconv.Itoa(int((6000-left)/100))+"s")
				end := now.Add(time.Second)
				c.Complete(i, Result{Status: StatusOK, Usage: agent.Usage{Input: 1000, Output: 60}, Telemetry: ParseTelemetry(h, end)}, end)
			}
			l := c.lanes[testLane]
			if tc.learn && (l.upOut < 500 || l.upOut > 600 || !l.upfront) {
				t.Fatalf("learned an output reservation of %.0f (up front: %v), want the 500–600 the provider reserves", l.upOut, l.upfront)
			}
			if !tc.learn && l.upOut != 0 {
				t.Fatalf("a provider charging the usage taught an output reservation of %.0f", l.upOut)
			}
			if res := c.reservedShare(3); tc.learn && res[dimTok] < 1000+l.upOut {
				t.Fatalf("third turn reserved %.0f tokens, want its prompt and the %.0f the provider reserves", res[dimTok], l.upOut)
			}
		})
	}
}

// A 429's words: OpenAI's "Requested N" is what the provider charged the request, and
// "Please try again in 6.5s" the wait when no header gives one.
func TestRateLimitBodyIsRead(t *testing.T) {
	now := sec(0)
	msg := errors.New("Rate limit reached for m on tokens per min (TPM): Limit 6000, Used 5000, Requested 1900. Please try again in 6.5s.")
	res, _ := outcomeResult(Outcome{Err: msg, StatusCode: 429}, now)
	if res.Telemetry.Requested != 1900 || !res.Telemetry.RetryAt.Equal(now.Add(6500*time.Millisecond)) {
		t.Fatalf("telemetry %+v, want Requested 1900 and a wait of 6.5 s", res.Telemetry)
	}
	res, _ = outcomeResult(Outcome{Err: msg, StatusCode: 429, Header: hdr("retry-after", "2")}, now)
	if !res.Telemetry.RetryAt.Equal(now.Add(2 * time.Second)) {
		t.Fatalf("a header's wait: %v, want 2 s (the header wins)", res.Telemetry.RetryAt.Sub(now))
	}
	for text, want := range map[string]time.Duration{
		"please try again in 1m2.5s":  62500 * time.Millisecond,
		"Please try again in 250ms.":  250 * time.Millisecond,
		"Please try again in soon":    0,
		"Please try again in 9e99s":   0,
		"Please try again in 99999h.": 0, // beyond a year: ignored
	} {
		res, _ := outcomeResult(Outcome{Err: errors.New(text), StatusCode: 429}, now)
		if got := res.Telemetry.RetryAt; want == 0 && !got.IsZero() || want > 0 && !got.Equal(now.Add(want)) {
			t.Errorf("%q: retry at %v, want %v", text, got, want)
		}
	}
	// Only a 429's words count.
	if res, _ := outcomeResult(Outcome{Err: msg, StatusCode: 500}, now); res.Telemetry.Requested != 0 || !res.Telemetry.RetryAt.IsZero() {
		t.Fatalf("a 500's words were read: %+v", res.Telemetry)
	}
}

// A 429 that says how much the request needed teaches the output the provider reserves
// at arrival, for every later turn without an output cap.
func TestRequestedInA429IsReserved(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {TPM: 6000}}})
	c.Submit(mkJob(1, "r", "u", "i", 1000), sec(0))
	msg := errors.New("Rate limit reached for m on tokens per min (TPM): Limit 6000, Used 5000, Requested 1900.")
	res, _ := outcomeResult(Outcome{Err: msg, StatusCode: 429, Header: hdr("retry-after-ms", "100")}, sec(1))
	c.Complete(1, res, sec(1))
	c.Submit(mkJob(2, "r2", "u", "i", 1000), sec(1))
	for at := sec(1); at.Before(sec(120)); at = at.Add(100 * time.Millisecond) {
		c.Tick(at)
		if r := c.reservedShare(2); r[dimTok] > 0 {
			if r[dimTok] < 1900 {
				t.Fatalf("turn after the 429 reserved %.0f tokens, want the 1,900 the provider said it needs", r[dimTok])
			}
			return
		}
	}
	t.Fatal("the second turn was never admitted")
}
