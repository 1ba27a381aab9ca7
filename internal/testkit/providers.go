package testkit

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// Provider is a provider model: how the engine's rate limiter counts a request, when it
// bills the output, what it refuses, and what its responses tell the client. The models
// other than ProviderClassic are the ways real providers are less kind than the classic
// engine; Limits.Provider selects one.
//
// Buckets start full, as a new key's do at every provider modelled here; what keeps a
// whole minute's budget from going at t=0 is quantized enforcement (Limits.Quantum),
// which ProviderOpenAI, ProviderStrict, ProviderAnthropic and ProviderSilent apply. Only
// ProviderFixedWindow, whose windows are the model, hands out a window's budget at its
// start, and ProviderClassic keeps the classic engine's behaviour.
type Provider int

const (
	// ProviderClassic is the classic engine: a request bucket and a token bucket, as
	// Window says, charged prompt + max_tokens at arrival (prompt + the actual output
	// without max_tokens, or the output when the request ends with OutputAtEnd),
	// x-ratelimit-* headers on every response and retry-after plus retry-after-ms on
	// every 429. No quantization.
	ProviderClassic Provider = iota
	// ProviderOpenAI reserves at arrival the prompt plus max_tokens (when absent, the
	// model's max output, Limits.MaxOutput) and never refunds it; a continuous bucket
	// enforced over short windows too (Quantum); refused requests count against the
	// request budget. A 429 on the token budget carries no retry header, only the
	// body text "Please try again in 6.5s"; one on the request budget carries
	// retry-after in whole seconds. x-ratelimit-* headers.
	ProviderOpenAI
	// ProviderStrict refuses a request unless its prompt plus the completion it will
	// actually generate fits the tokens left; it bills the prompt at arrival and the
	// output as it streams (the bucket may go into debt). Continuous, quantized,
	// x-ratelimit-* headers, retry-after (whole seconds) on a 429 and no retry-after-ms.
	ProviderStrict
	// ProviderAnthropic has separate input-token and output-token buckets per minute
	// (Limits.ITPM, OTPM) besides requests. At arrival the prompt is checked against and
	// taken from the input bucket, and max_tokens (when absent, MaxOutput) from the
	// output bucket; when the request ends the output charge is adjusted to the actual
	// output. Continuous, quantized. Headers are Anthropic's only:
	// anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-{limit,remaining,
	// reset}, resets RFC 3339 (when the bucket is full again), token counts remaining
	// rounded to the nearest thousand, tokens-* the most restrictive of input and output;
	// retry-after (whole seconds) on a 429.
	ProviderAnthropic
	// ProviderFixedWindow is a gateway's counters that reset at every Period boundary
	// after Epoch: a request is admitted while its prompt fits the window's tokens left,
	// the prompt counted at arrival and the output as it streams (a window may end past
	// its limit). x-ratelimit-* headers whose resets are the window's end, retry-after
	// (whole seconds until then) on a 429.
	ProviderFixedWindow
	// ProviderSilent is a local engine (vLLM, Ollama) behind a gateway that limits
	// without saying so: as ProviderFixedWindow's admission and billing but on a
	// continuous, quantized bucket, and no rate-limit header at all, on any response,
	// nor any hint in a 429's body. A client learns from 429s alone.
	ProviderSilent
)

var providerNames = []string{"classic", "openai", "strict", "anthropic", "fixed-window", "silent"}

// Providers lists every provider model, ProviderClassic first.
func Providers() []Provider {
	out := make([]Provider, len(providerNames))
	for i := range out {
		out[i] = Provider(i)
	}
	return out
}

// String returns the model's name: classic, openai, strict, anthropic, fixed-window or
// silent.
func (p Provider) String() string {
	if p >= 0 && int(p) < len(providerNames) {
		return providerNames[p]
	}
	return fmt.Sprintf("provider(%d)", int(p))
}

// ParseProvider reads a provider model's name ("" is classic).
func ParseProvider(s string) (Provider, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return ProviderClassic, nil
	}
	for i, n := range providerNames {
		if s == n {
			return Provider(i), nil
		}
	}
	return 0, fmt.Errorf("provider model %q: want one of %s", s, strings.Join(providerNames, ", "))
}

// quantum is the short window the model enforces its buckets over (0: none).
func (p Provider) quantum(l Limits) time.Duration {
	switch p {
	case ProviderOpenAI, ProviderStrict, ProviderAnthropic, ProviderSilent:
		if l.Quantum > 0 {
			return l.Quantum
		}
		if l.Quantum < 0 {
			return 0
		}
		return DefaultQuantum
	}
	return 0
}

// DefaultQuantum is the short window that quantized models enforce a Period's budget
// over: OpenAI documents that "60,000 requests/minute may be enforced as 1,000
// requests/second", Anthropic that 60 RPM may be enforced as one request per second.
const DefaultQuantum = time.Second

