package scheduler

import (
	"math"
	"sort"
	"time"
)

// bucket is the core's model of one provider rate-limit bucket (requests, tokens, or
// Anthropic's input or output tokens) on one lane, dead-reckoned between responses so
// that no telemetry request is ever needed:
//
//	level(t) = min(limit, level₀ + rate·(t − t₀))
//
// Admitting a turn debits its reservation at once. Completing it either reconciles the
// reservation against the reported usage (no headers) or, when the response carried this
// bucket's remaining count, re-bases the level on that count: the server's remaining
// already includes every turn sent before this one, so those reservations are settled
// without a refund, and the reservations of turns admitted after this one are subtracted
// again because the server may not have seen them yet. The in-flight reservations are
// kept in admission order, so settling is always a prefix and costs O(1) amortised.
// The re-based level forgets the refill between the server's reading and its arrival,
// which only ever errs on the safe side.
type bucket struct {
	cfgPerMin float64 // configured limit per minute; 0 = learn it

	limit float64   // capacity now in force; 0 = unknown
	rate  float64   // refill per second; 0 = unknown
	level float64   // at `at`, when known
	at    time.Time // zero until first used
	known bool
	full  time.Time // when the server last said the bucket is full again

	// The refill rate a reading allows: its remaining count is floored and its reset
	// rounded, so one reading bounds the rate to [lo, hi], and the bounds of all
	// readings since the limit last changed narrow it (hi 0 = no upper bound yet). A
	// continuous bucket's readings always agree; a fixed window's do not (its reset is
	// the window's end, whatever is left), and then fixed is set: nothing refills
	// before the reported reset, and then all of it.
	lo, hi float64
	fixed  bool

	flight  []flight // unsettled reservations in admission order, from fhead
	fhead   int
	pending float64 // sum of the unsettled, unfinished reservations

	// kept are reservations of running turns that a later turn's reading settled but
	// may not count, kept reserved until the turn ends and then reconciled against what
	// it used (see keep). By flight sequence.
	kept    map[uint64]keptRes
	keptSum float64

	recent []ended // turns that ended within the last two arrivalSlacks of admission
}

type flight struct {
	seq  uint64
	amt  float64
	tail float64   // the part of amt reserved for the output of a turn without an output cap
	at   time.Time // when the turn was admitted
	seen time.Time // when the turn's response headers came; zero before
	done bool      // finished and reconciled locally, waiting to leave the front
	// seenLeft is what those headers said was left, when they said (seenRead).
	seenLeft float64
	seenRead bool
}

// arrivalSlack is how much earlier than another a turn must have been admitted to be
// sure to reach the provider first. Turns admitted closer together race to it (each
// goes out on its own connection, and the goroutines sending them may be delayed), so
// a reading of the later one may not count the earlier one.
const arrivalSlack = 100 * time.Millisecond

// ended is a turn that ended recently: a reading of a turn that raced it may not count
// it (see arrivalSlack).
type ended struct {
	seq  uint64
	at   time.Time // admitted
	used float64
	// remaining is what its own reading said was left (when read): a reading that
	// says less came after it and counts it.
	remaining float64
	read      bool
}

// keptRes is a kept reservation: the output tail of a turn whose prompt the reading
// counted, or the whole reservation of a turn the reading may not have seen at all.
type keptRes struct {
	amt   float64
	whole bool
	at    time.Time // when its turn was admitted
	// raced: kept because it raced the reading's turn to the provider; keeper is what
	// that reading said was left. If the turn's own reading says as much or more, it
	// was read no later (a count only falls as requests arrive) and the keeper's
	// reading counted it.
	raced  bool
	keeper float64
}

func newBucket(perMin int) bucket {
	b := bucket{cfgPerMin: float64(perMin)}
	if perMin > 0 {
		b.limit = float64(perMin)
		b.rate = float64(perMin) / 60
		b.level = b.limit
		b.known = true
	}
	return b
}

// levelAt is the dead-reckoned level at now; ok is false when the level is unknown, and
// an unknown level never blocks a turn.
func (b *bucket) levelAt(now time.Time) (lvl float64, ok bool) {
	if !b.known {
		return 0, false
	}
	if b.at.IsZero() {
		return b.level, true
	}
	dt := now.Sub(b.at).Seconds()
	if dt <= 0 {
		return b.level, true
	}
	switch {
	case b.rate > 0 && b.limit > 0:
		return min(b.limit, b.level+b.rate*dt), true
	case b.full.After(b.at) && !now.Before(b.full):
		// The reported reset came after the level was last materialised (turns
		// admitted since then are part of the level). Turns admitted before it and not
		// yet settled may reach a fixed window only after it rolled over: they still
		// count.
		if b.limit > 0 {
			return b.limit - b.pending - b.keptSum, true
		}
		return 0, false // refilled to an unknown capacity
	}
	return b.level, true
}

