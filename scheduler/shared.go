package scheduler

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"
)

// SharedBudget is a provider key's rate-limit budget that several nodes (daemons on one
// PostgreSQL) share: the requests and tokens left, each refilled at its rate (or all at
// once at a fixed window's end). A node takes grants from it in chunks and spends them
// locally, so one statement does not cost one decision. Implemented by the store that
// the nodes share (package host adapts storage.Postgres); key names the budget and is
// never the API key itself.
type SharedBudget interface {
	// Take takes up to want of each level, leaving rate × margin of each untaken.
	// While no limit is known it grants nothing and makes this node the budget's
	// scout for scoutFor, unless another node's scouting has not lapsed.
	Take(ctx context.Context, key string, want SharedAmounts, margin, scoutFor time.Duration) (SharedGrant, error)
	// Give gives back unspent grants.
	Give(ctx context.Context, key string, back SharedAmounts) error
	// Lower applies a provider's reading: it may only lower a known level. A reading
	// with Silent set marks a budget whose limits are still unknown as one the provider
	// does not report: the nodes then stop scouting it, and each paces its turns on
	// its own buckets (learned from 429s), until a reading with limits comes.
	Lower(ctx context.Context, key string, r SharedReading) error
}

// SharedAmounts is one amount of each level of a shared budget: requests, tokens (a
// provider's one token bucket) and input and output tokens (Anthropic's separate
// buckets).
type SharedAmounts struct{ Requests, Tokens, Input, Output float64 }

// The levels of a shared budget, in SharedAmounts' order.
const (
	dimReq = iota
	dimTok
	dimIn
	dimOut
	nDims
)

func (a SharedAmounts) vec() [nDims]float64 {
	return [nDims]float64{a.Requests, a.Tokens, a.Input, a.Output}
}

func amountsOf(v [nDims]float64) SharedAmounts {
	return SharedAmounts{Requests: v[dimReq], Tokens: v[dimTok], Input: v[dimIn], Output: v[dimOut]}
}

// SharedGrant is what one Take gave.
type SharedGrant struct {
	Got        SharedAmounts // the node's to spend
	Limit      SharedAmounts // 0 = unknown; < 0 = the provider reports none (silent)
	Rate       SharedAmounts // refill per second
	Scout      bool          // no limit is known and this node scouts until ScoutUntil
	ScoutUntil time.Time
}

// SharedLevel is a response's reading of one level, with what the node learned of it.
type SharedLevel struct {
	Limit, Remaining       float64
	HasLimit, HasRemaining bool
	// Rate is the refill per second the node's core uses (0 = none yet); Learned says it
	// was measured from readings rather than taken as the limit per minute.
	Rate    float64
	Learned bool
	// WindowEnd is set when the node's core knows the level is a fixed window: the
	// window's end, when all of it refills.
	WindowEnd time.Time
}

func (l SharedLevel) said() bool { return l.HasLimit || l.HasRemaining }

// SharedReading is a response's reading of a budget's levels.
type SharedReading struct {
	Requests, Tokens, Input, Output SharedLevel
	// Silent: the reading is a successful answer that carried no rate-limit headers
	// at all (a local vLLM or Ollama, a gateway that strips them).
	Silent bool
}

func (r *SharedReading) levels() [nDims]*SharedLevel {
	return [nDims]*SharedLevel{&r.Requests, &r.Tokens, &r.Input, &r.Output}
}

// SharedConfig shares an Executor's request and token budgets across nodes (see Share).
type SharedConfig struct {
	Budget SharedBudget
	// Key is the shared budget of a lane ("" = the lane is not shared).
	Key func(lane string) string
	// Spread is the least admission-to-send spread the margin assumes (rate × spread
	// is left in every shared level); what the node measures raises it. 0 = 150 ms.
	Spread time.Duration
	// ScoutFor is how long a scout may take to bring the first reading before another
	// node scouts; 0 = 10 s.
	ScoutFor time.Duration
	// Hold is how long unspent grants stay with the node before it gives them back;
	// 0 = 1 s.
	Hold time.Duration
	// Logf reports a failing shared budget (the node then admits on its own budgets).
	Logf func(format string, args ...any)
}

