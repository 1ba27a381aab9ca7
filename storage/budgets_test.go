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
	if _, err := p.TakeBudget(t.Context(), key, "setup", BudgetAmounts{Requests: 0, Tokens: 0}, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.LowerBudget(t.Context(), key, BudgetReading{Requests: BudgetLevel{Limit: reqs, Remaining: reqs, HasLimit: true, HasRemaining: true, Rate: reqRate, Learned: true},
		Tokens: BudgetLevel{Limit: toks, Remaining: toks, HasLimit: true, HasRemaining: true, Rate: tokRate, Learned: true}}); err != nil {
		t.Fatal(err)
	}
}

// level is a reading of one level: limit, remaining left.
func level(limit, remaining float64) BudgetLevel {
	return BudgetLevel{Limit: limit, Remaining: remaining, HasLimit: true, HasRemaining: true}
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
					g, err := p.TakeBudget(t.Context(), key, "n", BudgetAmounts{Requests: 3, Tokens: 75}, 0, time.Second)
					if err != nil {
						t.Error(err)
						return
					}
					if g.Got.Requests < 0 || g.Got.Tokens < 0 || g.Got.Requests > 3 || g.Got.Tokens > 75 {
						t.Errorf("grant %+v outside [0, wanted]", g)
					}
					mu.Lock()
					gotT += g.Got.Tokens
					gotR += g.Got.Requests
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
	g, err := ps[0].TakeBudget(t.Context(), "k", "n", BudgetAmounts{Requests: 1000, Tokens: 10000}, 2*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 2 s at 100 tokens/s and 10 requests/s leave 200 and 20 (plus the refill since the
	// reading, a few ms).
	if g.Got.Tokens < 790 || g.Got.Tokens > 805 || g.Got.Requests != 80 || g.Rate.Tokens != 100 || g.Rate.Requests != 10 {
		t.Fatalf("grant %+v, want about 800 tokens and 80 requests", g)
	}
}

// A reading only lowers the shared level: a node's stale reading gives back nothing.
func TestSharedBudgetLowerOnly(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	known(t, ps[0], key, 100, 1000, 0.01, 0.01)
	low := BudgetReading{Tokens: level(1000, 400)}
	if err := ps[0].LowerBudget(t.Context(), key, low); err != nil {
		t.Fatal(err)
	}
	g, err := ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Requests: 0, Tokens: 1000}, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Got.Tokens < 399 || g.Got.Tokens > 401 {
		t.Fatalf("after a reading of 400 left, took %.1f tokens, want 400", g.Got.Tokens)
	}
	// A stale reading from before those were spent says 900 left: the level stays spent.
	stale := BudgetReading{Tokens: level(1000, 900)}
	if err := ps[0].LowerBudget(t.Context(), key, stale); err != nil {
		t.Fatal(err)
	}
	g, err = ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Requests: 0, Tokens: 1000}, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Got.Tokens > 1 {
		t.Fatalf("a stale reading raised the shared level: took %.1f more tokens", g.Got.Tokens)
	}
}

