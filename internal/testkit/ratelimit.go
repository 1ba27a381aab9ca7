package testkit

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Window is how a rate-limit bucket refills.
type Window int

const (
	// Continuous is a token bucket refilling limit/Period continuously (OpenAI's model):
	// a reset header says when the bucket is full again.
	Continuous Window = iota
	// Fixed is a counter that resets at every Period boundary after Epoch (LiteLLM's
	// and many gateways' model): a reset header says when the window ends.
	Fixed
)

// String returns "continuous" or "fixed".
func (w Window) String() string {
	if w == Fixed {
		return "fixed"
	}
	return "continuous"
}

// ParseWindow reads "continuous" or "fixed".
func ParseWindow(s string) (Window, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "continuous", "":
		return Continuous, nil
	case "fixed":
		return Fixed, nil
	}
	return 0, fmt.Errorf("rate-limit window %q: want continuous or fixed", s)
}

// Limits configures the engine-wide request and token buckets. A zero limit disables
// that bucket (and its headers).
type Limits struct {
	RPM    int           // requests per Period
	TPM    int           // tokens per Period
	Window Window        // Continuous or Fixed
	Period time.Duration // default one minute
	// Epoch anchors fixed windows (they start at Epoch + k·Period); zero means the
	// engine's creation time.
	Epoch time.Time
	// NoChargeRejected stops a rejected request from consuming the request bucket. By
	// default it does, as OpenAI documents ("unsuccessful requests contribute to your
	// per-minute limit"), so a client that retries blindly digs itself deeper.
	NoChargeRejected bool
	// ChargeRejectedTokens makes a rejected request also consume its token charge.
	ChargeRejectedTokens bool
	// OutputAtEnd bills a request that sets no max_tokens the way a provider that
	// charges generated tokens does: it is admitted and charged on its prompt alone, and
	// its actual completion is charged when it ends (the bucket may go into debt). Its
	// non-streamed response's rate-limit headers then describe the bucket after that
	// charge; a stream's went out with its first token, before it.
	OutputAtEnd bool
	// Anthropic adds anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}
	// headers (RFC 3339 resets) next to the x-ratelimit-* ones (ProviderClassic only).
	Anthropic bool

	// Provider selects a provider model (see Provider); the zero value, ProviderClassic,
	// is the engine as configured by the fields above. The other models set the window
	// themselves (fixed for ProviderFixedWindow, continuous for the rest) and ignore
	// OutputAtEnd and Anthropic.
	Provider Provider
	// ITPM and OTPM are ProviderAnthropic's input-token and output-token limits per
	// Period; 0 takes TPM for input and TPM/4 for output.
	ITPM, OTPM int
	// Quantum is the short window over which the quantized models (ProviderOpenAI,
	// ProviderStrict, ProviderAnthropic, ProviderSilent) also enforce every bucket: each
	// window admits at most the bucket's limit × Quantum/Period, and always one request
	// into an empty window. 0 means DefaultQuantum; negative turns quantization off.
	Quantum time.Duration
	// MaxOutput is the model's longest completion, which ProviderOpenAI and
	// ProviderAnthropic reserve for a request that sends no max_tokens; 0 means the cap
	// of Config.Lengths when lengths are drawn, else Config.DefaultMaxTokens.
	MaxOutput int
}

// bucket is one rate-limit dimension. Counts are float64 so a continuous bucket can hold
// fractional refill; headers report the floor.
type bucket struct {
	limit  float64
	period time.Duration
	fixed  bool

	level float64   // continuous: what is available at time at
	at    time.Time // continuous: when level was last brought up to date

	used   float64   // fixed: consumed in the current window
	window time.Time // fixed: start of the current window

	// Quantized enforcement (Limits.Quantum): besides the bucket, each short window of
	// qLen after qEpoch admits at most qShare (the period's limit pro rata), and always
	// one request into an empty window.
	qLen   time.Duration
	qShare float64
	qEpoch time.Time
	qWin   time.Time
	qUsed  float64
}

// eps absorbs float rounding so that waiting exactly the advertised time always suffices.
const eps = 1e-6

