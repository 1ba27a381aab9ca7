package testkit

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

// noQuantum turns quantized enforcement off, to test a model's other rules alone.
const noQuantum = -1

func TestParseProvider(t *testing.T) {
	for _, p := range Providers() {
		got, err := ParseProvider(strings.ToUpper(p.String()))
		if err != nil || got != p {
			t.Errorf("ParseProvider(%q) = %v, %v", p, got, err)
		}
	}
	if p, err := ParseProvider(""); err != nil || p != ProviderClassic {
		t.Errorf("empty: %v %v", p, err)
	}
	if _, err := ParseProvider("azure"); err == nil || !strings.Contains(err.Error(), "openai, strict") {
		t.Errorf("azure: %v", err)
	}
}

// retryHeadersOf returns which of retry-after and retry-after-ms a response carries.
func retryHeadersOf(h http.Header) (ra, ms bool) {
	return h.Get("retry-after") != "", h.Get("retry-after-ms") != ""
}

func rateHeaders(h http.Header) []string {
	var out []string
	for k := range h {
		k = strings.ToLower(k)
		if strings.HasPrefix(k, "x-ratelimit-") || strings.HasPrefix(k, "anthropic-ratelimit-") {
			out = append(out, k)
		}
	}
	return out
}

// probe sends a one-token request and returns the headers it was admitted with (what
// a streaming client gets with its first chunk), without moving the clock.
func probe(s *sim) http.Header {
	var h http.Header
	s.engine.Submit(userReq("p", 1), func(r *Result) {
		if h == nil {
			h = r.Header
		}
	}, OnFirstToken(func(r *Result) { h = r.Header }))
	s.clock.AdvanceTo(s.clock.Now())
	if h == nil {
		s.t.Fatal("probe: not admitted")
	}
	return h
}

func TestOpenAIReservesMaxTokensAtArrival(t *testing.T) {
	s := newSim(t, Config{Lengths: Lengths{Median: 20, Max: 500, Seed: 1},
		Limits: Limits{Provider: ProviderOpenAI, TPM: 6000, RPM: 600, Quantum: noQuantum}})
	// Without max_tokens the model's max output (the lengths' cap, 500) is reserved.
	s.submit("a", &ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: Content(words("q", 10))}}})
	s.run()
	a := s.result("a")
	if a.Status != http.StatusOK || a.Record.ChargedTokens != 12+500 || a.Record.OutputTokens >= 500 {
		t.Fatalf("a: %d charged %d output %d, want prompt 12 + 500 reserved", a.Status, a.Record.ChargedTokens, a.Record.OutputTokens)
	}
	tel := scheduler.ParseTelemetry(a.Header, s.clock.Now())
	if tel.Tokens.Remaining != 6000-512 {
		t.Errorf("remaining %d after a, want %d: the reservation is not refunded", tel.Tokens.Remaining, 6000-512)
	}
	// With max_tokens, that is reserved, whatever is generated.
	s.submit("b", costReq(300))
	s.run()
	if b := s.result("b"); b.Record.ChargedTokens != 300 || b.Record.OutputTokens >= 288 {
		t.Fatalf("b: charged %d output %d", b.Record.ChargedTokens, b.Record.OutputTokens)
	}
}