// One node scouts an unknown limit; the others get nothing until its reading comes or
// its time lapses.
func TestSharedBudgetScout(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	a, err := ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{Requests: 1, Tokens: 100}, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Scout || a.Known() || a.Got.Requests != 0 || a.Got.Tokens != 0 {
		t.Fatalf("first take of an unknown budget: %+v, want a scout with no grant", a)
	}
	b, err := ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Requests: 1, Tokens: 100}, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if b.Scout || b.Got.Requests != 0 || b.Got.Tokens != 0 {
		t.Fatalf("second node's take while the first scouts: %+v, want to wait", b)
	}
	// The scout's time lapses: the next take scouts instead.
	deadline := time.Now().Add(5 * time.Second)
	for !b.Scout {
		if time.Now().After(deadline) {
			t.Fatal("the scouting of a node that brought no reading never lapsed")
		}
		time.Sleep(20 * time.Millisecond)
		if b, err = ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Requests: 1, Tokens: 100}, 0, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	// Its reading makes the budget known, and both take from it.
	if err := ps[1].LowerBudget(t.Context(), key, BudgetReading{Requests: level(60, 59), Tokens: level(6000, 5900)}); err != nil {
		t.Fatal(err)
	}
	a, err = ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{Requests: 1, Tokens: 100}, 0, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if a.Scout || !a.Known() || a.Got.Requests != 1 || a.Got.Tokens != 100 || a.Rate.Requests != 1 || a.Rate.Tokens != 100 {
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
	g, err := ps[0].TakeBudget(t.Context(), "k", "a", BudgetAmounts{Requests: 1, Tokens: 100}, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Known() || !g.Scout || g.Got.Tokens != 0 {
		t.Fatalf("take after the row was lost: %+v, want an unknown budget this node scouts", g)
	}
}

// A scout's answer without rate-limit headers marks the budget silent: no node scouts it
// or waits for it any more; a later reading with limits makes it shared again.
func TestSharedBudgetSilentProvider(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	if a, err := ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{Requests: 1, Tokens: 100}, 0, time.Hour); err != nil || !a.Scout {
		t.Fatalf("first take: %+v %v, want a scout", a, err)
	}
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Silent: true}); err != nil {
		t.Fatal(err)
	}
	b, err := ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Requests: 1, Tokens: 100}, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if b.Scout || b.Limit.Requests >= 0 || b.Limit.Tokens >= 0 {
		t.Fatalf("take of a silent budget: %+v, want limits < 0 and no scout", b)
	}
	// Silent never overrides limits once known.
	if err := ps[1].LowerBudget(t.Context(), key, BudgetReading{Tokens: level(6000, 5900)}); err != nil {
		t.Fatal(err)
	}
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Silent: true}); err != nil {
		t.Fatal(err)
	}
	c, err := ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{Requests: 1, Tokens: 100}, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limit.Tokens != 6000 || c.Limit.Requests != 0 || c.Got.Tokens != 100 {
		t.Fatalf("take after a reading with a token limit: %+v, want 100 of 6000 tokens and no request limit", c)
	}
}

// Anthropic's input- and output-token levels are shared apart: a take grants each only
// what it holds, and a reading of one lowers that one alone.
func TestSharedBudgetSplitInputOutput(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	if _, err := ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{}, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Requests: level(50, 50), Input: level(10000, 10000), Output: level(2000, 2000)}); err != nil {
		t.Fatal(err)
	}
	g, err := ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Requests: 5, Input: 3000, Output: 1500}, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Got.Requests != 5 || !near(g.Got.Input, 3000) || !near(g.Got.Output, 1500) || g.Limit.Input != 10000 || g.Limit.Output != 2000 ||
		!near(g.Rate.Output, 2000.0/60) {
		t.Fatalf("first take: %+v, want 5 requests, 3000 input and 1500 output tokens", g)
	}
	// The output level has about 500 left, the input level 7000.
	g, err = ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{Requests: 5, Input: 3000, Output: 1500}, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !near(g.Got.Input, 3000) || g.Got.Output < 499 || g.Got.Output > 510 {
		t.Fatalf("second take: %+v, want 3000 input and about 500 output tokens", g)
	}
	// A reading of the output level lowers it and leaves the input level alone.
	if err := ps[1].LowerBudget(t.Context(), key, BudgetReading{Output: level(2000, 0)}); err != nil {
		t.Fatal(err)
	}
	g, err = ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Input: 3000, Output: 100}, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !near(g.Got.Input, 3000) || g.Got.Output > 5 {
		t.Fatalf("take after an output reading of 0 left: %+v, want 3000 input tokens and no output", g)
	}
}

func near(a, b float64) bool { return a > b-2 && a < b+2 }

