package scheduler

import (
	"math"
	"time"
)

// Providers enforce their per-minute limits over short windows too. OpenAI documents a
// per-minute limit as enforced per second (60,000 requests a minute as 1,000 a second),
// Anthropic likewise (60 a minute as one a second), so a bucket that the headers say has
// room refuses a burst. A lane admits within any shortWindow at most each known bucket's
// share of it (limit × shortWindow ÷ a minute), or one turn alone into a window that
// holds none. The window slides, so two turns it admits never share a window of the
// provider's, wherever its edges lie.
//
// Requests are paced so from the start, once their limit is known (at their refill rate
// over the window where that is faster than a minute's share: a limit that refills in
// ten seconds is no per-minute limit): a burst of requests beyond a second's share is
// what a quantized provider refuses first, and holding it costs little (the turns of a
// burst are spread over a second or a few). Tokens are paced so only once the lane met a
// 429 though its buckets had room: holding a full bucket's burst of tokens over a
// minute would cost up to that minute where the provider does not quantize them.

// shortWindow is the provider's short enforcement window.
const shortWindow = time.Second

// shortPace is a lane's short-window pacing.
type shortPace struct {
	on     bool
	recent []shortAdmit // admissions within the last shortWindow, oldest first
}

type shortAdmit struct {
	at                    time.Time
	tokens, input, output float64
}

// shortFits reports whether r may go out at now under the short windows, and if not,
// when the oldest admission of the window leaves it and which budget is short.
func (t *lane) shortFits(r reservation, now time.Time) (bool, time.Time, string) {
	p := &t.short
	if !p.on && t.requests.limit <= 0 {
		return true, time.Time{}, ""
	}
	p.trim(now)
	if len(p.recent) == 0 {
		return true, time.Time{}, ""
	}
	var toks, in, out float64
	for _, a := range p.recent {
		toks += a.tokens
		in += a.input
		out += a.output
	}
	share := shortWindow.Seconds() / 60
	why := ""
	switch {
	case t.requests.limit > 0 && float64(len(p.recent)+1) > t.requestShare()+1e-9:
		why = ReasonRequests
	case !p.on:
		return true, time.Time{}, "" // tokens are paced only after a 429
	case t.tokens.limit > 0 && toks+r.tokens-r.tail > t.tokens.limit*share:
		why = ReasonTokens
	case t.inTokens.limit > 0 && in+r.input > t.inTokens.limit*share:
		why = ReasonInputTokens
	case t.outTokens.limit > 0 && out+r.output > t.outTokens.limit*share:
		why = ReasonOutputTokens
	default:
		return true, time.Time{}, ""
	}
	return false, p.recent[0].at.Add(shortWindow + time.Millisecond), why
}

// requestShare is how many requests a lane whose request limit is known admits within a
// shortWindow: the limit's share of it, or its refill over it where that is more (a
// limit that refills in ten seconds is no per-minute limit).
func (t *lane) requestShare() float64 {
	return max(t.requests.limit*shortWindow.Seconds()/60, t.requests.rate*shortWindow.Seconds())
}

// admitted records an admission. Until a 429 turns the pacing of tokens on, only as many
// admissions are kept as the requests' rule counts (at least shortKeep, so that the turn
// admitted before the limit was known counts once it is): a fan-out on a lane with no
// known limit keeps no list longer than that.
func (t *lane) admitted(r reservation, now time.Time) {
	p := &t.short
	p.trim(now)
	if keep := max(shortKeep, int(math.Ceil(t.requestShare()))+1); !p.on && len(p.recent) >= keep {
		p.recent = append(p.recent[:0], p.recent[len(p.recent)-keep+1:]...)
	}
	p.recent = append(p.recent, shortAdmit{at: now, tokens: r.tokens - r.tail, input: r.input, output: r.output})
}

// shortKeep is the fewest admissions a lane keeps before its first 429.
const shortKeep = 64

func (p *shortPace) trim(now time.Time) {
	p.recent = trimOlder(p.recent, func(a shortAdmit) time.Time { return a.at }, now, shortWindow)
}

// trimOlder drops the leading entries of s, oldest first, that are at least window older
// than now, reusing s's array.
func trimOlder[T any](s []T, at func(T) time.Time, now time.Time, window time.Duration) []T {
	i := 0
	for i < len(s) && now.Sub(at(s[i])) >= window {
		i++
	}
	if i == 0 {
		return s
	}
	n := copy(s, s[i:])
	clear(s[n:])
	return s[:n]
}