func TestOpenAIQuantized(t *testing.T) {
	// 6,000 TPM over one-second windows: 100 tokens a second, and one request into an
	// empty window whatever its size.
	s := newSim(t, Config{Limits: Limits{Provider: ProviderOpenAI, TPM: 6000, RPM: 600}})
	s.submit("a", costReq(50))
	s.submit("b", costReq(50))
	s.submit("c", costReq(50))
	s.run()
	if s.result("a").Status != http.StatusOK || s.result("b").Status != http.StatusOK {
		t.Fatal("the first second's share was refused")
	}
	c := s.result("c")
	if c.Status != http.StatusTooManyRequests || c.Error.Error.Type != "tokens" {
		t.Fatalf("c: %d %+v, want a token 429 while 5,900 tokens remain", c.Status, c.Error)
	}
	if ra, ms := retryHeadersOf(c.Header); ra || ms {
		t.Errorf("a token 429 carries retry headers: %v", c.Header)
	}
	if c.Record.LimitedBy != "tokens" || !c.Record.Quantum {
		t.Errorf("c: limited by %q, quantum %v", c.Record.LimitedBy, c.Record.Quantum)
	}
	if !strings.HasSuffix(c.Error.Error.Message, "Please try again in 1s.") || c.Record.RetryAfter != time.Second {
		t.Errorf("c: %q, retry %v", c.Error.Error.Message, c.Record.RetryAfter)
	}
	tel := scheduler.ParseTelemetry(c.Header, s.clock.Now())
	if tel.Tokens.Remaining != 5900 || tel.Requests.Remaining != 597 {
		t.Errorf("c: %d tokens and %d requests left, want 5900 and 597 (the refusal counts)", tel.Tokens.Remaining, tel.Requests.Remaining)
	}
	s.clock.Advance(time.Second)
	s.submit("big", costReq(2000)) // larger than a window's share, into an empty window
	s.submit("c2", costReq(50))
	s.run()
	if s.result("big").Status != http.StatusOK || s.result("c2").Status != http.StatusTooManyRequests {
		t.Fatalf("next second: big %d, c2 %d", s.result("big").Status, s.result("c2").Status)
	}

	// A request 429 says when in retry-after (whole seconds), without retry-after-ms:
	// 600 RPM are 10 requests a second.
	s = newSim(t, Config{Limits: Limits{Provider: ProviderOpenAI, TPM: 100000, RPM: 600}})
	for i := range 10 {
		s.submit(string(rune('a'+i)), costReq(20))
	}
	s.submit("b", costReq(20))
	b := s.result("b")
	ra, ms := retryHeadersOf(b.Header)
	if b.Status != http.StatusTooManyRequests || b.Error.Error.Type != "requests" || !ra || ms || b.Header.Get("retry-after") != "1" {
		t.Fatalf("b: %d %+v %v", b.Status, b.Error, b.Header)
	}
}

// No quantized model lets a minute's budget go in its first second; a fixed window
// does, which is what a fixed window is.
func TestMinuteBudgetNotAtOnce(t *testing.T) {
	for _, p := range Providers() {
		s := newSim(t, Config{DefaultMaxTokens: 8, Limits: Limits{Provider: p, TPM: 6000, RPM: 600}})
		admitted := 0
		for i := range 100 {
			s.engine.Submit(userReq(words("q", 40), 8), func(r *Result) {
				if r.Status == http.StatusOK {
					admitted++
				}
			}, WithCaller(string(rune('a'+i%26))))
		}
		s.run()
		// 50 tokens each (42 prompt, 8 output): a second's share of 6,000 TPM is 100
		// tokens, so 2; of 600 RPM, 10 requests. Anthropic's input share is 100 (its
		// output share, 1,500/60 = 25, takes 3 × 8).
		want := 2
		if p == ProviderClassic || p == ProviderFixedWindow {
			want = 100
		}
		if admitted != want {
			t.Errorf("%s: %d of 100 requests admitted at t=0, want %d", p, admitted, want)
		}
	}
}

func TestStrictRefusesUnlessActualOutputFits(t *testing.T) {
	cfg := Config{Lengths: Lengths{Median: 60, Sigma: 0.8, Max: 600, Seed: 4},
		Limits: Limits{Provider: ProviderStrict, TPM: 3000, Quantum: noQuantum}}
	s := newSim(t, cfg)
	x := &ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: Content(words("x", 30))}}}
	out := cfg.Lengths.draw(seedOf(x))
	need := 32 + out // the prompt and the completion it will generate
	// Drain the bucket to one token short of x's need: a request of one output token
	// billed at once (no decode time).
	drain := userReq(words("q", 3000-need-2), 1)
	s.submit("drain", drain)
	s.run()
	if r := s.result("drain"); r.Status != http.StatusOK {
		t.Fatalf("drain: %d", r.Status)
	}
	s.submit("x", x)
	r := s.result("x")
	if r.Status != http.StatusTooManyRequests || r.Error.Error.Type != "tokens" {
		t.Fatalf("x: %d, want a 429: its prompt (32) fits the %d tokens left, prompt + %d output does not", r.Status, need-1, out)
	}
	if ra, ms := retryHeadersOf(r.Header); !ra || ms {
		t.Fatalf("x: retry-after %v, retry-after-ms %v, want retry-after only", ra, ms)
	}
	if tel := scheduler.ParseTelemetry(r.Header, s.clock.Now()); tel.Tokens.Remaining != int64(need-1) {
		t.Fatalf("x: %d tokens left, want %d", tel.Tokens.Remaining, need-1)
	}
	// One token's refill later (3,000 a minute: 20 ms) it fits, and its record has the
	// drawn length.
	s.clock.Advance(20 * time.Millisecond)
	s.submit("x2", x)
	s.run()
	if r := s.result("x2"); r.Status != http.StatusOK || r.Record.OutputTokens != out || r.Record.ChargedTokens != need {
		t.Fatalf("x2: %d output %d charged %d, want output %d charged %d", r.Status, r.Record.OutputTokens, r.Record.ChargedTokens, out, need)
	}
}

