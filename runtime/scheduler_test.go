package runtime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// Tests of the runtime with the admission scheduler (SPEC §7): every turn passes the
// Executor, its notices become events, a suspension ends the run as suspended with its
// resume time, and HTTP failures are retried by the scheduler instead of the runtime.

// skipClock is a scheduler.Clock on which waiting takes no time: a timer fires at once,
// on its own goroutine, and moves the clock to its deadline.
type skipClock struct {
	mu  sync.Mutex
	now time.Time
}

type skipTimer struct {
	mu      sync.Mutex
	stopped bool
}

func (t *skipTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func (c *skipClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *skipClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	c.mu.Lock()
	at := c.now.Add(d)
	c.mu.Unlock()
	t := &skipTimer{}
	go func() {
		t.mu.Lock()
		stopped := t.stopped
		t.stopped = true
		t.mu.Unlock()
		if stopped {
			return
		}
		c.mu.Lock()
		if at.After(c.now) {
			c.now = at
		}
		c.mu.Unlock()
		f()
	}()
	return t
}

// statusErr is a backend error carrying an HTTP status, by the scheduler's convention.
type statusErr struct {
	code int
	h    http.Header
}

func (e *statusErr) Error() string       { return fmt.Sprintf("upstream answered HTTP %d", e.code) }
func (e *statusErr) StatusCode() int     { return e.code }
func (e *statusErr) Header() http.Header { return e.h }

// newScheduledEngine is newEngine with sched as the Service's scheduler.
func newScheduledEngine(t *testing.T, b adapters.Backend, sched scheduler.Scheduler) (*Service, *storage.SQLite) {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(Options{
		Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b), Scheduler: sched,
		Backoff: func(int) time.Duration { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

// A turn whose wait for the token budget would exceed suspend_after suspends the run:
// status suspended with the resume time on the result, the run's row and run_suspended,
// a rate_limit suspend event, and the call that never ran is not failed in the journal
// as finished work; a resume runs it.
func TestSchedulerSuspendsTheRun(t *testing.T) {
	b := &scripted{reply: func(_ context.Context, req agent.Request, _ int) (agent.Result, error) {
		return okText("re: "+req.Prompt, 2500, 2500), nil
	}}
	// 100 tokens a second; each call reserves 3,000 × 1.54. The first call uses 5,000, so
	// the second waits about 36 s, longer than suspend_after.
	sched := scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{TPM: 6000}, SuspendAfter: time.Second}, nil)
	e, st := newScheduledEngine(t, b, sched)
	src := `function main()
  local a = agent{prompt="one", max_tokens=3000}
  local b = agent{prompt="two", max_tokens=3000}
  report(a.output .. " " .. b.output)
end`
	before := time.Now()
	r := start(t, e, src)
	res := r.Wait()
	if res.Status != StatusSuspended || !errors.Is(res.Err, ErrSuspended) {
		t.Fatalf("status %s: %v", res.Status, res.Err)
	}
	var se *scheduler.SuspendError
	if !errors.As(res.Err, &se) || se.Reason != scheduler.ReasonTokens || se.Lane != "fake/" {
		t.Fatalf("err %#v", res.Err)
	}
	if !res.ResumeAfter.Equal(se.Until) || res.ResumeAfter.Before(before.Add(30*time.Second)) {
		t.Fatalf("resume after %v (until %v)", res.ResumeAfter, se.Until)
	}
	if !strings.Contains(res.Err.Error(), "lane fake/ has no tokens-per-minute budget left until") {
		t.Fatalf("message %q", res.Err)
	}
	evs := collect(t, r)
	limits := ofType(evs, event.RateLimit)
	if len(limits) != 1 || limits[0].Data["action"] != "suspend" || limits[0].Data["reason"] != "tokens" ||
		limits[0].Data["lane"] != "fake/" || numField(limits[0].Data, "wait_ms") < 30000 {
		t.Fatalf("rate_limit events %+v", limits)
	}
	sus := ofType(evs, event.RunSuspended)
	if len(sus) != 1 || sus[0].Data["resume_after"] != res.ResumeAfter.UTC().Format(time.RFC3339Nano) {
		t.Fatalf("run_suspended %+v", sus)
	}
	done := ofType(evs, event.AgentDone)
	if len(done) != 2 || done[0].Data["status"] != "ok" || done[1].Data["status"] != "cancelled" {
		t.Fatalf("agent_done %+v", done)
	}
	if last := evs[len(evs)-1]; last.Type != event.RunDone || last.Data["status"] != "suspended" {
		t.Fatalf("last event %+v", last)
	}
	row, err := st.GetRun(t.Context(), r.ID)
	if err != nil || row.Status != storage.StatusSuspended || !row.ResumeAfter.Equal(res.ResumeAfter) {
		t.Fatalf("row %+v, %v", row, err)
	}
	if asked(b, "two") != 0 {
		t.Fatal("the suspended call reached the backend")
	}

	// Resumed (here at once, on a scheduler without budgets): "one" replays from the
	// journal, "two" runs, and the resume time is cleared.
	e2, err := New(Options{Store: st, StateDir: e.opts.StateDir, Backends: adapters.NewRegistry("fake", b),
		Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := e2.Resume(t.Context(), ResumeSpec{Run: r.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res2 := r2.Wait(); res2.Status != StatusCompleted || res2.Report != "re: one re: two" || !res2.ResumeAfter.IsZero() {
		t.Fatalf("resumed: %s %v %v", res2.Status, res2.Report, res2.Err)
	}
	if asked(b, "one") != 1 || asked(b, "two") != 1 {
		t.Fatalf("asked one %d, two %d times", asked(b, "one"), asked(b, "two"))
	}
	if row, _ := st.GetRun(t.Context(), r.ID); row.Status != storage.StatusCompleted || !row.ResumeAfter.IsZero() {
		t.Fatalf("row after resume %+v", row)
	}
}

// A 429 is retried by the scheduler after the server's retry-after, at the turn's rank,
// and not by the runtime: agent_retry and rate_limit wait events, one call with two
// attempts.
func TestSchedulerRetriesA429(t *testing.T) {
	b := &scripted{reply: func(_ context.Context, req agent.Request, n int) (agent.Result, error) {
		if n == 1 {
			return agent.Result{Status: agent.StatusError}, &statusErr{code: 429, h: http.Header{"Retry-After": {"30"}}}
		}
		return okText("re: "+req.Prompt, 10, 5), nil
	}}
	clk := &skipClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e, _ := newScheduledEngine(t, b, scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 2}}, clk))
	r := start(t, e, `function main()
  local a = agent{prompt="p", retries=3}
  report(a.output .. " after " .. a.attempts)
end`)
	res := r.Wait()
	if res.Status != StatusCompleted || res.Report != "re: p after 2" {
		t.Fatalf("status %s %v: %v", res.Status, res.Report, res.Err)
	}
	if asked(b, "p") != 2 {
		t.Fatalf("backend asked %d times, want 2", asked(b, "p"))
	}
	evs := collect(t, r)
	retries := ofType(evs, event.AgentRetry)
	if len(retries) != 1 || retries[0].Data["reason"] != "rate_limited" || numField(retries[0].Data, "attempt") != 2 ||
		numField(retries[0].Data, "wait_ms") != 30000 || retries[0].Data["error"] != "upstream answered HTTP 429" {
		t.Fatalf("agent_retry %+v", retries)
	}
	limits := ofType(evs, event.RateLimit)
	if len(limits) != 1 || limits[0].Data["action"] != "wait" || limits[0].Data["reason"] != "retry_after" || numField(limits[0].Data, "wait_ms") != 30000 {
		t.Fatalf("rate_limit %+v", limits)
	}
	if d := ofType(evs, event.AgentDone); len(d) != 1 || d[0].Data["status"] != "ok" || numField(d[0].Data, "attempts") != 2 {
		t.Fatalf("agent_done %+v", d)
	}
}

// Failures: a 5xx that keeps failing is retried by the scheduler until its retries are
// used up, then the call fails without the runtime retrying it again; a 4xx is final;
// an error without an HTTP status (the mock's) keeps the runtime's own retries.
func TestSchedulerFailuresAndRuntimeRetries(t *testing.T) {
	b := &scripted{reply: func(_ context.Context, req agent.Request, n int) (agent.Result, error) {
		switch req.Prompt {
		case "5xx":
			return agent.Result{Status: agent.StatusError}, &statusErr{code: 503}
		case "4xx":
			return agent.Result{Status: agent.StatusError}, &statusErr{code: 400}
		case "plain":
			if n < 3 {
				return agent.Result{Status: agent.StatusError, Error: "flaky"}, errors.New("flaky")
			}
		}
		return okText("re: "+req.Prompt, 10, 5), nil
	}}
	clk := &skipClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	sched := scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 4}, MaxRetries: 2}, clk)
	e, _ := newScheduledEngine(t, b, sched)
	r := start(t, e, `function main()
  local r1 = agent{prompt="5xx", retries=3}
  local r2 = agent{prompt="4xx", retries=3}
  local ok1, e1, ok2, e2 = r1.ok, r1.error, r2.ok, r2.error
  local c = agent{prompt="plain", retries=3}
  report({tostring(ok1), tostring(e1), tostring(ok2), tostring(e2), c.status, c.attempts})
end`)
	res := r.Wait()
	if res.Status != StatusCompleted {
		t.Fatalf("status %s: %v", res.Status, res.Err)
	}
	rep := res.Report.([]any)
	if rep[0] != "false" || !strings.Contains(rep[1].(string), "turn main/1 on lane fake/: gave up after 3 attempts: upstream answered HTTP 503") {
		t.Fatalf("5xx call: %v", rep[:2])
	}
	if rep[2] != "false" || !strings.Contains(rep[3].(string), "upstream answered HTTP 400") {
		t.Fatalf("4xx call: %v", rep[2:4])
	}
	if fmt.Sprint(rep[4:]) != "[ok 3]" {
		t.Fatalf("plain call: %v", rep[4:])
	}
	evs := collect(t, r)
	var scheduled, own int
	for _, ev := range ofType(evs, event.AgentRetry) {
		if ev.Data["reason"] == "server_error" {
			scheduled++
		} else {
			own++
		}
	}
	if scheduled != 2 || own != 2 {
		t.Fatalf("agent_retry: %d by the scheduler (want 2), %d by the runtime (want 2)", scheduled, own)
	}
	if d := ofType(evs, event.AgentDone); len(d) != 3 || numField(d[0].Data, "attempts") != 3 || numField(d[1].Data, "attempts") != 1 {
		t.Fatalf("agent_done %+v", d)
	}
	if asked(b, "5xx") != 3 || asked(b, "4xx") != 1 || asked(b, "plain") != 3 {
		t.Fatalf("asked 5xx %d (want 3), 4xx %d (want 1), plain %d (want 3)", asked(b, "5xx"), asked(b, "4xx"), asked(b, "plain"))
	}
	if s := sched.Stats(); s.Waiting != 0 || s.Running != 0 {
		t.Fatalf("scheduler left busy: %+v", s)
	}
}