// advance materialises the level at now.
func (b *bucket) advance(now time.Time) {
	lvl, ok := b.levelAt(now)
	b.level, b.known = lvl, ok
	if b.at.IsZero() || now.After(b.at) {
		b.at = now
	}
}

// fits reports whether need fits at now, and if not, when it will.
func (b *bucket) fits(need float64, now time.Time) (bool, time.Time) {
	lvl, ok := b.levelAt(now)
	if !ok || lvl+1e-6 >= need {
		return true, time.Time{}
	}
	if b.rate > 0 && b.limit > 0 {
		return false, now.Add(refillWait(need-lvl, b.rate))
	}
	if b.full.After(now) {
		return false, b.full
	}
	return false, now.Add(time.Second) // nothing known about the refill: look again soon
}

// refillWait is how long a refill at rate per second takes to add missing, plus a
// millisecond of slack that keeps floating-point rounding from waking the core a hair
// before the level is there. It is at most maxSeconds: a float beyond time.Duration's range
// would convert to a negative wait, a time before now.
func refillWait(missing, rate float64) time.Duration {
	secs := missing / rate
	if !(secs < maxSeconds) { // NaN too
		return maxSeconds * time.Second
	}
	return time.Duration(math.Ceil(secs*1e9)) + time.Millisecond
}

// debit reserves amt for the turn with flight sequence seq, tail of it for the output of
// a turn without an output cap.
func (b *bucket) debit(seq uint64, amt, tail float64, now time.Time) {
	b.advance(now)
	if b.known {
		b.level -= amt
	}
	b.flight = append(b.flight, flight{seq: seq, amt: amt, tail: tail, at: now})
	b.pending += amt
}

// seen records when the response headers of the turn with flight sequence seq came,
// and what they said was left.
func (b *bucket) seen(seq uint64, rl RateLimit, at time.Time) {
	if i := b.find(seq); i >= 0 && b.flight[i].seen.IsZero() {
		f := &b.flight[i]
		f.seen, f.seenLeft, f.seenRead = at, float64(rl.Remaining), rl.HasRemaining
	}
}

// endKept reconciles a finished turn's kept reservation (see keep) against what it used
// — its output for a kept tail, used for a whole one — and reports whether it had one.
func (b *bucket) endKept(seq uint64, rl RateLimit, used, output float64, now time.Time) bool {
	k, ok := b.kept[seq]
	if !ok {
		return false
	}
	delete(b.kept, seq)
	b.keptSum -= k.amt
	if len(b.kept) == 0 {
		b.keptSum = 0
	}
	b.ended(ended{seq: seq, at: k.at, used: used, remaining: float64(rl.Remaining), read: rl.HasRemaining}, now)
	if !k.whole || k.raced && rl.HasRemaining && float64(rl.Remaining) >= k.keeper {
		// Only its output was not counted (a provider may bill it at the end).
		used = output
	}
	b.advance(now)
	if b.known {
		b.level += k.amt - used
		if b.limit > 0 {
			b.level = min(b.level, b.limit)
		}
	}
	return true
}

// keep holds a running turn's reservation (or the tail of it) past a re-base.
func (b *bucket) keep(f flight, k keptRes) {
	if b.kept == nil {
		b.kept = map[uint64]keptRes{}
	}
	k.at = f.at
	b.kept[f.seq] = k
	b.keptSum += k.amt
}

// find returns the index of seq's unsettled reservation, or -1.
func (b *bucket) find(seq uint64) int {
	f := b.flight[b.fhead:]
	i := sort.Search(len(f), func(i int) bool { return f[i].seq >= seq })
	if i < len(f) && f[i].seq == seq {
		return b.fhead + i
	}
	return -1
}

// finish reconciles seq's reservation against the actual usage when the response said
// nothing about this bucket.
func (b *bucket) finish(seq uint64, actual float64, now time.Time) {
	i := b.find(seq)
	if i < 0 || b.flight[i].done {
		return // settled by a later response's headers, which already counted it
	}
	f := &b.flight[i]
	f.done = true
	b.pending -= f.amt
	b.advance(now)
	if b.known {
		b.level += f.amt - actual
		if b.limit > 0 {
			b.level = min(b.level, b.limit)
		}
	}
	b.compact()
}

