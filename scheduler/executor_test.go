package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// fakeClock is the test kit's VirtualClock as the Executor's Clock: it moves only when a
// test advances it, and due timers fire on the advancing goroutine, in time order, each
// at its own time.
type fakeClock struct{ *testkit.VirtualClock }

func newFakeClock() fakeClock { return fakeClock{testkit.NewVirtualClock(t0)} }

func (c fakeClock) AfterFunc(d time.Duration, f func()) Timer { return c.VirtualClock.AfterFunc(d, f) }

// httpErr is a backend error by the convention of HTTPStatus.
type httpErr struct {
	code int
	h    http.Header
}

func (e *httpErr) Error() string       { return fmt.Sprintf("provider said HTTP %d", e.code) }
func (e *httpErr) StatusCode() int     { return e.code }
func (e *httpErr) Header() http.Header { return e.h }

// notices records what Notify was told.
type notices struct {
	mu sync.Mutex
	ns []Notice
}

func (r *notices) notify(n Notice) {
	r.mu.Lock()
	r.ns = append(r.ns, n)
	r.mu.Unlock()
}

func (r *notices) all() []Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ns)
}

func (r *notices) kinds() []NoticeKind {
	var out []NoticeKind
	for _, n := range r.all() {
		out = append(out, n.Kind)
	}
	return out
}

func (r *notices) last(k NoticeKind) (Notice, bool) {
	ns := r.all()
	for i := len(ns) - 1; i >= 0; i-- {
		if ns[i].Kind == k {
			return ns[i], true
		}
	}
	return Notice{}, false
}

type admitResult struct {
	p   Permit
	err error
}

// admitAsync runs Admit on a goroutine of its own.
func admitAsync(ctx context.Context, e *Executor, t Turn) <-chan admitResult {
	ch := make(chan admitResult, 1)
	go func() {
		p, err := e.Admit(ctx, t)
		ch <- admitResult{p, err}
	}()
	return ch
}

// againAsync runs Retrier.Again on a goroutine of its own.
func againAsync(ctx context.Context, p Permit, o Outcome) <-chan admitResult {
	ch := make(chan admitResult, 1)
	go func() {
		next, err := p.(Retrier).Again(ctx, o)
		ch <- admitResult{next, err}
	}()
	return ch
}

// ready returns the answer on ch if there is one; call it after synctest.Wait.
func ready(ch <-chan admitResult) (admitResult, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return admitResult{}, false
	}
}

func turn(run, class string, est int, n *notices) Turn {
	cl := agent.ClassInteractive
	if class == "b" {
		cl = agent.ClassBatch
	}
	t := Turn{RunID: run, CallKey: run + "/1", Lane: testLane, Class: cl, Caller: "u", EstTokens: est}
	if n != nil {
		t.Notify = n.notify
	}
	return t
}

func mustAdmit(t *testing.T, e *Executor, tt Turn) Permit {
	t.Helper()
	p, err := e.Admit(context.Background(), tt)
	if err != nil {
		t.Fatalf("admit %s: %v", tt.RunID, err)
	}
	return p
}

func okOutcome(n int) Outcome { return Outcome{Usage: agent.Usage{Input: n}} }

func lanes(lc LaneConfig) Config { return Config{Lanes: map[string]LaneConfig{testLane: lc}} }

// Through the blocking API: interactive turns go before batch turns that queued earlier,
// each class in arrival order, and each queued turn is told its place.
func TestExecutorInteractiveBeforeBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := NewExecutor(lanes(LaneConfig{Slots: 1}), newFakeClock())
		running := mustAdmit(t, e, turn("x", "i", 100, nil))
		names := []string{"b1", "b2", "i1", "i2"}
		rec := map[string]*notices{}
		waiting := map[string]<-chan admitResult{}
		for _, name := range names {
			rec[name] = &notices{}
			waiting[name] = admitAsync(context.Background(), e, turn(name, name[:1], 100, rec[name]))
			synctest.Wait() // arrivals in this order
		}
		wantPos := map[string]int{"b1": 1, "b2": 2, "i1": 1, "i2": 2}
		for _, name := range names {
			n, found := rec[name].last(NoticeQueued)
			if !found || n.Position != wantPos[name] || n.Lane != testLane || n.RunID != name || n.CallKey != name+"/1" {
				t.Fatalf("%s: queued notice %+v (found %v), want position %d", name, n, found, wantPos[name])
			}
		}
		if s := e.Stats(); s.Waiting != 4 || s.Running != 1 || s.Lanes[0].QueuedBatch != 2 || s.Lanes[0].QueuedInteractive != 2 {
			t.Fatalf("stats %+v", s)
		}
		var order []string
		for range names {
			running.Done(okOutcome(100))
			synctest.Wait()
			var got []string
			for name, ch := range waiting {
				if r, ok := ready(ch); ok {
					if r.err != nil {
						t.Fatalf("%s: %v", name, r.err)
					}
					got = append(got, name)
					running = r.p
					delete(waiting, name)
				}
			}
			if len(got) != 1 {
				t.Fatalf("one Done admitted %v, want exactly one turn", got)
			}
			order = append(order, got[0])
		}
		running.Done(okOutcome(100))
		if want := []string{"i1", "i2", "b1", "b2"}; !slices.Equal(order, want) {
			t.Fatalf("admission order %v, want %v", order, want)
		}
		if s := e.Stats(); s.Waiting != 0 || s.Running != 0 || s.Lanes[0].Admitted != 5 {
			t.Fatalf("stats at the end %+v", s)
		}
	})
}