func TestStrictBillsOutputAsItStreams(t *testing.T) {
	s := newSim(t, Config{DecodePerToken: 10 * time.Millisecond, Slots: 4,
		Limits: Limits{Provider: ProviderStrict, TPM: 6000, Quantum: noQuantum}})
	// 12 prompt tokens, 500 output tokens over 5 s.
	s.submit("a", costReq(512))
	h0 := scheduler.ParseTelemetry(probe(s), t0)
	// a's prompt (12) and probe0's prompt (2) and output (1, billed at once) are gone.
	if h0.Tokens.Remaining != 6000-12-3 {
		t.Fatalf("at arrival: %d left, want %d (the output not yet billed)", h0.Tokens.Remaining, 6000-15)
	}
	s.clock.AdvanceTo(t0.Add(2500 * time.Millisecond)) // half the output: 250 billed, 250 refilled
	h1 := scheduler.ParseTelemetry(probe(s), s.clock.Now())
	// probe0's output (1) and a's first 250 are billed, 250 refilled, probe1's prompt (3) taken.
	if want := int64(6000 - 15 - 1 - 250 + 250 - 3); h1.Tokens.Remaining != want {
		t.Fatalf("mid-stream: %d left, want %d", h1.Tokens.Remaining, want)
	}
	s.run()
	a := s.result("a")
	if a.Record.ChargedTokens != 512 {
		t.Fatalf("a charged %d, want 512", a.Record.ChargedTokens)
	}

	// A client that goes away mid-stream is billed what was generated.
	s = newSim(t, Config{DecodePerToken: 10 * time.Millisecond,
		Limits: Limits{Provider: ProviderStrict, TPM: 6000, Quantum: noQuantum}})
	cancel := s.submit("b", costReq(512))
	s.clock.AdvanceTo(t0.Add(time.Second))
	cancel()
	if b := s.result("b"); b.Status != 499 || b.Record.ChargedTokens != 12+100 {
		t.Fatalf("b: %d charged %d, want 499 and 112", b.Status, b.Record.ChargedTokens)
	}
}