// early learns from the headers of a response whose turn is still running (a stream's),
// when the bucket knows nothing yet: its limit and rate, and a level taken from the
// remaining count less every reservation still pending. The running turn's own
// reservation counts twice (the provider has charged it already) until the turn ends and
// observe settles it: an estimate on the safe side.
func (b *bucket) early(rl RateLimit, now time.Time) {
	if b.known {
		return
	}
	b.learn(rl, now)
	if rl.HasRemaining {
		b.level, b.known, b.at = float64(rl.Remaining)-b.pending, true, now
	}
}

// learn takes the limit and refill rate a response reports.
func (b *bucket) learn(rl RateLimit, now time.Time) {
	if rl.HasLimit && rl.Limit > 0 {
		l := float64(rl.Limit)
		if b.cfgPerMin > 0 {
			l = min(l, b.cfgPerMin)
		}
		if l != b.limit {
			b.lo, b.hi, b.fixed = 0, 0, false // a new limit: start the rate afresh
		}
		b.limit = l
		// OpenAI and Anthropic report the time until the bucket is full, so the
		// refill rate is what is missing over that time.
		if rl.HasRemaining && !rl.Reset.IsZero() && rl.Limit > rl.Remaining {
			if t := rl.Reset.Sub(now).Seconds(); t > 0 {
				b.sample(float64(rl.Limit-rl.Remaining), t, rl.grain.Seconds(), float64(rl.slack), float64(rl.Limit))
			}
		}
		b.rate = b.refillRate()
		if b.cfgPerMin > 0 {
			b.rate = min(b.rate, b.cfgPerMin/60)
		}
	}
	if !rl.Reset.IsZero() {
		b.full = rl.Reset
	}
}

// fixedSlack is how far a reading's lower bound on the rate may pass another's upper
// bound before the bucket counts as a fixed window rather than rounding beyond the
// reset's stated grain.
const fixedSlack = 1.1

// sample narrows the rate bounds with one reading: missing (limit − remaining) short of
// full, full again in t seconds, the reset rounded to grain (up, as OpenAI's are, or
// down). The remaining count is floored, so the level was in [remaining, remaining + 1)
// (+ slack for a count rounded to coarser units): missing − 1 − slack < what refills ≤
// missing, over a time in (t − grain, t + grain). A
// remaining count of 0 bounds nothing from above: the level may be below zero (refused
// requests charged, completions billed after they were admitted), and the refill then
// needs more than the limit.
func (b *bucket) sample(missing, t, grain, slack, limit float64) {
	if grain <= 0 {
		grain = 0.01
	}
	b.lo = max(b.lo, (missing-1-slack)/(t+grain))
	if t > grain && missing < limit {
		if hi := missing / (t - grain); b.hi == 0 || hi < b.hi {
			b.hi = hi
		}
	}
	if b.hi > 0 && b.lo > fixedSlack*b.hi {
		b.fixed = true
	}
}

// refillRate is the rate the level is dead-reckoned with: none for a fixed window (it
// refills at its reset), else a limit per minute, OpenAI's and Anthropic's unit, as long
// as the readings allow it, else the nearest rate they allow.
func (b *bucket) refillRate() float64 {
	if b.fixed || b.limit <= 0 {
		return 0
	}
	r := max(b.limit/60, b.lo)
	if b.hi > 0 {
		r = min(r, b.hi)
	}
	return r
}

