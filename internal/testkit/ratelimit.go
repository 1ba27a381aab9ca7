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
	// headers (RFC 3339 resets) next to the x-ratelimit-* ones.
	Anthropic bool
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

func (b *bucket) rate() float64 { return b.limit / float64(b.period) } // per nanosecond

func (b *bucket) sync(now time.Time) {
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
// while empty), at most one full window deep.
func (b *bucket) take(n float64) {
	if b.fixed {
		b.used += n
		return
	}
	b.level = math.Max(-b.limit, b.level-n)
}

// until returns how long until n is available, after sync(now); ok is false when n
// exceeds the limit and waiting can never help.
func (b *bucket) until(now time.Time, n float64) (time.Duration, bool) {
	if n > b.limit+eps {
		return 0, false
	}
	if b.available()+eps >= n {
		return 0, true
	}
	if b.fixed {
		return b.window.Add(b.period).Sub(now), true
	}
	return time.Duration(math.Ceil((n - b.level) / b.rate())), true
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

// limiter holds the engine's two buckets.
type limiter struct {
	cfg  Limits
	reqs *bucket
	toks *bucket
}

func newLimiter(cfg Limits, now time.Time) *limiter {
	if cfg.Period <= 0 {
		cfg.Period = time.Minute
	}
	epoch := cfg.Epoch
	if epoch.IsZero() {
		epoch = now
	}
	return &limiter{
		cfg:  cfg,
		reqs: newBucket(cfg.RPM, cfg.Period, cfg.Window, now, epoch),
		toks: newBucket(cfg.TPM, cfg.Period, cfg.Window, now, epoch),
	}
}

// rejection says why a request was refused.
type rejection struct {
	dim        string        // "requests" or "tokens"
	retryAfter time.Duration // 0 with never
	never      bool          // the request exceeds the token limit itself
	used       int64         // used in the exhausted dimension, for the message
	limit      int64
	requested  int64
}

// admit charges one request of cost tokens, or refuses it (charging the refusal as
// configured). It returns nil when the request may proceed.
func (l *limiter) admit(now time.Time, cost int) *rejection {
	if l.reqs == nil && l.toks == nil {
		return nil
	}
	for _, b := range []*bucket{l.reqs, l.toks} {
		if b != nil {
			b.sync(now)
		}
	}
	c := float64(cost)
	var rej *rejection
	switch {
	case l.reqs != nil && l.reqs.available()+eps < 1:
		rej = &rejection{dim: "requests", limit: int64(l.reqs.limit), requested: 1}
		rej.used = int64(l.reqs.limit) - l.reqs.remaining()
	case l.toks != nil && c > l.toks.limit:
		rej = &rejection{dim: "tokens", never: true, limit: int64(l.toks.limit), requested: int64(cost)}
		rej.used = int64(l.toks.limit) - l.toks.remaining()
	case l.toks != nil && l.toks.available()+eps < c:
		rej = &rejection{dim: "tokens", limit: int64(l.toks.limit), requested: int64(cost)}
		rej.used = int64(l.toks.limit) - l.toks.remaining()
	}
	if rej == nil {
		if l.reqs != nil {
			l.reqs.take(1)
		}
		if l.toks != nil {
			l.toks.take(c)
		}
		return nil
	}
	if l.reqs != nil && !l.cfg.NoChargeRejected {
		l.reqs.take(1)
	}
	if l.toks != nil && l.cfg.ChargeRejectedTokens {
		l.toks.take(c)
	}
	if !rej.never {
		// Retry when both dimensions can take the request again, counting the charge
		// the refusal itself just made.
		if l.reqs != nil {
			d, _ := l.reqs.until(now, 1)
			rej.retryAfter = max(rej.retryAfter, d)
		}
		if l.toks != nil {
			d, _ := l.toks.until(now, c)
			rej.retryAfter = max(rej.retryAfter, d)
		}
	}
	return rej
}

// charge takes n tokens from the token bucket without a check: a completion billed when
// it ends.
func (l *limiter) charge(now time.Time, n int) {
	if l.toks != nil {
		l.toks.sync(now)
		l.toks.take(float64(n))
	}
}

// headers writes the rate-limit headers describing the buckets at now, and the Date
// (the engine's clock) that every HTTP server sends and that absolute resets are read
// against.
func (l *limiter) headers(h http.Header, now time.Time) {
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	dims := []struct {
		name string
		b    *bucket
	}{{"requests", l.reqs}, {"tokens", l.toks}}
	for _, d := range dims {
		if d.b == nil {
			continue
		}
		d.b.sync(now)
		reset := d.b.untilFull(now)
		h.Set("x-ratelimit-limit-"+d.name, strconv.FormatInt(int64(d.b.limit), 10))
		h.Set("x-ratelimit-remaining-"+d.name, strconv.FormatInt(d.b.remaining(), 10))
		h.Set("x-ratelimit-reset-"+d.name, FormatResetDuration(reset))
		if l.cfg.Anthropic {
			h.Set("anthropic-ratelimit-"+d.name+"-limit", strconv.FormatInt(int64(d.b.limit), 10))
			h.Set("anthropic-ratelimit-"+d.name+"-remaining", strconv.FormatInt(d.b.remaining(), 10))
			h.Set("anthropic-ratelimit-"+d.name+"-reset", FormatResetTime(now, reset))
		}
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