func TestAnthropicInputAndOutputBuckets(t *testing.T) {
	s := newSim(t, Config{Lengths: Lengths{Median: 50, Max: 100, Seed: 2},
		Limits: Limits{Provider: ProviderAnthropic, RPM: 50, ITPM: 10000, OTPM: 2000, Quantum: noQuantum}})
	s.clock.Advance(300 * time.Millisecond)
	// max_tokens 800 is reserved on the output bucket at arrival.
	s.submit("a", userReq(words("q", 10), 800))
	s.submit("b", userReq(words("q", 10), 800))
	s.submit("c", userReq(words("q", 10), 800)) // 400 output tokens left
	c := s.result("c")
	if c.Status != http.StatusTooManyRequests || c.Error.Error.Type != "rate_limit_error" || !strings.Contains(c.Error.Error.Message, "2000 output tokens per minute") ||
		c.Record.LimitedBy != "output_tokens" || c.Record.Quantum {
		t.Fatalf("c: %d %+v, want an output-token 429", c.Status, c.Error)
	}
	if ra, ms := retryHeadersOf(c.Header); !ra || ms {
		t.Errorf("c: retry-after %v retry-after-ms %v, want retry-after only", ra, ms)
	}
	for _, k := range rateHeaders(c.Header) {
		if strings.HasPrefix(k, "x-ratelimit-") {
			t.Errorf("c carries %s", k)
		}
	}
	want := map[string]string{
		"anthropic-ratelimit-requests-limit":          "50",
		"anthropic-ratelimit-requests-remaining":      "47", // the refusal counts
		"anthropic-ratelimit-input-tokens-limit":      "10000",
		"anthropic-ratelimit-input-tokens-remaining":  "10000", // 9,976 to the nearest thousand
		"anthropic-ratelimit-output-tokens-limit":     "2000",
		"anthropic-ratelimit-output-tokens-remaining": "0", // 400
		"anthropic-ratelimit-tokens-limit":            "2000",
		"anthropic-ratelimit-tokens-remaining":        "0",
	}
	for k, v := range want {
		if got := c.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if _, err := time.Parse(time.RFC3339, c.Header.Get("anthropic-ratelimit-output-tokens-reset")); err != nil {
		t.Error(err)
	}
	now := s.clock.Now()
	tel := scheduler.ParseTelemetry(c.Header, now)
	// (800 − 400) output tokens at 2,000 a minute: 12 s, whole seconds rounded up.
	if got := tel.RetryAt.Sub(now); got < 12*time.Second || got > 13*time.Second {
		t.Errorf("retry in %v, want 12 s", got)
	}
	// When a and b end, the output charge is adjusted to what they generated.
	s.run()
	for _, n := range []string{"a", "b"} {
		r := s.result(n)
		if r.Status != http.StatusOK || r.Record.OutputTokens > 100 || r.Record.ChargedTokens != 12+r.Record.OutputTokens {
			t.Fatalf("%s: %d output %d charged %d", n, r.Status, r.Record.OutputTokens, r.Record.ChargedTokens)
		}
	}
	s.submit("d", userReq(words("q", 10), 800))
	s.run()
	if d := s.result("d"); d.Status != http.StatusOK {
		t.Fatalf("d after the refunds: %d %+v", d.Status, d.Error)
	}

	// A prompt over the input tokens left is an input-token 429.
	s = newSim(t, Config{Limits: Limits{Provider: ProviderAnthropic, RPM: 50, ITPM: 1000, OTPM: 2000, Quantum: noQuantum}})
	s.submit("a", userReq(words("q", 600), 10))
	s.submit("b", userReq(words("q", 600), 10))
	if b := s.result("b"); b.Status != http.StatusTooManyRequests || !strings.Contains(b.Error.Error.Message, "input tokens") {
		t.Fatalf("b: %d %+v", b.Status, b.Error)
	}
	// Without max_tokens the model's max output is reserved: here DefaultMaxTokens.
	s = newSim(t, Config{DefaultMaxTokens: 1500, Limits: Limits{Provider: ProviderAnthropic, ITPM: 10000, OTPM: 2000, Quantum: noQuantum}})
	s.submit("a", &ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}})
	s.submit("b", &ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: "x"}}})
	if b := s.result("b"); b.Status != http.StatusTooManyRequests || !strings.Contains(b.Error.Error.Message, "output tokens") {
		t.Fatalf("no max_tokens: b %d %+v", b.Status, b.Error)
	}
}

func TestFixedWindowModel(t *testing.T) {
	s := newSim(t, Config{DecodePerToken: 100 * time.Millisecond,
		Limits: Limits{Provider: ProviderFixedWindow, TPM: 1000, RPM: 10}})
	// A window's whole budget is there at its start: admitted while the prompt fits.
	s.submit("a", userReq(words("q", 600), 1)) // 602 prompt
	s.submit("b", userReq(words("q", 300), 1)) // 302: 904 counted
	s.submit("c", userReq(words("q", 100), 1)) // 102: 96 left
	c := s.result("c")
	if c.Status != http.StatusTooManyRequests || c.Error.Error.Type != "tokens" {
		t.Fatalf("c: %d", c.Status)
	}
	if ra, ms := retryHeadersOf(c.Header); !ra || ms || c.Header.Get("retry-after") != "60" {
		t.Fatalf("c: %v", c.Header)
	}
	tel := scheduler.ParseTelemetry(c.Header, s.clock.Now())
	checkDim(t, "c tokens", tel.Tokens, s.clock.Now(), wantDim{1000, 96, time.Minute})
	s.run()

	// Output streamed across a window's end is billed to each window as generated.
	s.clock.AdvanceTo(t0.Add(50 * time.Second))
	s.submit("long", userReq(words("q", 10), 200)) // 20 s of output from t0+50 s
	s.clock.AdvanceTo(t0.Add(70 * time.Second))
	s.run()
	tel = scheduler.ParseTelemetry(probe(s), s.clock.Now())
	// Window 2 holds long's last 100 output tokens and the probe's prompt (3).
	checkDim(t, "window 2", tel.Tokens, s.clock.Now(), wantDim{1000, 1000 - 100 - 3, 50 * time.Second})
	if r := s.result("long"); r.Record.ChargedTokens != 212 {
		t.Fatalf("long charged %d", r.Record.ChargedTokens)
	}
}