// observe learns the limit and refill rate from a response and, when it reports the
// remaining count and seq's reservation is still unsettled, re-bases the level on it, as
// of readAt, when the reading was taken (a stream's headers come with its first token,
// long before its end; the refill since then counts).
// unread is what the turn used that the reading may not count yet: the output of a turn
// without an output cap whose headers came before its end (a stream's), which a
// provider that charges the completion at its end charges after them.
func (b *bucket) observe(seq uint64, rl RateLimit, actual, unread float64, readAt, now time.Time) (charge float64, alone bool) {
	b.learn(rl, now)
	if !rl.HasRemaining {
		b.finish(seq, actual, now)
		return 0, false
	}
	i := b.find(seq)
	if i < 0 {
		// An older reading than the one the level is already based on.
		if !b.known {
			b.level, b.known, b.at = float64(rl.Remaining)-b.pending, true, now
		}
		return 0, false
	}
	charge, alone = b.charged(i, rl, readAt, now)
	early := readAt.Before(now)
	race, self := arrivalSlack, b.flight[i]
	// A count of zero says only that nothing is left: the level may be far below zero
	// (a completion billed at its end beyond its reservation, refusals charged), so the
	// reading may not raise the level above what dead reckoning, with this turn's own
	// reservation reconciled, says. A count above zero is taken as the level.
	reckoned, known := b.levelAt(now)
	floored := known && rl.Remaining <= 0
	reckoned += self.amt - actual
	for j := b.fhead; j <= i; j++ {
		f := b.flight[j]
		if f.done {
			continue
		}
		b.pending -= f.amt
		switch {
		case j == i:
		case early && (f.seen.IsZero() || f.seen.After(readAt)):
			// Admitted first but still running and not heard from by the time of an
			// early reading (a stream's first token): its request may have reached the
			// provider after the reading was taken.
			b.keep(f, keptRes{amt: f.amt, whole: true})
		case f.at.After(self.at.Add(-race)) && (f.seen.IsZero() || f.seenRead && f.seenLeft < float64(rl.Remaining)):
			// Admitted just before this turn and still running: it raced this turn
			// to the provider, and its headers, if they came, said less was left (a
			// count only falls as requests arrive): it may have lost.
			b.keep(f, keptRes{amt: f.amt, whole: true, raced: true, keeper: float64(rl.Remaining)})
		case f.tail > 0:
			// Still running: the reading counted its prompt, maybe not its output.
			b.keep(f, keptRes{amt: f.tail})
		}
	}
	b.fhead = i + 1
	b.compact()
	// Turns admitted just before this one that have ended already are settled, but the
	// reading may have been taken before they arrived: unless their own reading said as
	// much or more was left (it was taken no later), they count again.
	var raced float64
	for _, e := range b.recent {
		if e.seq < seq && e.at.After(self.at.Add(-race)) && !(e.read && e.remaining >= float64(rl.Remaining)) {
			raced += e.used
		}
	}
	b.ended(ended{seq: seq, at: self.at, used: actual, remaining: float64(rl.Remaining), read: true}, now)
	b.level = float64(rl.Remaining) - unread - b.pending - b.keptSum - raced
	if b.limit > 0 {
		b.level = min(b.level, b.limit)
	}
	b.known = true
	b.at = now
	if readAt.Before(now) {
		b.at = readAt
	}
	if floored {
		if lvl, _ := b.levelAt(now); reckoned < lvl {
			b.level, b.at = reckoned, now
		}
	}
	return charge, alone && raced == 0
}

// charged is what the provider charged the turn of flight i by the time of its reading
// rl (taken at readAt), when the reading can tell: the turn ran alone (no other
// reservation unsettled or kept, none admitted after it), so the fall from the level
// the bucket had without it to the count the reading says is left is its charge alone.
// A bucket that knew nothing yet is taken to have been full. A provider that charges
// only what a turn uses shows its usage; one that reserves a completion's longest output
// at arrival, and keeps it, shows more (see lane.upOut).
func (b *bucket) charged(i int, rl RateLimit, readAt, now time.Time) (float64, bool) {
	if i != b.fhead || i != len(b.flight)-1 || len(b.kept) > 0 || rl.slack > 0 || rl.Remaining <= 0 || b.limit <= 0 {
		return 0, false
	}
	before := b.limit
	if b.known {
		lvl, _ := b.levelAt(now)
		before = min(b.limit, lvl+b.flight[i].amt)
		if b.rate > 0 && readAt.Before(now) && before < b.limit {
			before -= b.rate * now.Sub(readAt).Seconds() // the refill came after the reading
		}
	}
	return before - float64(rl.Remaining), true
}

// ended records a turn that ended, and forgets those admitted too long ago for any
// reading still to come to have raced them.
func (b *bucket) ended(e ended, now time.Time) {
	keep := b.recent[:0]
	for _, r := range b.recent {
		if r.at.After(now.Add(-2 * arrivalSlack)) {
			keep = append(keep, r)
		}
	}
	b.recent = keep
	if e.at.After(now.Add(-2*arrivalSlack)) && e.used > 0 {
		b.recent = append(b.recent, e)
	}
}

// compact drops finished reservations from the front and reclaims the slice.
func (b *bucket) compact() {
	for b.fhead < len(b.flight) && b.flight[b.fhead].done {
		b.fhead++
	}
	if b.fhead == len(b.flight) {
		b.flight, b.fhead = b.flight[:0], 0
	} else if b.fhead > 64 && b.fhead > len(b.flight)/2 {
		n := copy(b.flight, b.flight[b.fhead:])
		b.flight, b.fhead = b.flight[:n], 0
	}
	if len(b.flight) == 0 {
		b.pending = 0 // no drift from float sums
	}
}