// A caller that gives up while queued is withdrawn: its Admit fails with the context's
// error and it never takes the slot.
func TestExecutorCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := NewExecutor(lanes(LaneConfig{Slots: 1}), newFakeClock())
		first := mustAdmit(t, e, turn("a", "i", 100, nil))
		ctx, cancel := context.WithCancel(context.Background())
		waiting := admitAsync(ctx, e, turn("b", "i", 100, nil))
		synctest.Wait()
		if _, done := ready(waiting); done {
			t.Fatal("admitted without a free slot")
		}
		cancel()
		synctest.Wait()
		r, done := ready(waiting)
		if !done || !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "admit b/1") {
			t.Fatalf("after cancel: done=%v err=%v", done, r.err)
		}
		if s := e.Stats(); s.Waiting != 0 || s.Lanes[0].QueuedInteractive != 0 {
			t.Fatalf("withdrawn turn still counted: %+v", s)
		}
		first.Done(okOutcome(100))
		// The slot is free: this Admit does not block (synctest would report a deadlock).
		mustAdmit(t, e, turn("c", "i", 100, nil)).Done(okOutcome(100))

		// A context that is over before Admit is refused at once.
		if _, err := e.Admit(ctx, turn("d", "i", 100, nil)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Admit with a done context: %v", err)
		}
	})
}

// A turn whose budget is short waits inside the scheduler, is told until when, and is
// admitted when the fake clock passes the refill; the timer is armed by the executor.
func TestExecutorWaitsForBudgetRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		e := NewExecutor(lanes(LaneConfig{TPM: 60000}), clk) // 1,000 tokens a second
		// 20,000 estimated + a 54 % margin before any sample = 30,800 reserved.
		first := mustAdmit(t, e, turn("a", "i", 20000, nil))
		rec := &notices{}
		waiting := admitAsync(context.Background(), e, turn("b", "i", 20000, rec))
		synctest.Wait()
		if got := rec.kinds(); !slices.Equal(got, []NoticeKind{NoticeQueued, NoticeWait}) {
			t.Fatalf("notices %v, want queued then wait", got)
		}
		w, _ := rec.last(NoticeWait)
		// 30,800 needed, 29,200 left: 1.6 s at 1,000 a second, plus the core's 1 ms slack.
		wantUntil := t0.Add(1601 * time.Millisecond)
		if w.Reason != ReasonTokens || !w.Until.Equal(wantUntil) || w.Wait != 1601*time.Millisecond {
			t.Fatalf("wait notice %+v, want until %v", w, wantUntil)
		}
		clk.Advance(1500 * time.Millisecond)
		synctest.Wait()
		if _, done := ready(waiting); done {
			t.Fatal("admitted before the budget refilled")
		}
		clk.Advance(200 * time.Millisecond)
		synctest.Wait()
		r, done := ready(waiting)
		if !done || r.err != nil {
			t.Fatalf("after the refill: done=%v err=%v", done, r.err)
		}
		if l := r.p.(interface{ Lane() string }).Lane(); l != testLane {
			t.Fatalf("admitted on lane %q", l)
		}
		first.Done(okOutcome(20000))
		r.p.Done(okOutcome(20000))
	})
}