func TestSilentModelSaysNothing(t *testing.T) {
	s := newSim(t, Config{Limits: Limits{Provider: ProviderSilent, TPM: 6000, RPM: 600}})
	s.submit("a", userReq(words("q", 60), 1)) // 62 of a second's 100
	s.submit("b", userReq(words("q", 60), 1))
	s.run()
	for _, n := range []string{"a", "b"} {
		r := s.result(n)
		if h := rateHeaders(r.Header); len(h) > 0 {
			t.Errorf("%s (%d): %v", n, r.Status, h)
		}
		if ra, ms := retryHeadersOf(r.Header); ra || ms {
			t.Errorf("%s: retry headers", n)
		}
	}
	b := s.result("b")
	if b.Status != http.StatusTooManyRequests || strings.Contains(b.Error.Error.Message, "try again") {
		t.Fatalf("b: %d %q", b.Status, b.Error.Error.Message)
	}
	if tel := scheduler.ParseTelemetry(b.Header, s.clock.Now()); tel.Tokens.Known() || tel.Requests.Known() || !tel.RetryAt.IsZero() {
		t.Fatalf("telemetry from a silent 429: %+v", tel)
	}
}

// Which 429s carry retry-after and retry-after-ms, per model.
func TestRetryHeadersPerModel(t *testing.T) {
	for _, tc := range []struct {
		p      Provider
		ra, ms bool
	}{
		{ProviderClassic, true, true},
		{ProviderOpenAI, false, false}, // a token 429: the body only
		{ProviderStrict, true, false},
		{ProviderAnthropic, true, false},
		{ProviderFixedWindow, true, false},
		{ProviderSilent, false, false},
	} {
		s := newSim(t, Config{Limits: Limits{Provider: tc.p, TPM: 600, ITPM: 600, OTPM: 600, Quantum: noQuantum}})
		s.submit("a", userReq(words("q", 400), 1))
		s.submit("b", userReq(words("q", 400), 1))
		b := s.result("b")
		ra, ms := retryHeadersOf(b.Header)
		if b.Status != http.StatusTooManyRequests || ra != tc.ra || ms != tc.ms {
			t.Errorf("%s: %d, retry-after %v (want %v), retry-after-ms %v (want %v)", tc.p, b.Status, ra, tc.ra, ms, tc.ms)
		}
	}
}

func TestNetFloor(t *testing.T) {
	ok := func(prompt, out, charged int) Record {
		return Record{Status: http.StatusOK, PromptTokens: prompt, OutputTokens: out, ChargedTokens: charged}
	}
	log := []Record{ok(1000, 500, 1500), ok(1000, 500, 1500), ok(1000, 500, 1500), {Status: 429}}
	for _, tc := range []struct {
		lim  Limits
		want time.Duration
	}{
		{Limits{TPM: 3000}, 30 * time.Second},                                           // (4500 − 3000) / 3000 min
		{Limits{TPM: 3000, RPM: 1}, 2 * time.Minute},                                    // requests: (3 − 1) / 1
		{Limits{TPM: 2000, Window: Fixed}, 2 * time.Minute},                             // 4500 needs 3 windows
		{Limits{TPM: 2000, Provider: ProviderFixedWindow}, 2 * time.Minute},             // the same
		{Limits{TPM: 2000, Provider: ProviderStrict}, 75 * time.Second},                 // continuous: 2500 / 2000 min
		{Limits{Provider: ProviderAnthropic, ITPM: 2000, OTPM: 1000}, 30 * time.Second}, // input (3000 − 2000) / 2000, output 1500 − 1000 / 1000
		{Limits{Provider: ProviderAnthropic, ITPM: 6000, OTPM: 500}, 2 * time.Minute},   // output (1500 − 500) / 500
	} {
		if got := NetFloor(tc.lim, log); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.lim, got, tc.want)
		}
	}
}
