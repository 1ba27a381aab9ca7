package testkit

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Drawn lengths are lognormal around the median with a tail to Max, and the same for
// the same seed and conversation.
func TestLengthsHeavyTailed(t *testing.T) {
	l := Lengths{Median: 60, Max: 600, Seed: 3}
	var n []int
	for i := range 4000 {
		n = append(n, l.draw(seedOf(userReq(fmt.Sprint("q", i), 1))))
	}
	slices.Sort(n)
	med, p99 := n[len(n)/2], n[len(n)*99/100]
	if med < 54 || med > 66 || p99 < 300 || n[len(n)-1] > 600 || n[0] < 1 {
		t.Fatalf("median %d, p99 %d, range %d..%d: want ~60, > 300, within 1..600", med, p99, n[0], n[len(n)-1])
	}
	req := userReq("same", 1)
	if a, b := l.draw(seedOf(req)), (Lengths{Median: 60, Max: 600, Seed: 3}).draw(seedOf(req)); a != b {
		t.Fatalf("one conversation drew %d and %d", a, b)
	}
}

// Without max_tokens the limiter charges the prompt plus the drawn completion; with it,
// the prompt plus max_tokens, and the completion never exceeds it.
func TestLengthsCharging(t *testing.T) {
	s := newSim(t, Config{Lengths: Lengths{Median: 60, Max: 600, Seed: 1}, Limits: Limits{TPM: 100000}})
	uncapped := userReq(words("ab", 10), 1)
	uncapped.MaxTokens = nil
	s.submit("uncapped", uncapped)
	s.submit("capped", userReq(words("cd", 10), 5))
	s.run()
	u, c := s.results["uncapped"].Record, s.results["capped"].Record
	if u.Status != 200 || u.ChargedTokens != u.PromptTokens+u.OutputTokens || u.OutputTokens == 32 {
		t.Fatalf("uncapped: %+v: want charged prompt + drawn output", u)
	}
	if c.Status != 200 || c.ChargedTokens != c.PromptTokens+5 || c.OutputTokens > 5 {
		t.Fatalf("capped: %+v: want charged prompt + 5, output at most 5", c)
	}
}

// With OutputAtEnd a request without max_tokens is admitted on its prompt and billed its
// completion when it ends; its response's headers count that charge. Without it, the
// prompt and the completion must fit at arrival.
func TestOutputAtEnd(t *testing.T) {
	for _, atEnd := range []bool{false, true} {
		t.Run(fmt.Sprint("at end ", atEnd), func(t *testing.T) {
			// Period 1000 min: no refill to speak of during the request.
			s := newSim(t, Config{Limits: Limits{TPM: 1010, Period: 1000 * time.Minute, OutputAtEnd: atEnd}})
			req := userReq(words("a", 999), 1) // about 1,000 tokens
			req.MaxTokens = nil
			s.submit("r", req)
			s.run()
			r := s.results["r"]
			if !atEnd {
				if r.Status != 429 {
					t.Fatalf("status %d, want 429: the prompt + 32 tokens do not fit 1,010 (prompt %d)", r.Status, r.Record.PromptTokens)
				}
				return
			}
			if r.Status != 200 || r.Record.ChargedTokens != r.Record.PromptTokens+32 || r.Header.Get("x-ratelimit-remaining-tokens") != "0" {
				t.Fatalf("status %d charged %d remaining %q: want 200, the prompt + 32 and 0", r.Status, r.Record.ChargedTokens,
					r.Header.Get("x-ratelimit-remaining-tokens"))
			}
		})
	}
}