// A wait longer than SuspendAfter suspends the run: every queued turn of it fails with a
// *SuspendError naming the resume time, the run is told once, and a turn it submits
// later is suspended at once. Other runs are not touched.
func TestExecutorSuspendsWhenTheWaitIsTooLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		cfg := lanes(LaneConfig{Slots: 1, TPM: 6000}) // 100 tokens a second
		cfg.SuspendAfter = 10 * time.Second
		e := NewExecutor(cfg, clk)
		first := mustAdmit(t, e, turn("a", "i", 3000, nil)) // reserves 4,620 of 6,000
		rec := &notices{}
		r1 := admitAsync(context.Background(), e, turn("r", "i", 3000, rec))
		synctest.Wait()
		r2 := admitAsync(context.Background(), e, turn("r", "i", 10, rec))
		synctest.Wait()
		other := admitAsync(context.Background(), e, turn("o", "i", 10, nil))
		synctest.Wait()

		clk.Advance(time.Second)
		first.Done(okOutcome(3000)) // 3,000 left; r's first turn needs 4,620: 16 s away
		synctest.Wait()
		for i, ch := range []<-chan admitResult{r1, r2} {
			res, done := ready(ch)
			var se *SuspendError
			if !done || !errors.As(res.err, &se) {
				t.Fatalf("turn %d of the run: done=%v err=%v", i+1, done, res.err)
			}
			if se.RunID != "r" || se.Reason != ReasonTokens || se.Lane != testLane || se.Until.Sub(clk.Now()) <= cfg.SuspendAfter {
				t.Fatalf("suspend error %+v", se)
			}
			if msg := se.Error(); !strings.Contains(msg, "run r suspended: lane fake/m has no tokens-per-minute budget left until "+se.Until.Format(time.RFC3339)) ||
				!strings.Contains(msg, "tokens-per-minute") {
				t.Fatalf("message %q", msg)
			}
		}
		var suspends []Notice
		for _, n := range rec.all() {
			if n.Kind == NoticeSuspend {
				suspends = append(suspends, n)
			}
		}
		if len(suspends) != 1 || suspends[0].Reason != ReasonTokens || suspends[0].Wait <= cfg.SuspendAfter {
			t.Fatalf("suspend notices %+v, want one", suspends)
		}
		// The other run's small turn is admitted now that r's turns are gone.
		o, done := ready(other)
		if !done || o.err != nil {
			t.Fatalf("other run: done=%v err=%v", done, o.err)
		}
		o.p.Done(okOutcome(10))
		// The run stays suspended: a new turn of it is refused at once.
		var se *SuspendError
		if _, err := e.Admit(context.Background(), turn("r", "i", 10, nil)); !errors.As(err, &se) {
			t.Fatalf("new turn of the suspended run: %v", err)
		}
		if s := e.Stats(); s.Waiting != 0 || s.Running != 0 || s.Lanes[0].Suspended != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// A 429 reported with Again: the lane pauses for the server's retry-after, the turn is
// told it will be retried, and it is admitted again ahead of a turn that queued after
// it was first admitted, returning the new permit from Again.
func TestExecutorRateLimitedTurnIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		e := NewExecutor(lanes(LaneConfig{Slots: 1}), clk)
		rec := &notices{}
		first := mustAdmit(t, e, turn("a", "i", 100, rec))
		later := admitAsync(context.Background(), e, turn("b", "i", 100, nil))
		synctest.Wait()

		fail := &httpErr{code: 429, h: http.Header{"Retry-After": {"3"}}}
		again := againAsync(context.Background(), first, Outcome{Err: fail})
		synctest.Wait()
		if _, done := ready(again); done {
			t.Fatal("Again returned before the retry-after passed")
		}
		if _, done := ready(later); done {
			t.Fatal("a paused lane admitted another turn")
		}
		retry, found := rec.last(NoticeRetry)
		if !found || retry.Attempt != 2 || retry.Reason != ReasonRateLimited || retry.Wait != 3*time.Second || !errors.Is(retry.Err, fail) {
			t.Fatalf("retry notice %+v (found %v)", retry, found)
		}
		if w, _ := rec.last(NoticeWait); w.Reason != ReasonRetryAfter || w.Wait != 3*time.Second {
			t.Fatalf("wait notice %+v", w)
		}
		if s := e.Stats(); s.Lanes[0].RateLimited != 1 || s.Waiting != 2 || s.Running != 0 {
			t.Fatalf("stats after the 429: %+v", s)
		}

		clk.Advance(3 * time.Second)
		synctest.Wait()
		r, done := ready(again)
		if !done || r.err != nil || r.p == nil {
			t.Fatalf("after the pause: done=%v err=%v", done, r.err)
		}
		if _, done := ready(later); done {
			t.Fatal("the later turn went before the retried one")
		}
		// The second attempt succeeds: Again says the turn is over.
		if next, err := r.p.(Retrier).Again(context.Background(), okOutcome(100)); next != nil || err != nil {
			t.Fatalf("Again after a success = %v, %v", next, err)
		}
		synctest.Wait()
		b, done := ready(later)
		if !done || b.err != nil {
			t.Fatalf("later turn: done=%v err=%v", done, b.err)
		}
		b.p.Done(okOutcome(100))
		b.p.Done(okOutcome(100)) // harmless
		if s := e.Stats(); s.Waiting != 0 || s.Running != 0 || s.Lanes[0].Admitted != 3 {
			t.Fatalf("stats at the end: %+v", s)
		}
	})
}