// DefaultSpread is the margin's spread before any is measured: across nodes, 50 ms
// of rate left 429s under load where 150 ms left none.
const DefaultSpread = 150 * time.Millisecond

// chunkShare is the part of a known limit one take asks for beyond the turn's need.
const chunkShare = 0.05

// Share makes e admit a turn only once the node holds a grant of the lane's shared
// budget for it (SPEC §9): the core still decides order, classes and fairness alone,
// and a turn it admits then waits, in the order admitted, for its share of the level.
// Readings of the responses lower the shared level. Call it before the first Admit.
func (e *Executor) Share(cfg SharedConfig) {
	if cfg.Budget == nil || cfg.Key == nil {
		return
	}
	if cfg.Spread <= 0 {
		cfg.Spread = DefaultSpread
	}
	if cfg.ScoutFor <= 0 {
		cfg.ScoutFor = 10 * time.Second
	}
	if cfg.Hold <= 0 {
		cfg.Hold = time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	e.share = &shareGate{cfg: cfg, lanes: map[string]*shareLane{}}
}

// shareGate is an Executor's side of the shared budgets.
type shareGate struct {
	cfg SharedConfig

	mu      sync.Mutex
	lanes   map[string]*shareLane
	spreads [256]time.Duration // the last admission-to-send spreads, a ring
	nspread int
	learned time.Duration // the spread the margin assumes now
	giving  bool          // the give-back loop runs
}

// shareLane is one shared budget as this node holds it. Its levels are in the order of
// SharedAmounts (dimReq … dimOut).
type shareLane struct {
	key        string
	held       [nDims]float64 // granted, unspent
	limit      [nDims]float64 // 0 = unknown; < 0 = silent
	rate       [nDims]float64
	scout      bool
	scoutUntil time.Time
	scoutOut   int // scouting requests out
	used       time.Time
	taking     bool
	took       chan struct{} // closed when the take under way ends
}

// known reports whether any limit of the budget is known.
func (l *shareLane) known() bool {
	for _, v := range l.limit {
		if v > 0 {
			return true
		}
	}
	return false
}

// silent reports whether the provider reports no limits.
func (l *shareLane) silent() bool { return l.limit[dimReq] < 0 || l.limit[dimTok] < 0 }

// spread is what the margin assumes now.
func (g *shareGate) spread() time.Duration {
	return max(g.cfg.Spread, g.learned)
}

// sent records one admission-to-send spread; the margin follows the 99th percentile
// of the last 256, never below the configured floor.
func (g *shareGate) sent(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.spreads[g.nspread%len(g.spreads)] = d
	g.nspread++
	if g.nspread%16 == 0 {
		n := min(g.nspread, len(g.spreads))
		s := append([]time.Duration(nil), g.spreads[:n]...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		g.learned = s[(n*99)/100]
	}
}

// lane is the held state of lane's budget; nil when the lane is not shared.
func (g *shareGate) lane(name string) *shareLane {
	if l, ok := g.lanes[name]; ok {
		return l
	}
	var l *shareLane
	if key := g.cfg.Key(name); key != "" {
		l = &shareLane{key: key}
	}
	g.lanes[name] = l
	return l
}

// shareTicket is what acquire gave one attempt.
type shareTicket struct {
	l     *shareLane
	scout bool
	spent [nDims]float64 // of the node's grant
}

// acquire waits until the node holds a grant of lane's shared budget for one request
// that needs need of each level (its reservation in the node's buckets), and spends it.
// A failing budget admits (the node's own budgets still hold).
func (g *shareGate) acquire(ctx context.Context, lane string, need [nDims]float64) (shareTicket, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lane(lane)
	if l == nil {
		return shareTicket{}, nil
	}
	need[dimReq] = 1
	for d := dimTok; d < nDims; d++ {
		need[d] = max(need[d], 1)
	}
	for {
		if l.silent() {
			// The provider reports no limits: nothing to share, and no scout's reading
			// will come. The node's own buckets pace the turn.
			return shareTicket{}, nil
		}
		now := time.Now()
		known := l.known()
		fits := known
		for d := range nDims {
			if l.limit[d] > 0 {
				if d != dimReq {
					need[d] = min(need[d], l.limit[d]/2) // a grant never takes the margin
				}
				fits = fits && l.held[d]+1e-6 >= need[d]
			}
		}
		switch {
		case fits:
			t := shareTicket{l: l}
			for d := range nDims {
				if l.limit[d] > 0 {
					l.held[d] -= need[d]
					t.spent[d] = need[d]
				}
			}
			l.used = now
			g.startGiving()
			return t, nil
		case !known && l.scout && now.Before(l.scoutUntil) && l.scoutOut == 0:
			l.scoutOut++
			return shareTicket{l: l, scout: true}, nil
		}
		if l.taking {
			ch := l.took
			g.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				g.mu.Lock()
				return shareTicket{}, context.Cause(ctx)
			}
			g.mu.Lock()
			continue
		}
		want := need
		if known {
			for d := range nDims {
				want[d] = max(want[d], l.limit[d]*chunkShare)
			}
			want[dimReq] = math.Ceil(want[dimReq])
		}
		for d := range nDims {
			want[d] = max(want[d]-l.held[d], 0)
		}
		l.taking, l.took = true, make(chan struct{})
		margin := g.spread()
		g.mu.Unlock()
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		gr, err := g.cfg.Budget.Take(tctx, l.key, amountsOf(want), margin, g.cfg.ScoutFor)
		cancel()
		g.mu.Lock()
		l.taking = false
		close(l.took)
		if err != nil {
			if ctx.Err() != nil {
				return shareTicket{}, context.Cause(ctx)
			}
			g.cfg.Logf("shared budget of lane %s: %v; admitting on this node's own budgets", lane, err)
			return shareTicket{}, nil
		}
		got, lim, rate := gr.Got.vec(), gr.Limit.vec(), gr.Rate.vec()
		granted := false
		for d := range nDims {
			l.held[d] += got[d]
			granted = granted || got[d] > 0
		}
		l.limit, l.rate = lim, rate
		l.scout, l.scoutUntil = gr.Scout, gr.ScoutUntil
		if l.known() || l.silent() {
			l.scout = false
		}
		if granted || gr.Scout && l.scoutOut == 0 {
			continue // look again: it may fit now, or this node may scout
		}
		// Nothing granted: wait for the refill (or, while another node scouts, look
		// again soon).
		wait := 100 * time.Millisecond
		for d := range nDims {
			if rate[d] > 0 && l.held[d] < need[d] {
				wait = max(wait, refillWait(need[d]-l.held[d], rate[d]))
			}
		}
		wait = min(wait, time.Second)
		if !l.known() {
			wait = min(wait, 50*time.Millisecond) // the scout's reading may come any moment
		}
		g.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			g.mu.Lock()
			return shareTicket{}, context.Cause(ctx)
		}
		g.mu.Lock()
	}
}

