package storage

import (
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/pgtest"
)

// openNodes opens n stores on one fresh PostgreSQL database, as n nodes would.
func openNodes(t *testing.T, n int) []*Postgres {
	t.Helper()
	url := pgtest.URL(t)
	var ps []*Postgres
	for range n {
		p, err := OpenPostgres(t.Context(), url, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		ps = append(ps, p)
	}
	return ps
}

// known makes key a known budget: limit tokens and reqs requests, full, refilling at
// tokRate and reqRate per second.
func known(t *testing.T, p *Postgres, key string, reqs, toks, reqRate, tokRate float64) {
	t.Helper()
	if _, err := p.TakeBudget(t.Context(), key, "setup", 0, 0, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.LowerBudget(t.Context(), key, BudgetReading{ReqLimit: reqs, ReqRemaining: reqs, TokLimit: toks, TokRemaining: toks,
		HasReqLimit: true, HasReq: true, HasTokLimit: true, HasTok: true, ReqRate: reqRate, TokRate: tokRate}); err != nil {
		t.Fatal(err)
	}
}

func TestSharedBudgetIsUnlogged(t *testing.T) {
	ps := openNodes(t, 1)
	var persistence string
	if err := ps[0].budget.QueryRowContext(t.Context(), `SELECT relpersistence FROM pg_class WHERE relname = 'budgets'`).Scan(&persistence); err != nil {
		t.Fatal(err)
	}
	if persistence != "u" {
		t.Fatalf("budgets relpersistence = %q, want u (UNLOGGED)", persistence)
	}
}

// Three nodes taking chunks at once never get more than the level plus its refill.
func TestSharedBudgetChunksNeverOverAdmit(t *testing.T) {
	ps := openNodes(t, 3)
	const key, toks, reqs, tokRate, reqRate = "k", 5000.0, 200.0, 100.0, 4.0
	known(t, ps[0], key, reqs, toks, reqRate, tokRate)
	start := time.Now()
	var mu sync.Mutex
	var gotT, gotR float64
	var takes int
	var wg sync.WaitGroup
	for _, p := range ps {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < 1500*time.Millisecond {
					g, err := p.TakeBudget(t.Context(), key, "n", 3, 75, 0, time.Second)
					if err != nil {
						t.Error(err)
						return
					}
					if g.Requests < 0 || g.Tokens < 0 || g.Requests > 3 || g.Tokens > 75 {
						t.Errorf("grant %+v outside [0, wanted]", g)
					}
					mu.Lock()
					gotT += g.Tokens
					gotR += g.Requests
					takes++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds() + 0.1 // the setup's statements ran before start
	if max := toks + tokRate*elapsed; gotT > max+1e-6 {
		t.Errorf("granted %.1f tokens in %.2f s, more than the level %.0f plus its refill: %.1f", gotT, elapsed, toks, max)
	}
	if max := reqs + reqRate*elapsed; gotR > max+1e-6 {
		t.Errorf("granted %.1f requests in %.2f s, more than %.1f", gotR, elapsed, max)
	}
	if gotT < toks*0.99 || gotR < reqs*0.99 {
		t.Errorf("granted only %.1f tokens and %.1f requests of a full budget", gotT, gotR)
	}
	t.Logf("%d takes granted %.0f tokens and %.0f requests in %.2f s", takes, gotT, gotR, elapsed)
}

// The margin leaves rate × margin of a level untaken.
func TestSharedBudgetMargin(t *testing.T) {
	ps := openNodes(t, 1)
	known(t, ps[0], "k", 100, 1000, 10, 100)
	g, err := ps[0].TakeBudget(t.Context(), "k", "n", 1000, 10000, 2*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 2 s at 100 tokens/s and 10 requests/s leave 200 and 20 (plus the refill since the
	// reading, a few ms).
	if g.Tokens < 790 || g.Tokens > 805 || g.Requests != 80 || g.TokRate != 100 || g.ReqRate != 10 {
		t.Fatalf("grant %+v, want about 800 tokens and 80 requests", g)
	}
}

// A reading only lowers the shared level: a node's stale reading gives back nothing.
func TestSharedBudgetLowerOnly(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	known(t, ps[0], key, 100, 1000, 0.01, 0.01)
	low := BudgetReading{TokLimit: 1000, TokRemaining: 400, HasTokLimit: true, HasTok: true}
	if err := ps[0].LowerBudget(t.Context(), key, low); err != nil {
		t.Fatal(err)
	}
	g, err := ps[1].TakeBudget(t.Context(), key, "b", 0, 1000, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Tokens < 399 || g.Tokens > 401 {
		t.Fatalf("after a reading of 400 left, took %.1f tokens, want 400", g.Tokens)
	}
	// A stale reading from before those were spent says 900 left: the level stays spent.
	stale := BudgetReading{TokLimit: 1000, TokRemaining: 900, HasTokLimit: true, HasTok: true}
	if err := ps[0].LowerBudget(t.Context(), key, stale); err != nil {
		t.Fatal(err)
	}
	g, err = ps[1].TakeBudget(t.Context(), key, "b", 0, 1000, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Tokens > 1 {
		t.Fatalf("a stale reading raised the shared level: took %.1f more tokens", g.Tokens)
	}
}

// One node scouts an unknown limit; the others get nothing until its reading comes or
// its time lapses.
func TestSharedBudgetScout(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	a, err := ps[0].TakeBudget(t.Context(), key, "a", 1, 100, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Scout || a.Known() || a.Requests != 0 || a.Tokens != 0 {
		t.Fatalf("first take of an unknown budget: %+v, want a scout with no grant", a)
	}
	b, err := ps[1].TakeBudget(t.Context(), key, "b", 1, 100, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if b.Scout || b.Requests != 0 || b.Tokens != 0 {
		t.Fatalf("second node's take while the first scouts: %+v, want to wait", b)
	}
	// The scout's time lapses: the next take scouts instead.
	deadline := time.Now().Add(5 * time.Second)
	for !b.Scout {
		if time.Now().After(deadline) {
			t.Fatal("the scouting of a node that brought no reading never lapsed")
		}
		time.Sleep(20 * time.Millisecond)
		if b, err = ps[1].TakeBudget(t.Context(), key, "b", 1, 100, 0, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	// Its reading makes the budget known, and both take from it.
	if err := ps[1].LowerBudget(t.Context(), key, BudgetReading{ReqLimit: 60, ReqRemaining: 59, TokLimit: 6000, TokRemaining: 5900,
		HasReqLimit: true, HasReq: true, HasTokLimit: true, HasTok: true}); err != nil {
		t.Fatal(err)
	}
	a, err = ps[0].TakeBudget(t.Context(), key, "a", 1, 100, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if a.Scout || !a.Known() || a.Requests != 1 || a.Tokens != 100 || a.ReqRate != 1 || a.TokRate != 100 {
		t.Fatalf("take after the scout's reading: %+v, want 1 request and 100 tokens at 60 and 6000 a minute", a)
	}
}

// A server crash empties the UNLOGGED table: the budget is unknown again and scouted.
func TestSharedBudgetLostRowIsLearnedAgain(t *testing.T) {
	ps := openNodes(t, 1)
	known(t, ps[0], "k", 60, 6000, 1, 100)
	if _, err := ps[0].budget.ExecContext(t.Context(), `TRUNCATE budgets`); err != nil { // what crash recovery does
		t.Fatal(err)
	}
	g, err := ps[0].TakeBudget(t.Context(), "k", "a", 1, 100, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Known() || !g.Scout || g.Tokens != 0 {
		t.Fatalf("take after the row was lost: %+v, want an unknown budget this node scouts", g)
	}
}

// A scout's answer without rate-limit headers marks the budget silent: no node scouts it
// or waits for it any more; a later reading with limits makes it shared again.
func TestSharedBudgetSilentProvider(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	if a, err := ps[0].TakeBudget(t.Context(), key, "a", 1, 100, 0, time.Hour); err != nil || !a.Scout {
		t.Fatalf("first take: %+v %v, want a scout", a, err)
	}
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Silent: true}); err != nil {
		t.Fatal(err)
	}
	b, err := ps[1].TakeBudget(t.Context(), key, "b", 1, 100, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if b.Scout || b.ReqLimit >= 0 || b.TokLimit >= 0 {
		t.Fatalf("take of a silent budget: %+v, want limits < 0 and no scout", b)
	}
	// Silent never overrides limits once known.
	if err := ps[1].LowerBudget(t.Context(), key, BudgetReading{TokLimit: 6000, TokRemaining: 5900, HasTokLimit: true, HasTok: true}); err != nil {
		t.Fatal(err)
	}
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Silent: true}); err != nil {
		t.Fatal(err)
	}
	c, err := ps[0].TakeBudget(t.Context(), key, "a", 1, 100, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c.TokLimit != 6000 || c.ReqLimit != 0 || c.Tokens != 100 {
		t.Fatalf("take after a reading with a token limit: %+v, want 100 of 6000 tokens and no request limit", c)
	}
}
