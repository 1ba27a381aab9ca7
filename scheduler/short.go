package scheduler

import "time"

// What a 429 teaches a lane whose limits are known: the provider enforces them over short
// windows too. OpenAI documents a per-minute limit as enforced per second (60,000
// requests a minute as 1,000 a second), Anthropic likewise (60 a minute as one a
// second), so a bucket that the headers say has room refuses a burst. Once such a lane
// meets a 429, it admits within any shortWindow at most each known bucket's share of it
// (limit × shortWindow ÷ a minute), or one turn alone into a window that holds none.
// The window slides, so two turns it admits never share a window of the provider's,
// wherever its edges lie.

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
	if !p.on {
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
	case t.requests.limit > 0 && float64(len(p.recent)+1) > t.requests.limit*share:
		why = ReasonRequests
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

// admitted records an admission on a paced lane.
func (p *shortPace) admitted(r reservation, now time.Time) {
	if !p.on {
		return
	}
	p.trim(now)
	p.recent = append(p.recent, shortAdmit{at: now, tokens: r.tokens - r.tail, input: r.input, output: r.output})
}

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