// Retries are bounded: when they are used up Again fails with a *RefuseError that wraps
// the last failure.
func TestExecutorRetriesExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		cfg := lanes(LaneConfig{Slots: 1})
		cfg.MaxRateRetries = 1
		e := NewExecutor(cfg, clk)
		p := mustAdmit(t, e, turn("a", "i", 100, nil))
		fail := &httpErr{code: 429, h: http.Header{"Retry-After": {"1"}}}
		ch := againAsync(context.Background(), p, Outcome{Err: fail})
		synctest.Wait()
		clk.Advance(time.Second)
		synctest.Wait()
		r, done := ready(ch)
		if !done || r.err != nil {
			t.Fatalf("first retry: done=%v err=%v", done, r.err)
		}
		next, err := r.p.(Retrier).Again(context.Background(), Outcome{Err: fail})
		var re *RefuseError
		if next != nil || !errors.As(err, &re) || re.Reason != ReasonRetriesExhausted || re.Attempts != 2 || !errors.Is(err, fail) {
			t.Fatalf("second 429: %v, %v", next, err)
		}
		if !strings.Contains(err.Error(), "gave up after 2 attempts: provider said HTTP 429") {
			t.Fatalf("message %q", err)
		}
		if s := e.Stats(); s.Waiting != 0 || s.Running != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// A 5xx backs off and retries; a caller that gives up during the backoff withdraws it.
func TestExecutorServerErrorBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		e := NewExecutor(lanes(LaneConfig{Slots: 1}), clk)
		rec := &notices{}
		p := mustAdmit(t, e, turn("a", "i", 100, rec))
		ch := againAsync(context.Background(), p, Outcome{Err: &httpErr{code: 503}})
		synctest.Wait()
		retry, found := rec.last(NoticeRetry)
		if !found || retry.Reason != ReasonServerError || retry.Attempt != 2 || retry.Wait < 750*time.Millisecond || retry.Wait > 1250*time.Millisecond {
			t.Fatalf("retry notice %+v", retry)
		}
		clk.Advance(retry.Wait)
		synctest.Wait()
		r, done := ready(ch)
		if !done || r.err != nil {
			t.Fatalf("after the backoff: done=%v err=%v", done, r.err)
		}
		// No response at all (code 0) is retried the same way; this time the caller
		// gives up while it backs off.
		ctx, cancel := context.WithCancel(context.Background())
		ch = againAsync(ctx, r.p, Outcome{Err: &httpErr{code: 0}})
		synctest.Wait()
		if _, done := ready(ch); done {
			t.Fatal("Again returned during the backoff")
		}
		cancel()
		synctest.Wait()
		if r, done := ready(ch); !done || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled during the backoff: done=%v err=%v", done, r.err)
		}
		if s := e.Stats(); s.Waiting != 0 || s.Running != 0 || s.Lanes[0].Delayed != 0 {
			t.Fatalf("stats %+v", s)
		}
		clk.Advance(time.Minute) // nothing is re-admitted for a caller that left
		mustAdmit(t, e, turn("b", "i", 100, nil)).Done(okOutcome(100))
	})
}

