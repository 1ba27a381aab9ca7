package runtime

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// manualClock is a Now that moves only when the test says.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Two 3 s calls on one slot: the second waits 3 s in the queue, and its agent_done says
// so apart from its run time (elapsed 6 s = queued 3 s + run 3 s), instead of a 6 s
// latency for a 3 s call.
func TestAgentDoneSplitsQueueWaitFromRunTime(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	tap := &noticeTap{
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}}, nil),
		queued:    make(chan scheduler.Notice, 8),
	}
	var once sync.Once
	b := &scripted{reply: func(ctx context.Context, req agent.Request, _ int) (agent.Result, error) {
		first := false
		once.Do(func() { first = true })
		if first {
			select { // hold the only slot until the other call is queued behind it
			case <-tap.queued:
			case <-ctx.Done():
				return agent.Result{}, ctx.Err()
			}
		}
		clock.advance(3 * time.Second)
		return okText("re: "+req.Prompt, 10, 5), nil
	}}
	dir := t.TempDir()
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b), Scheduler: tap,
		Backoff: func(int) time.Duration { return 0 }, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, svc, `function main()
  report(parallel({1, 2}, function(i) return agent{prompt="p"..i}.output end))
end`)
	if res := r.Wait(); res.Status != StatusCompleted {
		t.Fatalf("status %s: %v", res.Status, res.Err)
	}
	type split struct{ elapsed, queued, approval, run float64 }
	var got []split
	for _, ev := range ofType(collect(t, r), event.AgentDone) {
		d := ev.Data
		got = append(got, split{num(d["elapsed_ms"]), num(d["queued_ms"]), num(d["approval_ms"]), num(d["run_ms"])})
	}
	if len(got) == 2 && got[0].queued > got[1].queued {
		got[0], got[1] = got[1], got[0]
	}
	// The first call's end is read after its slot is free, when the second may have moved
	// the clock on already: only its having waited for nothing is exact.
	if len(got) != 2 || got[0].queued != 0 || got[0].approval != 0 || got[0].run != got[0].elapsed || got[0].run < 3000 ||
		got[1] != (split{6000, 3000, 0, 3000}) {
		t.Fatalf("agent_done times (elapsed, queued, approval, run) = %v, want one call that did not wait and {6000 3000 0 3000}", got)
	}
}

// num is a JSON number of an event's data as float64.
func num(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case int64:
		return float64(n)
	case int:
		return float64(n)
	}
	return -1
}

// A call that waits 327 s for a person to allow its tool: agent_done counts those 327 s as
// approval_ms, not as the agent's run time.
func TestAgentDoneLeavesTheApprovalWaitOutOfRunTime(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	te := newToolEngine(t, noteRules)
	dir, ws := t.TempDir(), t.TempDir()
	e := openResumeEnvWith(t, dir, askBackend(t, te.url, ws), 0, nil)
	svc, err := New(Options{Store: e.st, StateDir: dir, Backends: adapters.NewRegistry("fake", askBackend(t, te.url, ws)),
		Scheduler: scheduler.NewGate(2), Backoff: func(int) time.Duration { return 0 }, CancelPoll: 10 * time.Millisecond,
		AskApprovals: true, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r, err := svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", `function main()
  report(agent{prompt = "keep a note", tools = {"write_file"}}.output)
end`)})
	if err != nil {
		t.Fatal(err)
	}
	req := awaitEvent(t, r, event.ApprovalRequested)
	clock.advance(327 * time.Second)
	if _, err := svc.Approve(t.Context(), r.ID, req.Data["approval_id"].(string), true); err != nil {
		t.Fatal(err)
	}
	if res := waitRun(t, r); res.Status != StatusCompleted {
		t.Fatalf("run %s: %v", res.Status, res.Err)
	}
	done := ofType(collect(t, r), event.AgentDone)
	if len(done) != 1 {
		t.Fatalf("agent_done events: %v", done)
	}
	d := done[0].Data
	if num(d["elapsed_ms"]) != 327000 || num(d["approval_ms"]) != 327000 || num(d["run_ms"]) != 0 || num(d["queued_ms"]) != 0 {
		t.Fatalf("agent_done = %v, want elapsed_ms 327000, all of it approval_ms, run_ms 0", d)
	}
}
