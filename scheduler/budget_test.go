package scheduler

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestEstimator(t *testing.T) {
	cfg := Config{}.withDefaults()
	tests := []struct {
		name       string
		residuals  []float64 // actual − 1000
		wantCorr   float64   // corrected(1000)
		wantMargin float64   // margin(1000)
	}{
		{name: "no data: k × 27 % of the estimate", wantCorr: 1000, wantMargin: 2 * 0.27 * 1000},
		{name: "few samples: still the fallback spread, bias corrected",
			residuals: []float64{200, 200, 200}, wantCorr: 1200, wantMargin: 540},
		{name: "a constant bias is corrected, no margin needed",
			residuals: repeat(200, 10), wantCorr: 1200, wantMargin: 0},
		{name: "spread: max(quantile above ε, k·σ)",
			residuals: ramp(30), wantCorr: 1026, wantMargin: 2 * math.Sqrt(899.0/12)},
		{name: "skew: two large misses in thirty set the quantile, above k·σ",
			residuals: append([]float64{1000, 1000}, repeat(0, 28)...), wantCorr: 1000, wantMargin: 1000},
		{name: "recent misses: ε takes the bias, k·σ the rest",
			residuals: append(repeat(0, 27), 900, 900, 900), wantCorr: 1000 + 450, wantMargin: 2 * 270},
		{name: "window forgets old errors",
			residuals: append(repeat(5000, 10), repeat(100, 30)...), wantCorr: 1100, wantMargin: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := estimator{cfg: &cfg}
			for _, r := range tt.residuals {
				e.record(1000, 1000+r)
			}
			if got := e.corrected(1000); !near(got, tt.wantCorr) {
				t.Errorf("corrected = %v, want %v", got, tt.wantCorr)
			}
			if got := e.margin(1000, t0); !near(got, tt.wantMargin) {
				t.Errorf("margin = %v, want %v", got, tt.wantMargin)
			}
		})
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func ramp(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}

func TestEstimatorBumpDecays(t *testing.T) {
	cfg := Config{}.withDefaults()
	e := estimator{cfg: &cfg}
	for i := 0; i < 10; i++ {
		e.record(1000, 1000) // σ 0: spread is 5 % of the estimate
	}
	if m := e.margin(1000, t0); m != 0 {
		t.Fatalf("margin %v", m)
	}
	e.raise(t0)
	e.raise(t0)
	if m := e.margin(1000, t0); !near(m, 100) {
		t.Fatalf("after two 429s margin %v, want 2 × 50", m)
	}
	if m := e.margin(1000, t0.Add(cfg.MarginHalfLife)); !near(m, 50) {
		t.Fatalf("after one half-life margin %v, want 50", m)
	}
	for i := 0; i < 10; i++ {
		e.raise(t0)
	}
	if m := e.margin(1000, t0); !near(m, cfg.MarginBumpMax*50) {
		t.Fatalf("capped margin %v", m)
	}
}

func TestBucketDeadReckoning(t *testing.T) {
	b := newBucket(6000) // 100 tokens/s
	b.debit(1, 5000, 0, t0)
	if lvl, _ := b.levelAt(t0.Add(10 * time.Second)); !near(lvl, 2000) {
		t.Fatalf("level after 10 s = %v, want 2000", lvl)
	}
	if lvl, _ := b.levelAt(t0.Add(time.Hour)); !near(lvl, 6000) {
		t.Fatalf("level caps at the limit, got %v", lvl)
	}
	fit, at := b.fits(3000, t0)
	if fit || !at.Equal(t0.Add(20*time.Second+time.Millisecond)) {
		t.Fatalf("fits(3000) = %v, %v", fit, at)
	}
	// Reconcile: the turn used 4,000 of its 5,000; 1,000 comes back.
	b.finish(1, 4000, t0)
	if lvl, _ := b.levelAt(t0); !near(lvl, 2000) {
		t.Fatalf("after refund level %v", lvl)
	}
	b.finish(1, 4000, t0) // twice is harmless
	if lvl, _ := b.levelAt(t0); !near(lvl, 2000) || b.pending != 0 {
		t.Fatalf("second finish changed level %v pending %v", lvl, b.pending)
	}
}

// A response's remaining count re-bases the level: reservations admitted before it are
// settled (the server counted them), later ones are still subtracted, and an older
// response arriving afterwards changes nothing.
func TestBucketSettlesOnHeaders(t *testing.T) {
	b := newBucket(0)
	if _, known := b.levelAt(t0); known {
		t.Fatal("unconfigured bucket claims a level")
	}
	b.debit(1, 100, 0, sec(-2)) // long enough before turn 2 to have reached the server first
	b.debit(2, 200, 0, t0)
	b.debit(3, 300, 0, t0)
	reading := RateLimit{Limit: 6000, Remaining: 4000, HasLimit: true, HasRemaining: true, Reset: t0.Add(20 * time.Second)}
	b.observe(2, reading, 180, 0, t0, t0)
	if lvl, ok := b.levelAt(t0); !ok || !near(lvl, 3700) {
		t.Fatalf("level %v (known %v), want 4000 − 300", lvl, ok)
	}
	if !near(b.rate, 100) || b.limit != 6000 {
		t.Fatalf("learned rate %v limit %v, want 100/s and 6000", b.rate, b.limit)
	}
	b.observe(1, RateLimit{Remaining: 10, HasRemaining: true}, 90, 0, t0, t0) // stale
	b.finish(1, 90, t0)
	if lvl, _ := b.levelAt(t0); !near(lvl, 3700) {
		t.Fatalf("stale reading moved the level to %v", lvl)
	}
	b.observe(3, RateLimit{Remaining: 3500, HasRemaining: true}, 300, 0, t0.Add(time.Second), t0.Add(time.Second))
	if lvl, _ := b.levelAt(t0.Add(time.Second)); !near(lvl, 3500) || b.pending != 0 || len(b.flight) != 0 {
		t.Fatalf("level %v pending %v flight %d", lvl, b.pending, len(b.flight))
	}
}

// Without a limit or rate, the bucket waits for the reported reset and then no longer
// claims to know its level.
func TestBucketUnknownRefill(t *testing.T) {
	b := newBucket(0)
	b.debit(1, 10, 0, t0)
	b.observe(1, RateLimit{Remaining: 0, HasRemaining: true, Reset: t0.Add(45 * time.Second)}, 10, 0, t0, t0)
	fit, at := b.fits(10, t0)
	if fit || !at.Equal(t0.Add(45*time.Second)) {
		t.Fatalf("fits = %v, %v", fit, at)
	}
	if fit, _ := b.fits(10, t0.Add(45*time.Second)); !fit {
		t.Fatal("still blocked after the reset")
	}
}

func TestIndexHeap(t *testing.T) {
	type item struct{ v, i int }
	h := indexHeap[*item]{less: func(a, b *item) bool { return a.v < b.v }, setIdx: func(x *item, i int) { x.i = i }}
	items := make([]*item, 200)
	for i := range items {
		items[i] = &item{v: (i * 7919) % 200}
		h.Push(items[i])
	}
	for i := 0; i < 200; i += 3 {
		h.Remove(items[i].i)
		if items[i].i != -1 {
			t.Fatal("removed item keeps an index")
		}
	}
	items[1].v = -5
	h.Fix(items[1].i)
	prev := math.MinInt
	for h.Len() > 0 {
		x := h.Pop()
		if x.v < prev {
			t.Fatalf("out of order: %d after %d", x.v, prev)
		}
		prev = x.v
	}
}

// A turn without an output cap reserves a high quantile of the lane's recent
// completions for its output, but starts once its prompt fits (a provider billing the
// completion when it ends lets it in); the output reserve holds back the next turn until
// the turn ends and its actual output is refunded against it.
func TestUncappedTurnReservesOutputQuantile(t *testing.T) {
	c := NewCore(Config{FallbackSpread: 1e-9, OutputHeadroom: 1, Lanes: map[string]LaneConfig{testLane: {TPM: 6000}}})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	c.Complete(1, Result{Status: StatusOK, Usage: agent.Usage{Input: 100, Output: 400}}, sec(0)) // level 5500
	// Prompt 5300 fits 5500; with its 400 output reserve it would not.
	if got := ids(c.Submit(mkJob(2, "b", "u", "i", 5300), sec(0)), ActAdmit); !slices.Equal(got, []TurnID{2}) {
		t.Fatalf("admitted %v, want the turn whose prompt fits", got)
	}
	// Level −200 with the reserve: a 100-token prompt waits for 300 tokens, 3 s.
	w, found := find(c.Submit(mkJob(3, "c", "u", "i", 100), sec(0)), ActWait)
	if !found || w.ID != 3 || w.Until.Before(sec(3.001)) || !w.Until.Before(sec(3.002)) {
		t.Fatalf("third turn: wait %+v (found %v), want until 3.001 s", w, found)
	}
	// Turn 2 ends at 1 s with 50 tokens of output: 350 come back, level 250.
	if got := ids(c.Complete(2, Result{Status: StatusOK, Usage: agent.Usage{Input: 5300, Output: 50}}, sec(1)), ActAdmit); !slices.Equal(got, []TurnID{3}) {
		t.Fatalf("admitted %v when the reserve came back, want #3", got)
	}
}

// A provider that refuses an uncapped turn admitted on its prompt alone wants the output
// to fit up front: after that 429 the lane's uncapped turns wait for their whole reserve.
func TestUncappedTurnRefusedMakesOutputUpfront(t *testing.T) {
	c := NewCore(Config{FallbackSpread: 1e-9, OutputHeadroom: 1, Lanes: map[string]LaneConfig{testLane: {TPM: 6000}}})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	c.Complete(1, Result{Status: StatusOK, Usage: agent.Usage{Input: 100, Output: 1000}}, sec(0)) // level 4900
	c.Submit(mkJob(2, "b", "u", "i", 100), sec(0))
	c.Complete(2, Result{Status: StatusRateLimited}, sec(0)) // pauses the lane 1 s
	c.Cancel(2, sec(0))
	// At 1 s the level is 5000: the prompt of 4800 fits, with its 1000 reserve it does not.
	acts := c.Submit(mkJob(3, "c", "u", "i", 4800), sec(1))
	if _, waits := find(acts, ActWait); !waits {
		t.Fatalf("want a wait for the output reserve: %s", dump(acts))
	}
}

// A stream's reading comes with its first token: the re-based level counts the refill
// since then and takes off the turn's own output, which the provider bills at the end.
// A later reading settles an earlier running uncapped turn's prompt but keeps its output
// reserve until that turn ends.
func TestBucketStreamReadings(t *testing.T) {
	b := newBucket(6000) // 100 tokens a second
	b.debit(1, 1500, 200, t0)
	b.debit(2, 1500, 200, t0)
	// Turn 1's stream started before turn 2's, its prompt (1300) charged.
	b.seen(1, RateLimit{Limit: 6000, HasLimit: true, Remaining: 4700, HasRemaining: true}, sec(0.5))
	// Turn 2's stream starts at 1 s: the provider has charged both prompts (1300 each).
	b.observe(2, RateLimit{Limit: 6000, HasLimit: true, Remaining: 3500, HasRemaining: true}, 1380, 80, sec(1), sec(3))
	// 3500 − 80 (turn 2's output) − 200 (turn 1's output reserve), plus 2 s of refill.
	if lvl, _ := b.levelAt(sec(3)); !near(lvl, 3420) {
		t.Fatalf("level %v, want 3420", lvl)
	}
	// Turn 1 ends at 3 s with 50 tokens of output: 150 of its reserve come back.
	if !b.endKept(1, RateLimit{}, 1350, 50, sec(3)) {
		t.Fatal("turn 1's output reserve was not kept")
	}
	if lvl, _ := b.levelAt(sec(3)); !near(lvl, 3570) || b.keptSum != 0 {
		t.Fatalf("level %v kept %v, want 3570 and none", lvl, b.keptSum)
	}
}

// An early reading (a stream's first token) may come before the request of a turn
// admitted earlier reaches the provider: that turn, not heard from by then, keeps its
// whole reservation until it ends.
func TestBucketEarlyReadingKeepsUnseenTurns(t *testing.T) {
	b := newBucket(6000)
	b.debit(1, 1500, 0, t0)
	b.debit(2, 1500, 0, t0)
	// Turn 2's stream starts at 1 s; the provider has seen only its prompt (1300).
	b.observe(2, RateLimit{Limit: 6000, HasLimit: true, Remaining: 4700, HasRemaining: true}, 1400, 0, sec(1), sec(3))
	if lvl, _ := b.levelAt(sec(3)); !near(lvl, 3400) { // 4700 − 1500 kept + 200 refill
		t.Fatalf("level %v, want 3400", lvl)
	}
	if !b.endKept(1, RateLimit{}, 1400, 100, sec(3)) {
		t.Fatal("turn 1's reservation was not kept")
	}
	if lvl, _ := b.levelAt(sec(3)); !near(lvl, 3500) {
		t.Fatalf("level %v after turn 1 used 1400 of its 1500, want 3500", lvl)
	}
}

// A floored remaining count and a rounded reset bound the refill rate; readings that
// cannot come from one continuous bucket mark a fixed window, which refills only at its
// reported reset, and turns admitted after that reset stay debited.
func TestBucketRateBoundsAndFixedWindows(t *testing.T) {
	rl := func(remaining int64, reset float64) RateLimit {
		return RateLimit{Limit: 30, HasLimit: true, Remaining: remaining, HasRemaining: true,
			Reset: sec(reset), grain: 10 * time.Millisecond}
	}
	// Continuous, 0.5 a second: remaining 0 with the level anywhere in [0, 1).
	b := newBucket(0)
	b.learn(rl(0, 59.2), t0)
	b.learn(rl(0, 58.05), t0)
	if !near(b.rate, 0.5) || b.fixed {
		t.Fatalf("continuous readings: rate %v fixed %v, want 0.5 (a limit per minute, within the bounds)", b.rate, b.fixed)
	}
	// A limit per minute the readings rule out: the nearest rate they allow.
	b = newBucket(0)
	b.learn(rl(0, 10), t0) // refills at least 29 in 10.01 s
	if !near(b.rate, 29/10.01) || b.fixed {
		t.Fatalf("rate %v fixed %v, want the lower bound 29 / 10.01 s", b.rate, b.fixed)
	}
	// A fixed window ending at 50 s: the reset stays put while the remaining count falls.
	b = newBucket(0)
	b.learn(rl(28, 50), t0)
	b.learn(rl(5, 49), sec(1))
	if !b.fixed || b.rate != 0 {
		t.Fatalf("fixed-window readings: fixed %v rate %v", b.fixed, b.rate)
	}
	b.debit(1, 1, 0, sec(1))
	b.observe(1, rl(0, 50), 1, 0, sec(10), sec(10))
	if fit, at := b.fits(1, sec(20)); fit || !at.Equal(sec(50)) {
		t.Fatalf("fits(1) at 20 s = %v, %v; want a wait for the window's end at 50 s", fit, at)
	}
	b.debit(2, 1, 0, sec(49)) // sent before the window ends, unanswered
	if lvl, _ := b.levelAt(sec(50)); !near(lvl, 29) {
		t.Fatalf("level at the reset %v, want 30 less the unanswered turn", lvl)
	}
	b.debit(3, 1, 0, sec(51))
	if lvl, _ := b.levelAt(sec(52)); !near(lvl, 28) {
		t.Fatalf("level after a turn admitted past the reset %v, want 28", lvl)
	}
	// A new limit starts the rate afresh.
	b.learn(RateLimit{Limit: 60, HasLimit: true}, sec(53))
	if b.fixed || !near(b.rate, 1) {
		t.Fatalf("after a new limit: fixed %v rate %v", b.fixed, b.rate)
	}
}

// A bucket in debt (completions billed after admission, refusals charged) reports 0
// remaining and a reset beyond a full window: that reading bounds the rate only from
// below, and it does not make a continuous bucket look like a fixed window.
func TestBucketDebtIsNoFixedWindow(t *testing.T) {
	b := newBucket(0)
	// Level −1,500 of 6,000 at 100 a second: full again in 75 s.
	b.learn(RateLimit{Limit: 6000, HasLimit: true, Remaining: 0, HasRemaining: true, Reset: sec(75)}, t0)
	b.learn(RateLimit{Limit: 6000, HasLimit: true, Remaining: 3000, HasRemaining: true, Reset: sec(40)}, sec(10))
	if b.fixed || !near(b.rate, 100) {
		t.Fatalf("fixed %v rate %v, want a continuous 100 a second", b.fixed, b.rate)
	}
}

// Turns admitted together race to the provider: a reading of one of them may come from
// before the others arrived. It does not settle the others while they run, and a turn
// that has ended counts again against a later-observed reading taken before it arrived
// (its own reading, lower, says so).
func TestBucketReadingOfARaceKeepsTheOthers(t *testing.T) {
	about := func(a, b float64) bool { return math.Abs(a-b) < 0.05 } // refill over milliseconds
	rl := func(remaining int64) RateLimit {
		return RateLimit{Limit: 4, HasLimit: true, Remaining: remaining, HasRemaining: true, Reset: sec(1)}
	}
	b := newBucket(0)
	b.observe(0, rl(4), 0, 0, t0, t0) // known: 4 left
	for seq := uint64(1); seq <= 3; seq++ {
		b.debit(seq, 1, 0, t0)
	}
	// They arrive in the order 2, 3, 1. Turn 2's reading comes first: 3 left after it.
	b.observe(2, rl(3), 1, 0, sec(0.01), sec(0.01))
	if lvl, _ := b.levelAt(sec(0.01)); !about(lvl, 1) {
		t.Fatalf("level %v, want 1: turn 1 still counts", lvl)
	}
	// Turn 1 ends; its own reading (1 left) is lower: it arrived after turn 2's reading.
	if !b.endKept(1, rl(1), 1, 0, sec(0.02)) {
		t.Fatal("turn 1's reservation was not kept")
	}
	if lvl, _ := b.levelAt(sec(0.02)); !about(lvl, 1) {
		t.Fatalf("level %v after turn 1 ended, want 1", lvl)
	}
	// Turn 3's reading (2 left), taken before turn 1 arrived, comes only now.
	b.observe(3, rl(2), 1, 0, sec(0.03), sec(0.03))
	if lvl, _ := b.levelAt(sec(0.03)); !about(lvl, 1) {
		t.Fatalf("level %v after a reading that raced an ended turn, want 1", lvl)
	}

	// A raced turn whose own reading is as high as the keeper's arrived first: the
	// keeper's reading counted it, and its reservation comes back when it ends.
	b = newBucket(0)
	b.observe(0, rl(4), 0, 0, t0, t0)
	b.debit(1, 1, 0, t0)
	b.debit(2, 1, 0, t0)
	b.observe(2, rl(2), 1, 0, sec(0.01), sec(0.01)) // keeps turn 1: 1 left
	b.endKept(1, rl(3), 1, 0, sec(0.01))
	if lvl, _ := b.levelAt(sec(0.01)); !about(lvl, 2) {
		t.Fatalf("level %v, want 2", lvl)
	}

	// Headers handled first do not mean a request arrived first: turn 1's say 0 left,
	// turn 2's, handled after them, say 1. Turn 1 arrived second.
	b = newBucket(0)
	b.observe(0, rl(2), 0, 0, t0, t0)
	b.debit(1, 1, 0, t0)
	b.debit(2, 1, 0, t0)
	b.seen(1, rl(0), sec(0.010))
	b.seen(2, rl(1), sec(0.011))
	b.observe(2, rl(1), 1, 0, sec(0.011), sec(0.02))
	if lvl, _ := b.levelAt(sec(0.02)); !about(lvl, 0) {
		t.Fatalf("level %v after a reading taken before a raced turn arrived, want 0", lvl)
	}

	// A turn admitted well before the reading's own was surely counted.
	b = newBucket(0)
	b.observe(0, rl(4), 0, 0, t0, t0)
	b.debit(1, 1, 0, t0)
	b.debit(2, 1, 0, sec(1.5))
	b.observe(2, rl(2), 1, 0, sec(1.6), sec(1.6))
	if lvl, _ := b.levelAt(sec(1.6)); !about(lvl, 2) || b.keptSum != 0 {
		t.Fatalf("level %v kept %v, want 2 and nothing kept", lvl, b.keptSum)
	}
}

// A remaining count of zero is a floor: a completion billed at its end beyond its
// reservation leaves the provider's level below zero, and the reading may not lift the
// level above dead reckoning. Any other count re-bases the level as before.
func TestBucketZeroReadingIsAFloor(t *testing.T) {
	b := newBucket(6000) // 100 tokens a second
	b.debit(0, 5400, 0, t0)
	b.finish(0, 5400, t0) // 600 left at t0
	b.debit(1, 500, 100, t0)
	// Turn 1 ends at 5 s having used 1400 (its output 1000, not 100): the provider is at
	// 600 − 1400 + 500 of refill = −300 and says 0.
	zero := RateLimit{Limit: 6000, HasLimit: true, Remaining: 0, HasRemaining: true}
	b.observe(1, zero, 1400, 0, sec(5), sec(5))
	if lvl, _ := b.levelAt(sec(5)); !near(lvl, -300) {
		t.Fatalf("level %v after a reading of 0, want −300 (dead reckoning with turn 1's overrun)", lvl)
	}
	if ok, at := b.fits(200, sec(5)); ok || at.Before(sec(10)) {
		t.Fatalf("a turn of 200 fits at %v (ok %v), want not before 10 s", at, ok)
	}

	// A count above zero is exact: it re-bases the level even above dead reckoning.
	b.debit(2, 100, 0, sec(5))
	b.observe(2, RateLimit{Limit: 6000, HasLimit: true, Remaining: 50, HasRemaining: true}, 100, 0, sec(5), sec(5))
	if lvl, _ := b.levelAt(sec(5)); !near(lvl, 50) {
		t.Fatalf("level %v after a reading of 50, want 50", lvl)
	}
}