func newBucket(limit int, period time.Duration, w Window, now, epoch time.Time) *bucket {
	if limit <= 0 {
		return nil
	}
	b := &bucket{limit: float64(limit), period: period, fixed: w == Fixed, level: float64(limit), at: now}
	if b.fixed {
		b.window = epoch
		if b.window.After(now) {
			// A window that starts in the future: count from the one that contains now.
			k := math.Ceil(float64(b.window.Sub(now)) / float64(period))
			b.window = b.window.Add(-time.Duration(k) * period)
		}
	}
	return b
}

// quantize enforces the bucket over windows of q as well (q ≤ 0: not at all).
func (b *bucket) quantize(q time.Duration, epoch time.Time) {
	if b == nil || q <= 0 {
		return
	}
	b.qLen, b.qEpoch, b.qWin = q, epoch, epoch
	b.qShare = b.limit * float64(q) / float64(b.period)
}

func (b *bucket) rate() float64 { return b.limit / float64(b.period) } // per nanosecond

func (b *bucket) sync(now time.Time) {
	if b.qLen > 0 && (now.Sub(b.qWin) >= b.qLen || now.Before(b.qWin)) {
		b.qWin = b.qEpoch.Add(now.Sub(b.qEpoch) / b.qLen * b.qLen)
		b.qUsed = 0
	}
	if b.fixed {
		if d := now.Sub(b.window); d >= b.period {
			k := d / b.period
			b.window = b.window.Add(k * b.period)
			b.used = 0
		}
		return
	}
	if now.After(b.at) {
		b.level = math.Min(b.limit, b.level+b.rate()*float64(now.Sub(b.at)))
		b.at = now
	}
}

func (b *bucket) available() float64 {
	if b.fixed {
		return b.limit - b.used
	}
	return b.level
}

// take consumes n. A continuous bucket may go into debt (rejected requests charged
// while empty, output billed after admission), at most one full window deep.
func (b *bucket) take(n float64) {
	if b.fixed {
		b.used += n
		return
	}
	b.level = math.Max(-b.limit, b.level-n)
}

// admitted consumes n at admission: from the bucket and from the current short window.
func (b *bucket) admitted(n float64) {
	b.take(n)
	if b.qLen > 0 {
		b.qUsed += n
	}
}

// give returns n to a continuous bucket (an over-reservation adjusted when a request
// ends), never above its limit; a fixed window's count drops, never below zero.
func (b *bucket) give(n float64) {
	if b.fixed {
		b.used = math.Max(0, b.used-n)
		return
	}
	b.level = math.Min(b.limit, b.level+n)
}

// quantumWait is how long until the short window admits n, after sync(now).
func (b *bucket) quantumWait(now time.Time, n float64) time.Duration {
	if b.qLen <= 0 || b.qUsed <= eps || b.qUsed+n <= b.qShare+eps {
		return 0
	}
	return b.qWin.Add(b.qLen).Sub(now)
}

// until returns how long until n is available, after sync(now); ok is false when n
// exceeds the limit and waiting can never help.
func (b *bucket) until(now time.Time, n float64) (time.Duration, bool) {
	if n > b.limit+eps {
		return 0, false
	}
	q := b.quantumWait(now, n)
	if b.available()+eps >= n {
		return q, true
	}
	if b.fixed {
		return max(q, b.window.Add(b.period).Sub(now)), true
	}
	return max(q, time.Duration(math.Ceil((n-b.level)/b.rate()))), true
}

// untilFull is what a reset header reports: when the bucket is full again (continuous)
// or when the current window ends (fixed; zero if nothing was used in it).
func (b *bucket) untilFull(now time.Time) time.Duration {
	if b.fixed {
		if b.used <= 0 {
			return 0
		}
		return b.window.Add(b.period).Sub(now)
	}
	if b.level >= b.limit {
		return 0
	}
	return time.Duration(math.Ceil((b.limit - b.level) / b.rate()))
}

func (b *bucket) remaining() int64 {
	a := math.Floor(b.available() + eps)
	if a < 0 {
		return 0
	}
	return int64(a)
}

// stream is output billed as it is generated: n tokens spread evenly from start to end.
type stream struct {
	b          *bucket
	n, billed  float64
	start, end time.Time
}