// billing is how one admitted request is charged: its demand at arrival, and what
// happens to its output later.
type billing struct {
	demand
	charged int  // recorded at admission
	tail    int  // ProviderClassic with OutputAtEnd: billed when the request ends
	stream  bool // the output is billed as it is generated
	refund  int  // ProviderAnthropic: reserved output returned when the request ends
}

// bill says how the engine's provider model charges a request of prompt tokens whose
// completion will be out tokens; maxTokens is what it asked for (explicit: it sent
// max_tokens or max_completion_tokens).
func (e *Engine) bill(prompt, out, maxTokens int, explicit bool) billing {
	l := e.cfg.Limits
	reserve := maxTokens
	if !explicit {
		reserve = e.maxOutput()
	}
	p := float64(prompt)
	switch l.Provider {
	case ProviderOpenAI:
		c := float64(prompt + reserve)
		return billing{demand: demand{tokens: c, take: c}, charged: prompt + reserve}
	case ProviderStrict:
		return billing{demand: demand{tokens: float64(prompt + out), take: p}, charged: prompt, stream: true}
	case ProviderAnthropic:
		return billing{demand: demand{input: p, output: float64(reserve)}, charged: prompt + reserve,
			refund: max(0, reserve-out)}
	case ProviderFixedWindow, ProviderSilent:
		return billing{demand: demand{tokens: p, take: p}, charged: prompt, stream: true}
	}
	charge := prompt + out
	b := billing{}
	switch {
	case explicit:
		charge = prompt + maxTokens
	case l.OutputAtEnd:
		charge, b.tail = prompt, out
	}
	b.demand = demand{tokens: float64(charge), take: float64(charge)}
	b.charged = charge
	return b
}

// maxOutput is the model's longest completion: Limits.MaxOutput, else the cap of the
// drawn lengths, else DefaultMaxTokens.
func (e *Engine) maxOutput() int {
	switch {
	case e.cfg.Limits.MaxOutput > 0:
		return e.cfg.Limits.MaxOutput
	case e.cfg.Lengths.Median > 0:
		if e.cfg.Lengths.Max > 0 {
			return e.cfg.Lengths.Max
		}
		return 10 * e.cfg.Lengths.Median
	}
	return e.cfg.DefaultMaxTokens
}

// rateLimitError is the 429 body in the provider model's words.
func (e *Engine) rateLimitError(model string, rej *rejection) *APIError {
	switch e.cfg.Limits.Provider {
	case ProviderSilent:
		return &APIError{Message: "Too Many Requests", Type: "rate_limit_error", Code: strptr("rate_limit_exceeded")}
	case ProviderAnthropic:
		unit := map[string]string{"requests": "requests", "input_tokens": "input tokens", "output_tokens": "output tokens"}[rej.dim]
		msg := fmt.Sprintf("This request would exceed the rate limit for your organization of %d %s per minute. "+
			"For details, refer to: https://docs.claude.com/en/api/rate-limits.", rej.limit, unit)
		if rej.never {
			msg = fmt.Sprintf("This request asks for %d %s, more than your organization's limit of %d per minute.",
				rej.requested, unit, rej.limit)
		}
		return &APIError{Message: msg, Type: "rate_limit_error", Code: strptr("rate_limit_exceeded")}
	}
	return rateLimitError(model, rej)
}

// NetFloor is the least time, from the engine's start, that the requests in log need
// under lim's budgets, whatever the client: for each bucket, what the answered
// requests were charged beyond the bucket's initial fill, at its refill rate (for fixed
// windows, the start of the last window those charges need). Refused requests add
// only the tokens they were charged (ChargeRejectedTokens). For ProviderAnthropic the
// buckets are input (prompts) and output (actual completions); for every model
// requests count too.
func NetFloor(lim Limits, log []Record) time.Duration {
	period := lim.Period
	if period <= 0 {
		period = time.Minute
	}
	fixed := lim.Window == Fixed || lim.Provider == ProviderFixedWindow
	if lim.Provider != ProviderClassic && lim.Provider != ProviderFixedWindow {
		fixed = false
	}
	var reqs, toks, in, out float64
	for _, r := range log {
		if r.Status == http.StatusOK {
			reqs++
			in += float64(r.PromptTokens)
			out += float64(r.OutputTokens)
		}
		toks += float64(r.ChargedTokens)
	}
	floor := func(used float64, limit int) time.Duration {
		if limit <= 0 || used <= float64(limit) {
			return 0
		}
		if fixed {
			return time.Duration(math.Ceil(used/float64(limit))-1) * period
		}
		return time.Duration((used - float64(limit)) / float64(limit) * float64(period))
	}
	f := floor(reqs, lim.RPM)
	if lim.Provider == ProviderAnthropic {
		itpm, otpm := lim.ITPM, lim.OTPM
		if itpm == 0 {
			itpm = lim.TPM
		}
		if otpm == 0 && lim.TPM > 0 {
			otpm = max(1, lim.TPM/4)
		}
		return max(f, floor(in, itpm), floor(out, otpm))
	}
	return max(f, floor(toks, lim.TPM))
}
