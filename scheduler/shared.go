package scheduler

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"
)

// SharedBudget is a provider key's rate-limit budget that several nodes (daemons on one
// PostgreSQL) share: the requests and tokens left, refilled at limit per minute. A node
// takes grants from it in chunks and spends them locally, so one statement does not cost
// one decision. Implemented by the store that the nodes share (package host adapts
// storage.Postgres); key names the budget and is never the API key itself.
type SharedBudget interface {
	// Take takes up to reqs requests and toks tokens, leaving rate × margin of each
	// level untaken. While no limit is known it grants nothing and makes this node the
	// budget's scout for scoutFor, unless another node's scouting has not lapsed.
	Take(ctx context.Context, key string, reqs, toks float64, margin, scoutFor time.Duration) (SharedGrant, error)
	// Give gives back unspent grants.
	Give(ctx context.Context, key string, reqs, toks float64) error
	// Lower applies a provider's reading: it may only lower a known level. A reading
	// with Silent set marks a budget whose limits are still unknown as one the provider
	// does not report: the nodes then stop scouting it, and each paces its turns on
	// its own buckets (learned from 429s), until a reading with limits comes.
	Lower(ctx context.Context, key string, r SharedReading) error
}

// SharedGrant is what one Take gave.
type SharedGrant struct {
	Requests, Tokens   float64
	ReqLimit, TokLimit float64 // 0 = unknown; < 0 = the provider reports none (silent)
	ReqRate, TokRate   float64 // refill per second
	Scout              bool    // no limit is known and this node scouts until ScoutUntil
	ScoutUntil         time.Time
}

// SharedReading is a response's reading of the requests and tokens buckets.
// ReqRate and TokRate are the refill rates per second this node learned from the
// readings so far (0 = not yet).
type SharedReading struct {
	ReqRate, TokRate       float64
	ReqLimit, ReqRemaining float64
	TokLimit, TokRemaining float64
	HasReqLimit, HasReq    bool
	HasTokLimit, HasTok    bool
	// Silent: the reading is a successful answer that carried no rate-limit headers
	// at all (a local vLLM or Ollama, a gateway that strips them).
	Silent bool
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

// shareLane is one shared budget as this node holds it.
type shareLane struct {
	key                string
	reqs, toks         float64 // granted, unspent
	reqLimit, tokLimit float64
	reqRate, tokRate   float64
	scout              bool
	scoutUntil         time.Time
	scoutOut           int // scouting requests out
	used               time.Time
	taking             bool
	took               chan struct{} // closed when the take under way ends
}

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
	l      *shareLane
	scout  bool
	tokens float64 // spent of the node's grant
}