func (s *stream) due(t time.Time) float64 {
	switch {
	case !t.After(s.start):
		return 0
	case !t.Before(s.end):
		return s.n
	}
	return s.n * float64(t.Sub(s.start)) / float64(s.end.Sub(s.start))
}

// limiter holds the engine's buckets: requests and tokens, or for ProviderAnthropic
// requests, input tokens and output tokens.
type limiter struct {
	cfg     Limits
	reqs    *bucket
	toks    *bucket
	in, out *bucket
	streams []*stream
}

func newLimiter(cfg Limits, now time.Time) *limiter {
	if cfg.Period <= 0 {
		cfg.Period = time.Minute
	}
	epoch := cfg.Epoch
	if epoch.IsZero() {
		epoch = now
	}
	p := cfg.Provider
	switch p {
	case ProviderClassic:
	case ProviderFixedWindow:
		cfg.Window = Fixed
	default:
		cfg.Window = Continuous
	}
	l := &limiter{cfg: cfg, reqs: newBucket(cfg.RPM, cfg.Period, cfg.Window, now, epoch)}
	if p == ProviderAnthropic {
		itpm, otpm := cfg.ITPM, cfg.OTPM
		if itpm == 0 {
			itpm = cfg.TPM
		}
		if otpm == 0 && cfg.TPM > 0 {
			otpm = max(1, cfg.TPM/4)
		}
		l.in = newBucket(itpm, cfg.Period, cfg.Window, now, epoch)
		l.out = newBucket(otpm, cfg.Period, cfg.Window, now, epoch)
	} else {
		l.toks = newBucket(cfg.TPM, cfg.Period, cfg.Window, now, epoch)
	}
	if q := p.quantum(cfg); q > 0 {
		for _, b := range l.buckets() {
			b.quantize(q, epoch)
		}
	}
	return l
}

