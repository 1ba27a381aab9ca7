package runtime

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// virtualClock is the test kit's VirtualClock as a scheduler.Clock: time moves only when
// the test moves it.
type virtualClock struct{ *testkit.VirtualClock }

func (c virtualClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	return c.VirtualClock.AfterFunc(d, f)
}

// newVirtualClock is a virtual clock that starts at 2026-01-01 00:00 UTC.
func newVirtualClock() virtualClock {
	return virtualClock{testkit.NewVirtualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
}

// useClock makes svc read the time, and set its timers, on c.
func useClock(svc *Service, c virtualClock) { svc.opts.Clock, svc.opts.Now = c, c.Now }

// gatedLoop is a tool-using backend whose every model turn tells the test it started
// and then waits for the test's release, so the test decides when each turn ends and
// sees the order the scheduler sent them in. "warm-up" takes one turn, others two.
type gatedLoop struct {
	started chan string
	release chan struct{}
}

func (b *gatedLoop) ID() string { return "fake" }

func (b *gatedLoop) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	turns := 2
	if req.Prompt == "warm-up" {
		turns = 1
	}
	for i := 1; i <= turns; i++ {
		err := call.Do(ctx, adapters.TurnCost{Input: 10, MaxOutput: 5}, func(ctx context.Context) adapters.TurnReport {
			b.started <- fmt.Sprintf("%s#%d", req.Prompt, i)
			select {
			case <-b.release:
			case <-ctx.Done():
				return adapters.TurnReport{Err: ctx.Err()}
			}
			return adapters.TurnReport{Usage: agent.Usage{Input: 10, Output: 5}}
		})
		if err != nil {
			return agent.Result{}, err
		}
	}
	return okText("done "+req.Prompt, 20, 10), nil
}

// The continuation probe (SPEC §7): one slot, a warm-up call, then parallel over 8
// two-turn agents. A tool follow-up is a later turn of the same agent call and ranks by
// that call's first request, so each agent's second turn goes ahead of the first turns
// of siblings still queued: between an agent's two turns at most one other turn runs
// (the one that took the slot while the agent's tool ran). Ranked by the run, every
// first turn ran before any second turn.
func TestToolFollowUpGoesAheadOfSiblingsFirstTurns(t *testing.T) {
	clock := newVirtualClock()
	ex := scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}}, clock)
	b := &gatedLoop{started: make(chan string), release: make(chan struct{})}
	svc, _ := newScheduledEngine(t, b, ex)
	useClock(svc, clock)
	r, err := svc.Start(t.Context(), Spec{Path: "probe.lua", Source: []byte(`function main()
  agent{prompt = "warm-up"}
  parallel({1, 2, 3, 4, 5, 6, 7, 8}, function(i) return agent{prompt = "agent " .. i} end)
end`)})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	firstDone := 0
	for k := 0; k < 17; k++ {
		select {
		case id := <-b.started:
			order = append(order, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("no turn started after %v", order)
		}
		// Before ending turn k, wait until every turn that will ever be asked for by
		// now is queued: the warm-up, the 8 first turns, and the second turn of each
		// agent whose first turn has ended.
		submitted := 1
		if k > 0 {
			submitted += 8 + firstDone
		}
		want := submitted - (k + 1)
		deadline := time.Now().Add(10 * time.Second)
		for ex.Stats().Waiting != want {
			if time.Now().After(deadline) {
				t.Fatalf("after %v: %d turns queued, want %d", order, ex.Stats().Waiting, want)
			}
			time.Sleep(100 * time.Microsecond)
		}
		if strings.HasSuffix(order[k], "#1") && k > 0 {
			firstDone++
		}
		b.release <- struct{}{}
	}
	if res := r.Wait(); res.Status != StatusCompleted {
		t.Fatalf("run %s: %v", res.Status, res.Err)
	}
	for i := 1; i <= 8; i++ {
		first := slices.Index(order, fmt.Sprintf("agent %d#1", i))
		second := slices.Index(order, fmt.Sprintf("agent %d#2", i))
		if first < 0 || second < first || second-first > 2 {
			t.Errorf("agent %d: turns at %d and %d of %v: want at most one other turn between them", i, first, second, order)
		}
	}
}
