package runtime

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/scheduler"
)

// A successful response's rate-limit headers reach the scheduler, which learns the lane's
// token budget from them.
func TestSuccessHeadersTeachTheScheduler(t *testing.T) {
	b := &scripted{reply: func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		res := okText("re: "+req.Prompt, 10, 5)
		res.Header = http.Header{}
		res.Header.Set("x-ratelimit-limit-tokens", "40000")
		res.Header.Set("x-ratelimit-remaining-tokens", "39985")
		res.Header.Set("x-ratelimit-reset-tokens", "22ms")
		return res, nil
	}}
	ex := scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 2}}, nil)
	svc, _ := newScheduledEngine(t, b, ex)
	r, err := svc.Start(t.Context(), Spec{Path: "h.lua", Source: []byte(`function main() agent{prompt="x"} end`)})
	if err != nil {
		t.Fatal(err)
	}
	if res := r.Wait(); res.Status != StatusCompleted {
		t.Fatal(res.Err)
	}
	lanes := ex.Stats().Lanes
	if len(lanes) != 1 || lanes[0].TokenLimit != 40000 {
		t.Fatalf("lane stats %+v: the token limit was not learned from the response headers", lanes)
	}
}

// recordingScheduler admits everything and records the turns it saw.
type recordingScheduler struct {
	mu    sync.Mutex
	turns []scheduler.Turn
}

func (s *recordingScheduler) Admit(_ context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns = append(s.turns, t)
	return noopPermit{}, nil
}

type noopPermit struct{}

func (noopPermit) Done(scheduler.Outcome) {}

// A continuation is a later turn of the same agent call (SPEC §7): the first turn of
// every call is new work, even in a run already served, and each call is its own
// conversation for replica affinity.
func TestFirstTurnOfEachCallIsNewWork(t *testing.T) {
	rec := &recordingScheduler{}
	svc, _ := newScheduledEngine(t, &scripted{reply: echo}, rec)
	r, err := svc.Start(t.Context(), Spec{Path: "c.lua", Source: []byte(`function main() agent{prompt="a"} agent{prompt="b"} end`)})
	if err != nil {
		t.Fatal(err)
	}
	if res := r.Wait(); res.Status != StatusCompleted {
		t.Fatal(res.Err)
	}
	if len(rec.turns) != 2 || rec.turns[0].Continuation || rec.turns[1].Continuation ||
		rec.turns[0].Conversation == rec.turns[1].Conversation {
		t.Fatalf("turns %+v: want two first turns of two conversations", rec.turns)
	}
}

// A run's turns count against its spec's caller in the scheduler's fair shares (a daemon
// hosts runs of many callers); a spec without one is the Service's caller.
func TestTurnsCarryTheRunsCaller(t *testing.T) {
	for _, tc := range []struct{ caller, want string }{{"cli:ada", "cli:ada"}, {"", "local"}} {
		rec := &recordingScheduler{}
		svc, _ := newScheduledEngine(t, &scripted{reply: echo}, rec)
		r, err := svc.Start(t.Context(), Spec{Path: "c.lua", Caller: tc.caller, Source: []byte(`function main() agent{prompt="a"} end`)})
		if err != nil {
			t.Fatal(err)
		}
		if res := r.Wait(); res.Status != StatusCompleted {
			t.Fatal(res.Err)
		}
		if len(rec.turns) != 1 || rec.turns[0].Caller != tc.want {
			t.Errorf("spec caller %q: turns %+v, want caller %q", tc.caller, rec.turns, tc.want)
		}
	}
}
