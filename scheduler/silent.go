package scheduler

import (
	"time"
)

// What 429s alone teach. A provider that reports no rate limits at all (a local vLLM or
// Ollama behind a gateway that limits without saying so) leaves every bucket of its lane
// unknown, and a 429 names no time: paused for RateLimitBackup, the lane sent its whole
// queue again at once and met as many 429s as it had turns, until the turns gave up
// (bench/hosted's silent model: 847 × 429 and 94 of 96 calls failed at 16 × 6).
//
// A lane is silent from the first 429 that carries no rate-limit information while no
// limit is known. Until then nothing is paced (a local engine that never refuses is
// never slowed). A silent lane paces its admissions: at most reqRate turns and tokRate
// tokens a second, spaced evenly (a per-minute budget may be enforced over one-second
// windows, so a burst is what a silent provider refuses first). Each 429 of a turn sent
// since the last cut halves both, from the lesser of the paced rates and what the lane
// sent over the last silentWindow; a 429 of a turn sent before it (a burst's turns
// come back one after another) teaches nothing new. An answer raises them by a
// sixteenth towards 85% of the rates the last 429 refused, never past: once a 429 has
// shown where the provider's limit lies, the lane stays below it.
//
// A reading that names a limit ends it: the buckets then know better.

// silentWindow is how far back the rates a 429 halves are measured.
const silentWindow = 10 * time.Second

// silentCeiling is the part of the last refused rate that the rates grow back to.
const silentCeiling = 0.85

// silentGrowth is how much each answer raises the rates, as a part of themselves.
const silentGrowth = 1.0 / 16

// silentPace is a silent lane's pacing.
type silentPace struct {
	on               bool    // the lane is silent
	reqRate, tokRate float64 // per second; 0 = not paced (no 429 yet)
	reqCeil, tokCeil float64 // the rates the last 429 halved
	cutAt            uint64  // the lane's last flight at the last cut
	nextReq, nextTok time.Time
	recent           []silentAdmit // admissions within silentWindow, oldest first
}

type silentAdmit struct {
	at     time.Time
	tokens float64
}

// heard ends a lane's silence once a reading names a limit: its buckets then know
// better.
func (t *lane) heard(tel Telemetry) {
	if t.silent.on && !tel.Empty() && t.limitsKnown() {
		t.silent = silentPace{}
	}
}

// limitsKnown reports whether any of t's buckets knows its limit.
func (t *lane) limitsKnown() bool {
	return t.requests.limit > 0 || t.tokens.limit > 0 || t.inTokens.limit > 0 || t.outTokens.limit > 0
}

// paced reports when the next turn may go out on a silent lane (zero = now), and which
// rate holds it.
func (p *silentPace) paced(now time.Time) (time.Time, string) {
	if !p.on {
		return time.Time{}, ""
	}
	at, why := p.nextReq, ReasonRequests
	if p.tokRate > 0 && p.nextTok.After(at) {
		at, why = p.nextTok, ReasonTokens
	}
	if !at.After(now) {
		return time.Time{}, ""
	}
	return at, why
}

// admitted records an admission of tokens at now on a lane that knows no limit (a 429
// may come before any answer marks it silent) and, on a silent one, spaces the next.
func (p *silentPace) admitted(tokens float64, now time.Time) {
	p.trim(now)
	p.recent = append(p.recent, silentAdmit{at: now, tokens: tokens})
	if p.reqRate > 0 {
		p.nextReq = later(p.nextReq, now).Add(secs(1 / p.reqRate))
	}
	if p.tokRate > 0 {
		p.nextTok = later(p.nextTok, now).Add(min(secs(tokens/p.tokRate), maxTokSpacing))
	}
}

// refused learns from a 429 at now: the rates halve, from the lesser of the paced rates
// and what the lane admitted over the last silentWindow.
//
// A 429 of a turn admitted before the last cut (flight ≤ cutAt: sent at the old rate,
// as a burst's turns come back one after another) teaches nothing new.
func (p *silentPace) refused(flight, last uint64, now time.Time) {
	p.on = true
	if p.reqRate > 0 && flight <= p.cutAt {
		return
	}
	p.cutAt = last
	p.trim(now)
	// The rates that were refused: what went out over the last silentWindow, or the
	// paced rates where less went out (a thin queue does not use its pace).
	span := silentWindow
	if len(p.recent) > 0 {
		span = min(span, max(time.Second, now.Sub(p.recent[0].at)))
	}
	var toks float64
	for _, a := range p.recent {
		toks += a.tokens
	}
	req, tok := max(float64(len(p.recent)), 1)/span.Seconds(), toks/span.Seconds()
	if p.reqRate > 0 {
		req = min(req, p.reqRate)
	}
	if p.tokRate > 0 {
		tok = min(tok, p.tokRate)
	}
	p.reqCeil, p.tokCeil = req, tok
	p.reqRate, p.tokRate = max(req/2, minSilentRate), tok/2
	// The next turn, the retried one too, waits a whole spacing from the 429.
	p.nextReq, p.nextTok = now.Add(secs(1/p.reqRate)), now
}

// minSilentRate is the least request rate a silent lane is paced at: one a minute.
const minSilentRate = 1.0 / 60

// answered raises the rates after a successful answer, towards the ceiling.
func (p *silentPace) answered() {
	if !p.on || p.reqRate == 0 {
		return
	}
	p.reqRate = min(p.reqRate*(1+silentGrowth), max(silentCeiling*p.reqCeil, p.reqRate))
	if p.tokRate > 0 {
		p.tokRate = min(p.tokRate*(1+silentGrowth), max(silentCeiling*p.tokCeil, p.tokRate))
	}
}

func (p *silentPace) trim(now time.Time) {
	p.recent = trimOlder(p.recent, func(a silentAdmit) time.Time { return a.at }, now, silentWindow)
}

// secs is a duration of s seconds, at most maxSeconds.
func secs(s float64) time.Duration {
	if !(s < maxSeconds) {
		s = maxSeconds
	}
	return time.Duration(s * float64(time.Second))
}

// maxTokSpacing bounds the wait one turn's tokens add.
const maxTokSpacing = 5 * time.Second