// release ends an attempt's ticket, which used used of the token levels (known false:
// not known). What it spent of the node's grant beyond that is the node's to spend
// again, what it used beyond that is owed; a scout's request is no longer out.
func (g *shareGate) release(t shareTicket, used [nDims]float64, known bool) {
	if t.l == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.scout {
		t.l.scoutOut--
	}
	if !known {
		return
	}
	for d := dimTok; d < nDims; d++ {
		if t.spent[d] > 0 {
			t.l.held[d] += t.spent[d] - used[d]
		}
	}
}

// observe passes a response's reading of lane's buckets to the shared budget, with what
// the node's core learned of them. A reading that says nothing is left (a 429's) also
// drops the grants the node holds. A successful answer (ok) with no rate-limit headers
// at all, on a budget whose limits are unknown, marks it silent: otherwise the other
// nodes would wait on a scout whose reading never comes.
func (g *shareGate) observe(lane string, tm Telemetry, learned [nDims]learnt, ok bool) {
	var r SharedReading
	said, empty := false, false
	for d, rl := range [nDims]RateLimit{tm.Requests, tm.Tokens, tm.InputTokens, tm.OutputTokens} {
		lv := r.levels()[d]
		*lv = SharedLevel{Limit: float64(rl.Limit), HasLimit: rl.HasLimit, Remaining: float64(rl.Remaining), HasRemaining: rl.HasRemaining,
			Rate: learned[d].rate, Learned: learned[d].learned}
		if rr := readRate(rl); rr > lv.Rate {
			lv.Rate, lv.Learned = rr, true
		}
		if learned[d].fixed && !rl.Reset.IsZero() {
			lv.WindowEnd = rl.Reset
		}
		said = said || lv.said()
		empty = empty || rl.HasRemaining && rl.Remaining < 1
	}
	g.mu.Lock()
	l := g.lane(lane)
	if l == nil {
		g.mu.Unlock()
		return
	}
	if !said {
		if !ok || !tm.Empty() || l.known() || l.silent() {
			g.mu.Unlock()
			return
		}
		r.Silent = true
		l.limit, l.scout = [nDims]float64{-1, -1, -1, -1}, false
	}
	if empty {
		l.held = [nDims]float64{}
	}
	for d, lv := range r.levels() {
		if lv.HasLimit && lv.Limit > 0 {
			l.limit[d] = max(l.limit[d], lv.Limit)
			for o := range nDims {
				l.limit[o] = max(l.limit[o], 0) // no longer silent
			}
		}
	}
	key := l.key
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.cfg.Budget.Lower(ctx, key, r); err != nil {
		g.cfg.Logf("shared budget of lane %s: %v", lane, err)
	}
}