// noticeTap wraps a scheduler and tells a test about every queued notice.
type noticeTap struct {
	scheduler.Scheduler
	queued chan scheduler.Notice
}

func (n *noticeTap) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	inner := t.Notify
	t.Notify = func(x scheduler.Notice) {
		inner(x)
		if x.Kind == scheduler.NoticeQueued {
			n.queued <- x
		}
	}
	return n.Scheduler.Admit(ctx, t)
}

// Turns that find no free slot are queued with agent_queued events; the slots bound how
// many calls run at once.
func TestSchedulerQueuedEvents(t *testing.T) {
	tap := &noticeTap{
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}}, nil),
		queued:    make(chan scheduler.Notice, 8),
	}
	var mu sync.Mutex
	calls, running, peak := 0, 0, 0
	b := &scripted{reply: func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		mu.Lock()
		calls++
		first := calls == 1
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		if first {
			// Hold the only slot until the two other calls are queued behind it.
			for range 2 {
				select {
				case <-tap.queued:
				case <-ctx.Done():
					return agent.Result{}, ctx.Err()
				}
			}
		}
		return okText("re: "+req.Prompt, 10, 5), nil
	}}
	e, _ := newScheduledEngine(t, b, tap)
	r := start(t, e, `function main()
  report(parallel({1, 2, 3}, function(i) return agent{prompt="p"..i}.output end))
end`)
	res := r.Wait()
	if res.Status != StatusCompleted {
		t.Fatalf("status %s: %v", res.Status, res.Err)
	}
	if peak != 1 {
		t.Fatalf("%d calls ran at once on one slot", peak)
	}
	queued := ofType(collect(t, r), event.AgentQueued)
	if len(queued) != 2 {
		t.Fatalf("agent_queued events %+v", queued)
	}
	for i, q := range queued {
		if q.Data["lane"] != "fake/" || numField(q.Data, "position") != float64(i+1) || !strings.HasPrefix(fmt.Sprint(q.Data["call_key"]), "main") {
			t.Fatalf("agent_queued %d: %+v", i, q.Data)
		}
	}
}

// numField reads a number of an event's data, whatever JSON made of it.
func numField(d map[string]any, k string) float64 {
	switch v := d[k].(type) {
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case float64:
		return v
	}
	return -1
}