// Done ends a turn the scheduler would have retried: no retry notice, no re-admission,
// but the lane still honours the 429's pause.
func TestExecutorDoneEndsARetryableTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		e := NewExecutor(lanes(LaneConfig{Slots: 1}), clk)
		rec := &notices{}
		p := mustAdmit(t, e, turn("a", "i", 100, rec))
		p.Done(Outcome{StatusCode: 429, Header: http.Header{"Retry-After-Ms": {"500"}}})
		if got := rec.kinds(); len(got) != 0 {
			t.Fatalf("notices %v after Done", got)
		}
		later := admitAsync(context.Background(), e, turn("b", "i", 100, nil))
		synctest.Wait()
		if _, done := ready(later); done {
			t.Fatal("admitted while the lane is paused")
		}
		clk.Advance(500 * time.Millisecond)
		synctest.Wait()
		r, done := ready(later)
		if !done || r.err != nil {
			t.Fatalf("after the pause: done=%v err=%v", done, r.err)
		}
		if s := e.Stats(); s.Running != 1 || s.Waiting != 0 || s.Lanes[0].Admitted != 2 {
			t.Fatalf("stats %+v", s)
		}
		r.p.Done(okOutcome(100))
	})
}

// A 429 whose retry-after is beyond suspend_after suspends the run of the waiting turn.
func TestExecutorSuspendWhileWaitingToRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		e := NewExecutor(lanes(LaneConfig{Slots: 1}), clk)
		rec := &notices{}
		p := mustAdmit(t, e, turn("a", "i", 100, rec))
		next, err := p.(Retrier).Again(context.Background(), Outcome{Err: &httpErr{code: 429, h: http.Header{"Retry-After": {"600"}}}})
		var se *SuspendError
		if next != nil || !errors.As(err, &se) || se.Reason != ReasonRetryAfter || !se.Until.Equal(t0.Add(10*time.Minute)) {
			t.Fatalf("Again = %v, %v", next, err)
		}
		if got := rec.kinds(); !slices.Equal(got, []NoticeKind{NoticeRetry, NoticeSuspend}) {
			t.Fatalf("notices %v", got)
		}
	})
}

func TestExecutorRefusesOversize(t *testing.T) {
	e := NewExecutor(lanes(LaneConfig{TPM: 1000}), newFakeClock())
	_, err := e.Admit(context.Background(), turn("a", "i", 2000, nil))
	var re *RefuseError
	if !errors.As(err, &re) || re.Reason != ReasonOversize || re.Need != 2000 || re.Allow != 1000 {
		t.Fatalf("err = %v", err)
	}
	want := "turn a/1 refused: it needs about 2000 tokens but the lane fake/m allows 1000 per minute"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message %q, want prefix %q", err, want)
	}
	if s := e.Stats(); s.Waiting != 0 || s.Lanes[0].Refused != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOutcomeResult(t *testing.T) {
	now := t0
	for _, tt := range []struct {
		name string
		o    Outcome
		want Status
		wait time.Duration // RetryAt - now
	}{
		{"success", Outcome{}, StatusOK, 0},
		{"plain error is final", Outcome{Err: errors.New("boom")}, StatusError, 0},
		{"cancelled", Outcome{Err: fmt.Errorf("send: %w", context.Canceled)}, StatusCanceled, 0},
		{"timed out", Outcome{Err: context.DeadlineExceeded}, StatusCanceled, 0},
		{"cancelled beats a status", Outcome{Err: fmt.Errorf("%w: %w", &httpErr{code: 0}, context.Canceled)}, StatusCanceled, 0},
		{"429 with headers from the error", Outcome{Err: fmt.Errorf("wrapped: %w", &httpErr{code: 429, h: http.Header{"Retry-After": {"2"}}})}, StatusRateLimited, 2 * time.Second},
		{"outcome headers win", Outcome{Header: http.Header{"Retry-After-Ms": {"700"}}, Err: &httpErr{code: 429, h: http.Header{"Retry-After": {"2"}}}}, StatusRateLimited, 700 * time.Millisecond},
		{"503", Outcome{Err: &httpErr{code: 503}}, StatusServerError, 0},
		{"no response", Outcome{Err: &httpErr{code: 0}}, StatusServerError, 0},
		{"400", Outcome{Err: &httpErr{code: 400}}, StatusError, 0},
		{"status code without error", Outcome{StatusCode: 429}, StatusRateLimited, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, failure := outcomeResult(tt.o, now)
			if res.Status != tt.want {
				t.Fatalf("status %s, want %s", res.Status, tt.want)
			}
			if (failure == nil) != (tt.want == StatusOK) {
				t.Fatalf("failure %v for status %s", failure, res.Status)
			}
			var wait time.Duration
			if !res.Telemetry.RetryAt.IsZero() {
				wait = res.Telemetry.RetryAt.Sub(now)
			}
			if wait != tt.wait {
				t.Fatalf("retry at +%v, want +%v", wait, tt.wait)
			}
		})
	}
	if _, _, ok := HTTPStatus(errors.New("x")); ok {
		t.Fatal("HTTPStatus of a plain error")
	}
	if code, h, ok := HTTPStatus(fmt.Errorf("w: %w", &httpErr{code: 502, h: http.Header{"A": {"b"}}})); !ok || code != 502 || h.Get("A") != "b" {
		t.Fatalf("HTTPStatus = %d, %v, %v", code, h, ok)
	}
}