// buckets returns the limiter's buckets that exist.
func (l *limiter) buckets() []*bucket {
	var out []*bucket
	for _, b := range []*bucket{l.reqs, l.toks, l.in, l.out} {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// sync brings every bucket up to now, billing streamed output as it goes. Output that
// streamed before a fixed window ended is billed to that window.
func (l *limiter) sync(now time.Time) {
	for {
		var next time.Time
		for _, s := range l.streams {
			if b := s.b; b.fixed {
				if end := b.window.Add(b.period); !end.After(now) && (next.IsZero() || end.Before(next)) {
					next = end
				}
			}
		}
		if next.IsZero() {
			break
		}
		l.flush(next.Add(-1))
		for _, b := range l.buckets() {
			b.sync(next)
		}
	}
	// Billing before refilling caps the sum, not the refill alone: a bucket that pays
	// for a stream as it refills never reaches its limit in between.
	l.flush(now)
	for _, b := range l.buckets() {
		b.sync(now)
	}
}

// flush bills the output streamed up to t.
func (l *limiter) flush(t time.Time) {
	live := l.streams[:0]
	for _, s := range l.streams {
		if d := s.due(t) - s.billed; d > 0 {
			s.b.take(d)
			s.billed += d
		}
		if s.billed < s.n-eps {
			live = append(live, s)
		}
	}
	clear(l.streams[len(live):])
	l.streams = live
}

// streamOutput bills n output tokens on the token bucket as they are generated, from
// start to end; it returns a function that stops the billing at a time (the client went
// away) and reports what was billed.
func (l *limiter) streamOutput(n int, start, end time.Time) func(time.Time) int {
	b := l.toks
	if b == nil || n <= 0 {
		return func(time.Time) int { return 0 }
	}
	if !end.After(start) {
		b.take(float64(n))
		return func(time.Time) int { return n }
	}
	s := &stream{b: b, n: float64(n), start: start, end: end}
	l.streams = append(l.streams, s)
	return func(t time.Time) int {
		l.sync(t)
		s.n = s.billed
		l.flush(t)
		return int(math.Round(s.billed))
	}
}

// demand is what one request asks of the buckets at admission.
type demand struct {
	tokens float64 // checked against the token bucket (and its short window)
	take   float64 // taken from the token bucket when admitted (≤ tokens)
	input  float64 // ProviderAnthropic: checked against and taken from the input bucket
	output float64 // ProviderAnthropic: checked against and taken from the output bucket
}

// rejection says why a request was refused.
type rejection struct {
	dim        string        // "requests", "tokens", "input_tokens" or "output_tokens"
	retryAfter time.Duration // 0 with never
	never      bool          // the request exceeds a token limit itself
	quantum    bool          // the bucket had room, its current short window did not
	used       int64         // used in the exhausted dimension, for the message
	limit      int64
	requested  int64
}

// admit charges one request, or refuses it (charging the refusal as configured). It
// returns nil when the request may proceed.
func (l *limiter) admit(now time.Time, d demand) *rejection {
	if len(l.buckets()) == 0 {
		return nil
	}
	l.sync(now)
	type dim struct {
		b          *bucket
		name       string
		need, take float64
	}
	var dims []dim
	for _, x := range []dim{{l.reqs, "requests", 1, 1}, {l.toks, "tokens", d.tokens, d.take},
		{l.in, "input_tokens", d.input, d.input}, {l.out, "output_tokens", d.output, d.output}} {
		if x.b != nil {
			dims = append(dims, x)
		}
	}
	var rej *rejection
	for _, x := range dims {
		r := &rejection{dim: x.name, limit: int64(x.b.limit), requested: int64(math.Round(x.need))}
		r.used = int64(x.b.limit) - x.b.remaining()
		switch {
		case x.name != "requests" && x.need > x.b.limit:
			r.never = true
		case x.b.available()+eps < x.need:
		case x.b.quantumWait(now, x.need) > 0:
			r.quantum = true
		default:
			continue
		}
		rej = r
		break
	}
	if rej == nil {
		for _, x := range dims {
			x.b.admitted(x.take)
		}
		return nil
	}
	if l.reqs != nil && !l.cfg.NoChargeRejected {
		l.reqs.admitted(1)
	}
	if l.cfg.ChargeRejectedTokens {
		for _, x := range dims {
			if x.name != "requests" {
				x.b.take(x.take)
			}
		}
	}
	if !rej.never {
		// Retry when every dimension can take the request again, counting the charge
		// the refusal itself just made.
		for _, x := range dims {
			w, _ := x.b.until(now, x.need)
			rej.retryAfter = max(rej.retryAfter, w)
		}
	}
	return rej
}

// charge takes n tokens from the token bucket without a check: a completion billed when
// it ends.
func (l *limiter) charge(now time.Time, n int) {
	if l.toks != nil {
		l.sync(now)
		l.toks.take(float64(n))
	}
}

// refundOutput returns n reserved output tokens to the output bucket (ProviderAnthropic
// adjusts its max_tokens estimate to the actual output when a request ends).
func (l *limiter) refundOutput(now time.Time, n int) {
	if l.out != nil && n > 0 {
		l.sync(now)
		l.out.give(float64(n))
	}
}

// headers writes the rate-limit headers describing the buckets at now, and the Date
// (the engine's clock) that every HTTP server sends and that absolute resets are read
// against. On WireMessages they are Anthropic's only (see WithWire).
func (l *limiter) headers(h http.Header, now time.Time, w Wire) {
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	l.sync(now)
	switch l.cfg.Provider {
	case ProviderSilent:
		return
	case ProviderAnthropic:
		l.anthropicHeaders(h, now)
		return
	}
	dims := []struct {
		name string
		b    *bucket
	}{{"requests", l.reqs}, {"tokens", l.toks}}
	for _, d := range dims {
		if d.b == nil {
			continue
		}
		reset := d.b.untilFull(now)
		if w != WireMessages {
			h.Set("x-ratelimit-limit-"+d.name, strconv.FormatInt(int64(d.b.limit), 10))
			h.Set("x-ratelimit-remaining-"+d.name, strconv.FormatInt(d.b.remaining(), 10))
			h.Set("x-ratelimit-reset-"+d.name, FormatResetDuration(reset))
		}
		if l.cfg.Anthropic || w == WireMessages {
			h.Set("anthropic-ratelimit-"+d.name+"-limit", strconv.FormatInt(int64(d.b.limit), 10))
			h.Set("anthropic-ratelimit-"+d.name+"-remaining", strconv.FormatInt(d.b.remaining(), 10))
			h.Set("anthropic-ratelimit-"+d.name+"-reset", FormatResetTime(now, reset))
		}
	}
}

// anthropicHeaders writes Anthropic's headers: requests, input tokens and output tokens,
// each with limit, remaining and reset (RFC 3339, when the bucket is full again), and
// tokens-* for the most restrictive token bucket now. Token counts remaining are rounded
// to the nearest thousand, as Anthropic documents; the request count is exact.
func (l *limiter) anthropicHeaders(h http.Header, now time.Time) {
	set := func(name string, b *bucket, round bool) {
		rem := b.remaining()
		if round {
			rem = (rem + 500) / 1000 * 1000
		}
		h.Set("anthropic-ratelimit-"+name+"-limit", strconv.FormatInt(int64(b.limit), 10))
		h.Set("anthropic-ratelimit-"+name+"-remaining", strconv.FormatInt(rem, 10))
		h.Set("anthropic-ratelimit-"+name+"-reset", FormatResetTime(now, b.untilFull(now)))
	}
	if l.reqs != nil {
		set("requests", l.reqs, false)
	}
	var tight *bucket
	for _, b := range []*bucket{l.in, l.out} {
		if b == nil {
			continue
		}
		if tight == nil || b.available()/b.limit < tight.available()/tight.limit {
			tight = b
		}
	}
	if l.in != nil {
		set("input-tokens", l.in, true)
	}
	if l.out != nil {
		set("output-tokens", l.out, true)
	}
	if tight != nil {
		set("tokens", tight, true)
	}
}

// retryHeaders writes what the provider model tells a refused client about when to come
// back; on WireMessages, Anthropic's retry-after in whole seconds.
func (l *limiter) retryHeaders(h http.Header, rej *rejection, w Wire) {
	if rej.never {
		return
	}
	d := rej.retryAfter
	secs := strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
	switch {
	case l.cfg.Provider == ProviderSilent:
	case w == WireMessages:
		h.Set("retry-after", secs)
	case l.cfg.Provider == ProviderOpenAI:
		// A token refusal says when only in its message; a request refusal sends
		// retry-after in whole seconds.
		if rej.dim == "requests" {
			h.Set("retry-after", secs)
		}
	case l.cfg.Provider == ProviderStrict || l.cfg.Provider == ProviderAnthropic || l.cfg.Provider == ProviderFixedWindow:
		h.Set("retry-after", secs)
	default:
		retryHeaders(h, d)
	}
}

// FormatResetDuration formats a wait the way OpenAI's x-ratelimit-reset-* headers do:
// "0s", "450ms" below a second, "7.66s" below a minute (hundredths), "2m59.56s" or "6m0s"
// below an hour, "1h2m3s" beyond. It rounds up, so a client that waits the advertised
// time never comes back early; time.ParseDuration reads every form.
func FormatResetDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
	}
	const cs = 10 * time.Millisecond
	d = (d + cs - 1) / cs * cs
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	d -= m * time.Minute
	sec := strconv.FormatFloat(d.Seconds(), 'f', 2, 64)
	sec = strings.TrimSuffix(strings.TrimRight(sec, "0"), ".") + "s"
	switch {
	case h > 0:
		return fmt.Sprintf("%dh%dm%s", h, m, sec)
	case m > 0:
		return fmt.Sprintf("%dm%s", m, sec)
	}
	return sec
}

// FormatResetTime formats now+d as Anthropic's reset headers do: RFC 3339 in UTC, whole
// seconds, rounded up.
func FormatResetTime(now time.Time, d time.Duration) string {
	at := now.Add(max(d, 0))
	if t := at.Truncate(time.Second); !t.Equal(at) {
		at = t.Add(time.Second)
	}
	return at.UTC().Format(time.RFC3339)
}

// retryHeaders writes retry-after (whole seconds, rounded up) and retry-after-ms.
func retryHeaders(h http.Header, d time.Duration) {
	secs := int64((d + time.Second - 1) / time.Second)
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	h.Set("retry-after", strconv.FormatInt(secs, 10))
	h.Set("retry-after-ms", strconv.FormatInt(ms, 10))
}