// acquire waits until the node holds a grant of lane's shared budget for one request of
// est tokens, and spends it. A failing budget admits (the node's own budgets still hold).
func (g *shareGate) acquire(ctx context.Context, lane string, need float64) (shareTicket, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lane(lane)
	if l == nil {
		return shareTicket{}, nil
	}
	need = max(need, 1)
	for {
		if l.reqLimit < 0 || l.tokLimit < 0 {
			// The provider reports no limits: nothing to share, and no scout's reading
			// will come. The node's own buckets pace the turn.
			return shareTicket{}, nil
		}
		now := time.Now()
		known := l.reqLimit > 0 || l.tokLimit > 0
		if l.tokLimit > 0 {
			need = min(need, l.tokLimit/2) // a grant never takes the margin
		}
		switch {
		case known && (l.reqLimit == 0 || l.reqs >= 1) && (l.tokLimit == 0 || l.toks+1e-6 >= need):
			if l.reqLimit > 0 {
				l.reqs--
			}
			t := shareTicket{l: l}
			if l.tokLimit > 0 {
				l.toks -= need
				t.tokens = need
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
		wantR, wantT := 1.0, need
		if known {
			wantR = max(1, math.Ceil(l.reqLimit*chunkShare)) - l.reqs
			wantT = max(need, l.tokLimit*chunkShare) - l.toks
		}
		l.taking, l.took = true, make(chan struct{})
		margin := g.spread()
		g.mu.Unlock()
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		gr, err := g.cfg.Budget.Take(tctx, l.key, max(wantR, 0), max(wantT, 0), margin, g.cfg.ScoutFor)
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
		l.reqs += gr.Requests
		l.toks += gr.Tokens
		l.reqLimit, l.tokLimit = gr.ReqLimit, gr.TokLimit
		l.reqRate, l.tokRate = gr.ReqRate, gr.TokRate
		l.scout, l.scoutUntil = gr.Scout, gr.ScoutUntil
		if gr.ReqLimit != 0 || gr.TokLimit != 0 {
			l.scout = false
		}
		if gr.Requests > 0 || gr.Tokens > 0 || gr.Scout && l.scoutOut == 0 {
			continue // look again: it may fit now, or this node may scout
		}
		// Nothing granted: wait for the refill (or, while another node scouts, look
		// again soon).
		wait := 100 * time.Millisecond
		if gr.ReqRate > 0 && l.reqs < 1 {
			wait = max(wait, refillWait(1-l.reqs, gr.ReqRate))
		}
		if gr.TokRate > 0 && l.toks < need {
			wait = max(wait, refillWait(need-l.toks, gr.TokRate))
		}
		wait = min(wait, time.Second)
		if !known {
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

// release ends an attempt's ticket, which used tokens (< 0 = not known): what it spent of the node's grant beyond them is the node's to
// spend again, what it used beyond that is owed; a scout's request is no longer out.
func (g *shareGate) release(t shareTicket, used float64) {
	if t.l == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.scout {
		t.l.scoutOut--
	}
	if t.tokens > 0 && used >= 0 {
		t.l.toks += t.tokens - used
	}
}

// observe passes a response's reading of lane's buckets to the shared budget, with the
// refill rates the node's core learned (reqRate, tokRate). A reading that says nothing
// is left (a 429's) also drops the grants the node holds. A successful answer (ok) with
// no rate-limit headers at all, on a budget whose limits are unknown, marks it silent:
// otherwise the other nodes would wait on a scout whose reading never comes.
func (g *shareGate) observe(lane string, tm Telemetry, reqRate, tokRate float64, ok bool) {
	r := SharedReading{ReqRate: max(reqRate, readRate(tm.Requests)), TokRate: max(tokRate, readRate(tm.Tokens)),
		ReqLimit: float64(tm.Requests.Limit), HasReqLimit: tm.Requests.HasLimit,
		ReqRemaining: float64(tm.Requests.Remaining), HasReq: tm.Requests.HasRemaining,
		TokLimit: float64(tm.Tokens.Limit), HasTokLimit: tm.Tokens.HasLimit,
		TokRemaining: float64(tm.Tokens.Remaining), HasTok: tm.Tokens.HasRemaining,
	}
	g.mu.Lock()
	l := g.lane(lane)
	if l == nil {
		g.mu.Unlock()
		return
	}
	if !r.HasReq && !r.HasTok && !r.HasReqLimit && !r.HasTokLimit {
		if !ok || !tm.Empty() || l.reqLimit != 0 || l.tokLimit != 0 {
			g.mu.Unlock()
			return
		}
		r.Silent = true
		l.reqLimit, l.tokLimit, l.scout = -1, -1, false
	}
	if r.HasReq && r.ReqRemaining < 1 || r.HasTok && r.TokRemaining < 1 {
		l.reqs, l.toks = 0, 0
	}
	if r.HasReqLimit && r.ReqLimit > 0 {
		l.reqLimit = max(l.reqLimit, r.ReqLimit)
		l.tokLimit = max(l.tokLimit, 0) // no longer silent
	}
	if r.HasTokLimit && r.TokLimit > 0 {
		l.tokLimit = max(l.tokLimit, r.TokLimit)
		l.reqLimit = max(l.reqLimit, 0)
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
		key        string
		reqs, toks float64
	}
	var backs []back
	g.mu.Lock()
	idle = true
	for _, l := range g.lanes {
		if l != nil && now.Sub(l.used) < 10*g.cfg.Hold {
			idle = false
		}
		if l == nil || l.taking || now.Sub(l.used) < g.cfg.Hold || l.reqs < 1 && l.toks < 1 {
			continue
		}
		backs = append(backs, back{l.key, math.Floor(l.reqs), l.toks})
		l.reqs -= math.Floor(l.reqs)
		l.toks = 0
	}
	if idle {
		g.giving = false
	}
	g.mu.Unlock()
	for _, b := range backs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := g.cfg.Budget.Give(ctx, b.key, b.reqs, b.toks); err != nil {
			g.cfg.Logf("shared budget: %v", err)
		}
		cancel()
	}
	return idle
}

// readRate is the least refill rate per second one reading allows: its remaining count
// is floored and its reset rounded (to 10 ms at best), so what refills by the reset is
// more than missing − 1 over at most t + 10 ms. 0 when it bounds nothing.
func readRate(rl RateLimit) float64 {
	if !rl.HasLimit || !rl.HasRemaining || rl.Reset.IsZero() {
		return 0
	}
	missing := float64(rl.Limit - rl.Remaining)
	t := time.Until(rl.Reset).Seconds()
	grain := max(rl.grain.Seconds(), 0.01)
	if missing < 2 || t <= 0 {
		return 0
	}
	return (missing - 1) / (t + grain)
}