// Finish falls back to Done for permits that do not retry (the Gate).
func TestFinishWithAGate(t *testing.T) {
	g := NewGate(1)
	p, err := g.Admit(context.Background(), Turn{})
	if err != nil {
		t.Fatal(err)
	}
	if next, err := Finish(context.Background(), p, Outcome{Err: &httpErr{code: 429}}); next != nil || err != nil {
		t.Fatalf("Finish = %v, %v", next, err)
	}
	if s := g.Stats(); s.Running != 0 {
		t.Fatalf("gate still running %d", s.Running)
	}
}

// Many goroutines on several lanes and runs, some giving up, some failing with 5xx and
// retrying: never more turns on a lane than its slots, and everything is accounted for
// at the end. Run with -race.
func TestExecutorBoundsConcurrencyUnderLoad(t *testing.T) {
	const slots, workers, turns = 3, 48, 20
	cfg := Config{DefaultLane: LaneConfig{Slots: slots}, BackoffBase: time.Microsecond, BackoffMax: time.Millisecond}
	e := NewExecutor(cfg, nil) // the real clock: backoffs of microseconds
	var mu sync.Mutex
	running := map[string]int{}
	peak := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			lane := fmt.Sprintf("fake/m%d", w%3)
			class := agent.ClassInteractive
			if w%2 == 1 {
				class = agent.ClassBatch
			}
			var seen sync.Map
			for i := range turns {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(10) == 0 {
					cancel() // some callers give up before or while they wait
				}
				tt := Turn{RunID: fmt.Sprintf("r%d", w%8), CallKey: fmt.Sprintf("w%d/%d", w, i), Lane: lane, Class: class,
					Caller: fmt.Sprintf("c%d", w%4), EstTokens: 100, Notify: func(n Notice) { seen.Store(n.Kind, true) }}
				p, err := e.Admit(ctx, tt)
				for err == nil && p != nil {
					mu.Lock()
					running[lane]++
					if running[lane] > slots {
						t.Errorf("lane %s runs %d turns, slots %d", lane, running[lane], slots)
					}
					peak = max(peak, running[lane])
					mu.Unlock()
					o := okOutcome(100)
					if rng.IntN(8) == 0 {
						o = Outcome{Err: &httpErr{code: 503}}
					}
					mu.Lock()
					running[lane]--
					mu.Unlock()
					p, err = Finish(ctx, p, o)
				}
				var re *RefuseError
				if err != nil && !errors.Is(err, context.Canceled) && !errors.As(err, &re) {
					t.Errorf("turn %s: %v", tt.CallKey, err)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	s := e.Stats()
	if s.Waiting != 0 || s.Running != 0 {
		t.Fatalf("left behind: %+v", s)
	}
	for _, l := range s.Lanes {
		if l.Running != 0 || l.QueuedInteractive+l.QueuedBatch != 0 || l.Delayed != 0 {
			t.Fatalf("lane left busy: %+v", l)
		}
	}
	if peak == 0 || peak > slots {
		t.Fatalf("peak %d", peak)
	}
}

// A turn given up after it was sent counts its estimate against the budget (the provider
// may have billed it); one withdrawn before it was sent costs nothing.
func TestExecutorCanceledTurnCountsItsEstimate(t *testing.T) {
	e := NewExecutor(lanes(LaneConfig{TPM: 60000}), newFakeClock())
	p := mustAdmit(t, e, turn("a", "i", 20000, nil)) // reserves 30,800
	p.Done(Outcome{Err: context.Canceled})
	if left := e.Stats().Lanes[0].TokensLeft; left != 40000 {
		t.Fatalf("tokens left %v, want 40000", left)
	}
	p = mustAdmit(t, e, turn("b", "i", 100, nil))
	p.Done(Outcome{Usage: agent.Usage{Input: 60, Output: 40}})
	if left := e.Stats().Lanes[0].TokensLeft; left != 39900 {
		t.Fatalf("tokens left %v, want 39900", left)
	}
}
