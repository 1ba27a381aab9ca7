package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/scheduler"
)

// Budgets hold under concurrency (SPEC §2): parallel over 50 mock agents (6 tokens, or
// $6 at these prices, each) must not spend past a budget by more than one turn's
// estimation error, must fail the run naming the limit, and must leave calls that fit
// running in parallel.
func TestBudgetHoldsUnderParallel(t *testing.T) {
	const perCall = 6
	for _, tt := range []struct {
		budget   string
		limit    float64 // in tokens or dollars
		complete bool
	}{
		{budget: "tokens=10", limit: 10},
		{budget: "tokens=100", limit: 100},
		{budget: "usd=20", limit: 20},
		{budget: "tokens=1000", limit: 1000, complete: true},
	} {
		t.Run(tt.budget, func(t *testing.T) {
			mock := adapters.NewMock(adapters.MockConfig{PriceInPerMTok: 1e6, PriceOutPerMTok: 1e6})
			svc, _ := newScheduledEngine(t, mock, scheduler.NewGate(64))
			svc.opts.Backends = adapters.NewRegistry("mock", mock)
			r := start(t, svc, `function main()
  budget{`+tt.budget+`}
  local items = {}
  for i = 1, 50 do items[i] = i end
  parallel(items, function(i) return agent{prompt = "task " .. (i % 10)} end)
end`)
			res := waitRun(t, r)
			if tt.complete {
				if res.Status != StatusCompleted || res.Usage.Total() != 50*perCall {
					t.Fatalf("%s %v after %d tokens: want completed after %d", res.Status, res.Err, res.Usage.Total(), 50*perCall)
				}
				return
			}
			if res.Status != StatusFailed || res.Err == nil || !strings.Contains(res.Err.Error(), "budget exceeded: "+strings.Split(tt.budget, "=")[0]) {
				t.Fatalf("%s %v: want failed with the budget exceeded", res.Status, res.Err)
			}
			used := float64(res.Usage.Total())
			if strings.HasPrefix(tt.budget, "usd") {
				used = res.Cost
			}
			if used > tt.limit+perCall {
				t.Fatalf("used %g of a budget of %g: more than one call's worth (%d) over", used, tt.limit, perCall)
			}
		})
	}
}

// hangUntilCancelled is a backend whose every call waits for its cancel, telling entered
// when it starts.
type hangUntilCancelled struct{ entered chan struct{} }

func (b *hangUntilCancelled) ID() string { return "fake" }

func (b *hangUntilCancelled) Run(ctx context.Context, _ agent.Request, call adapters.Call) (agent.Result, error) {
	err := call.Do(ctx, adapters.TurnCost{Input: 10}, func(ctx context.Context) adapters.TurnReport {
		b.entered <- struct{}{}
		<-ctx.Done()
		return adapters.TurnReport{Err: context.Cause(ctx)}
	})
	return agent.Result{Status: agent.StatusCancelled}, err
}

// The time budget counts the time the run was driven over all its attempts (SPEC §2): a
// run with a 300 s budget cancelled after 100 s twice and resumed each time ends,
// suspended by its time budget, 100 s into its third attempt — on the virtual clock, so
// the test takes no time and a budget timed by the wall clock never fires in it.
func TestTimeBudgetCountsEarlierAttempts(t *testing.T) {
	dir := t.TempDir()
	b := &hangUntilCancelled{entered: make(chan struct{}, 1)}
	e := openResumeEnv(t, dir, b, 0)
	clock := newVirtualClock()
	useClock(e.svc, clock)
	r := start(t, e.svc, `function main()
  budget{time_ms = 300000}
  agent{prompt = "long"}
end`)
	for attempt := 1; attempt <= 3; attempt++ {
		select {
		case <-b.entered:
		case <-time.After(time.Minute):
			t.Fatalf("attempt %d: the call never started", attempt)
		}
		clock.Advance(100 * time.Second)
		if attempt < 3 {
			r.Cancel()
		}
		select {
		case <-r.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("attempt %d: still running 300 s into the run's driven time", attempt)
		}
		res := r.Wait()
		want := StatusCancelled
		if attempt == 3 {
			want = StatusSuspended
		}
		if res.Status != want {
			t.Fatalf("attempt %d: %s %v, want %s", attempt, res.Status, res.Err, want)
		}
		if attempt == 3 {
			if !errors.Is(res.Err, ErrTimeBudget) {
				t.Fatalf("attempt 3 ended with %v, want the time budget", res.Err)
			}
			return
		}
		r = resume(t, e, ResumeSpec{Run: r.ID})
	}
}