// A node that has only seen a limit guesses its rate as the limit per minute; that guess
// never overwrites a rate another node measured. A new limit starts the rate afresh.
func TestSharedBudgetGuessNeverOverwritesALearnedRate(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	if _, err := ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{}, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	measured := level(600, 600)
	measured.Rate, measured.Learned = 5, true
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Tokens: measured}); err != nil {
		t.Fatal(err)
	}
	guess := level(600, 590)
	guess.Rate = 10
	if err := ps[1].LowerBudget(t.Context(), key, BudgetReading{Tokens: guess}); err != nil {
		t.Fatal(err)
	}
	g, err := ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{}, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Rate.Tokens != 5 {
		t.Fatalf("rate after a guess of 10/s over a measured 5/s: %v, want 5", g.Rate.Tokens)
	}
	measured.Rate = 4 // a measurement replaces a measurement
	if err := ps[1].LowerBudget(t.Context(), key, BudgetReading{Tokens: measured}); err != nil {
		t.Fatal(err)
	}
	if g, _ = ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{}, 0, time.Second); g.Rate.Tokens != 4 {
		t.Fatalf("rate after a second measurement of 4/s: %v, want 4", g.Rate.Tokens)
	}
	bigger := level(1200, 1200)
	bigger.Rate = 20
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Tokens: bigger}); err != nil {
		t.Fatal(err)
	}
	if g, _ = ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{}, 0, time.Second); g.Rate.Tokens != 20 || g.Limit.Tokens != 1200 {
		t.Fatalf("after a new limit of 1200 guessed at 20/s: %+v, want rate 20", g)
	}
}

// A fixed window refills nothing before its end, and then all of it at once; grants
// given back are not added to it (they may be of the window before), and a window ends
// a minute after the last one until a reading says otherwise.
func TestSharedBudgetFixedWindow(t *testing.T) {
	ps := openNodes(t, 2)
	const key = "k"
	if _, err := ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{}, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(1500 * time.Millisecond)
	win := level(1000, 1000)
	win.Rate, win.Learned, win.WindowEnd = 500, true, end // a continuous refill would give 500 a second
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Tokens: win}); err != nil {
		t.Fatal(err)
	}
	g, err := ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Tokens: 1000}, 0, time.Second)
	if err != nil || !near(g.Got.Tokens, 1000) {
		t.Fatalf("first take of a full window: %+v %v, want 1000", g, err)
	}
	if err := ps[1].GiveBudget(t.Context(), key, BudgetAmounts{Tokens: 400}); err != nil {
		t.Fatal(err)
	}
	var before float64
	for {
		g, err := ps[0].TakeBudget(t.Context(), key, "a", BudgetAmounts{Tokens: 1000}, 0, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().Before(end.Add(-50 * time.Millisecond)) {
			before += g.Got.Tokens
			continue
		}
		if g.Got.Tokens == 0 {
			if time.Now().After(end.Add(5 * time.Second)) {
				t.Fatal("the window never refilled after its end")
			}
			continue
		}
		if !near(g.Got.Tokens, 1000) {
			t.Fatalf("first take after the window's end: %.1f tokens, want the whole 1000", g.Got.Tokens)
		}
		break
	}
	if before > 0 {
		t.Fatalf("takes before the window's end got %.1f tokens, want 0 (no refill, no give-back)", before)
	}
	g, err = ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Tokens: 1000}, 0, time.Second)
	if err != nil || g.Got.Tokens > 0 {
		t.Fatalf("take right after the next window's first: %+v %v, want nothing until a minute later", g, err)
	}
	// A reading of a window that ends later than the row's is that window's level.
	next := level(1000, 700)
	next.WindowEnd = time.Now().Add(90 * time.Second)
	if err := ps[0].LowerBudget(t.Context(), key, BudgetReading{Tokens: next}); err != nil {
		t.Fatal(err)
	}
	if g, _ = ps[1].TakeBudget(t.Context(), key, "b", BudgetAmounts{Tokens: 1000}, 0, time.Second); !near(g.Got.Tokens, 700) {
		t.Fatalf("take after a reading of a later window with 700 left: %.1f, want 700", g.Got.Tokens)
	}
}