// startGiving starts the loop that gives back grants left unspent for Hold. g.mu held.
func (g *shareGate) startGiving() {
	if g.giving {
		return
	}
	g.giving = true
	go func() {
		t := time.NewTicker(g.cfg.Hold)
		defer t.Stop()
		for range t.C {
			if g.giveBack(time.Now()) {
				return
			}
		}
	}()
}

// giveBack gives back what lanes idle for Hold still hold, and reports whether every
// lane has been idle for ten Holds: the loop then ends (the next grant starts it again).
func (g *shareGate) giveBack(now time.Time) (idle bool) {
	type back struct {
		key  string
		held [nDims]float64
	}
	var backs []back
	g.mu.Lock()
	idle = true
	for _, l := range g.lanes {
		if l != nil && now.Sub(l.used) < 10*g.cfg.Hold {
			idle = false
		}
		if l == nil || l.taking || now.Sub(l.used) < g.cfg.Hold {
			continue
		}
		b := back{key: l.key}
		some := false
		for d := range nDims {
			b.held[d] = l.held[d]
			if d == dimReq {
				b.held[d] = math.Floor(b.held[d])
			}
			some = some || b.held[d] >= 1
		}
		if !some {
			continue
		}
		for d := range nDims {
			l.held[d] -= b.held[d]
		}
		backs = append(backs, b)
	}
	if idle {
		g.giving = false
	}
	g.mu.Unlock()
	for _, b := range backs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := g.cfg.Budget.Give(ctx, b.key, amountsOf(b.held)); err != nil {
			g.cfg.Logf("shared budget: %v", err)
		}
		cancel()
	}
	return idle
}

// readRate is the least refill rate per second one reading allows: its remaining count
// is floored (and may be slack lower than the truth) and its reset rounded (to 10 ms at
// best), so what refills by the reset is more than missing − 1 − slack over at most
// t + 10 ms. 0 when it bounds nothing.
func readRate(rl RateLimit) float64 {
	if !rl.HasLimit || !rl.HasRemaining || rl.Reset.IsZero() {
		return 0
	}
	missing := float64(rl.Limit-rl.Remaining) - float64(rl.slack)
	t := time.Until(rl.Reset).Seconds()
	grain := max(rl.grain.Seconds(), 0.01)
	if missing < 2 || t <= 0 {
		return 0
	}
	return (missing - 1) / (t + grain)
}
