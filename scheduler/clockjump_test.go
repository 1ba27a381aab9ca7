package scheduler

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// wallShifted returns t with its wall clock reading moved by d and its monotonic reading
// kept: what time.Now() returns after the system clock was set d ahead (or back) while
// the monotonic clock ran on. The time package offers no way to build such a value, so
// the monotonic word is copied from t (time.Time is a wall word, a monotonic word and
// a location). The result is checked, so a change of that layout fails loudly.
func wallShifted(t *testing.T, at time.Time, d time.Duration) time.Time {
	t.Helper()
	type rep struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	j := at.Add(d) // wall and monotonic both moved by d
	(*rep)(unsafe.Pointer(&j)).ext = (*rep)(unsafe.Pointer(&at)).ext
	if j.Sub(at) != 0 || j.Round(0).Sub(at.Round(0)) != d {
		t.Fatalf("cannot shift the wall reading of %v alone (monotonic difference %v, wall difference %v): the layout of time.Time changed",
			at, j.Sub(at), j.Round(0).Sub(at.Round(0)))
	}
	return j
}

// jumpClock is a Clock whose wall reading can be set ahead or back while its monotonic
// reading (the VirtualClock's, which carries one when started from time.Now()) runs on
// unchanged. Timers run on monotonic time, as time.AfterFunc does.
type jumpClock struct {
	t  *testing.T
	vc *testkit.VirtualClock

	mu     sync.Mutex
	offset time.Duration
}

func (c *jumpClock) Now() time.Time {
	c.mu.Lock()
	off := c.offset
	c.mu.Unlock()
	if off == 0 {
		return c.vc.Now()
	}
	return wallShifted(c.t, c.vc.Now(), off)
}

func (c *jumpClock) AfterFunc(d time.Duration, f func()) Timer { return c.vc.AfterFunc(d, f) }

func (c *jumpClock) jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// TestWallShifted: the helper's values behave as a clock step does to time.Now():
// durations and comparisons between them follow the monotonic reading, formatting and
// Unix follow the wall.
func TestWallShifted(t *testing.T) {
	now := time.Now()
	j := wallShifted(t, now, time.Hour)
	if j.Sub(now) != 0 || j.After(now) || !j.Equal(now) {
		t.Errorf("monotonic: Sub %v, After %v, Equal %v", j.Sub(now), j.After(now), j.Equal(now))
	}
	if j.Unix()-now.Unix() != 3600 {
		t.Errorf("wall: Unix differs by %d s, want 3600", j.Unix()-now.Unix())
	}
}

type jumpTurn struct {
	admitted time.Duration // monotonic time since the start when it was admitted
	status   int
	err      error
}

// jumpRun sends turns through an Executor on clk to the fake engine, which allows two
// requests in each fixed minute (from start) and reports its resets as Anthropic does, as
// absolute RFC 3339 times, besides OpenAI's durations. The engine keeps true time; the
// wall clock the scheduler reads is set jump ahead or back at jumpAt. It returns each
// turn's admission time (monotonic, from start) and status. The last turn arrives
// 5 s after the jump, the others at start.
func jumpRun(t *testing.T, start time.Time, turns int, jumpAt, jump time.Duration) []jumpTurn {
	vc := testkit.NewVirtualClock(start)
	clk := &jumpClock{t: t, vc: vc}
	eng := testkit.NewEngine(testkit.Config{Clock: vc, Slots: 8,
		Limits: testkit.Limits{RPM: 2, Window: testkit.Fixed, Period: time.Minute, Epoch: start, Anthropic: true}})
	e := NewExecutor(Config{Lanes: map[string]LaneConfig{testLane: {Scout: true}}}, clk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	results := make([]jumpTurn, turns)
	var wg sync.WaitGroup
	run := func(i int) {
		tt := Turn{RunID: fmt.Sprint("r", i), CallKey: fmt.Sprint("r", i, "/1"), Lane: testLane,
			Class: agent.ClassInteractive, Caller: "u", EstTokens: 10}
		p, err := e.Admit(ctx, tt)
		if err != nil {
			results[i].err = err
			return
		}
		results[i].admitted = vc.Now().Sub(start)
		res, err := eng.Do(ctx, &testkit.ChatRequest{Model: "m",
			Messages: []testkit.Message{{Role: "user", Content: testkit.Content("hello")}}})
		if err != nil {
			results[i].err = err
			p.Done(Outcome{Err: err})
			return
		}
		results[i].status = res.Status
		o := Outcome{Header: res.Header, StatusCode: res.Status}
		if res.Response != nil {
			u := res.Response.Usage
			o.Usage = agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
		}
		p.Done(o)
	}
	for i := range turns - 1 {
		wg.Go(func() { run(i) })
		synctest.Wait() // in order: turn i queues before turn i+1
	}
	jumped, poked := false, false
	// Bounded: 100 ms steps over five minutes of monotonic time.
	for vc.Now().Sub(start) < 5*time.Minute {
		synctest.Wait()
		if !jumped && vc.Now().Sub(start) >= jumpAt {
			clk.jump(jump)
			jumped = true
		}
		if !poked && vc.Now().Sub(start) >= jumpAt+5*time.Second {
			// A turn that arrives after the jump makes the scheduler look at its
			// budgets again before the timer it set for the waiting turns.
			wg.Go(func() { run(turns - 1) })
			poked = true
		}
		vc.Advance(100 * time.Millisecond)
	}
	synctest.Wait()
	cancel()
	wg.Wait()
	return results
}

// TestRateLimitWaitAcrossClockJump: turns wait for the fixed request windows of a
// provider whose reset headers are absolute times, and the wall clock is set an hour
// ahead or back while they wait. Each turn must be admitted when its window really
// opens, by the monotonic clock, as in the same run without a jump: not at once (a jump
// ahead would send the waiting turns into 429s) and not an hour late (a jump back would
// hang them). The engine keeps true time.
//
// The first window teaches the scheduler that the windows are fixed (one 429, at 59.3 s,
// in every run, with or without a jump: two readings of a two-request window cannot tell
// it from a bucket); the jump comes after that, at 65 s, while turns wait for the
// window at 120 s, and one more turn arrives at 70 s. After the first window no run
// gets a 429.
func TestRateLimitWaitAcrossClockJump(t *testing.T) {
	// time.Now() carries a monotonic reading (time.Now() inside a bubble does not);
	// moved to a whole second, so that the windows and the whole-second resets line up
	// the same way in every run.
	start := time.Now()
	start = start.Add(start.Round(0).Truncate(time.Second).Add(time.Second).Sub(start.Round(0)))
	const turns, jumpAt = 8, 65 * time.Second
	var base []jumpTurn
	synctest.Test(t, func(t *testing.T) { base = jumpRun(t, start, turns, jumpAt, 0) })
	for i, r := range base {
		t.Logf("no jump: turn %d admitted at %v, status %d, err %v", i, r.admitted, r.status, r.err)
		if r.err != nil {
			t.Fatalf("no jump: turn %d: %v", i, r.err)
		}
		if r.admitted > time.Minute && r.status == http.StatusTooManyRequests {
			t.Errorf("no jump: turn %d: admitted at %v and refused with 429", i, r.admitted)
		}
	}
	for _, jump := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(fmt.Sprintf("jump %v", jump), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := jumpRun(t, start, turns, jumpAt, jump)
				for i, r := range got {
					t.Logf("turn %d admitted at %v, status %d, err %v", i, r.admitted, r.status, r.err)
					switch {
					case r.err != nil:
						t.Errorf("turn %d: %v (it should have been admitted at %v)", i, r.err, base[i].admitted)
					case r.admitted > jumpAt && r.status == http.StatusTooManyRequests:
						t.Errorf("turn %d: admitted at %v, after the jump, and refused with 429", i, r.admitted)
					case r.admitted-base[i].admitted > time.Second || base[i].admitted-r.admitted > time.Second:
						t.Errorf("turn %d: admitted at %v, want %v as without the jump", i, r.admitted, base[i].admitted)
					}
				}
			})
		})
	}
}

// Absolute times in headers (Anthropic's RFC 3339 resets, an HTTP-date retry-after)
// become waits from the moment they are read: a wall clock set ahead or back afterwards
// moves neither. When luft's clock already disagrees with the server's Date by more than
// maxSkew, the wait is measured from the Date.
func TestAbsoluteResetsFollowTheMonotonicClock(t *testing.T) {
	now := time.Now()
	wall := now.Round(0).Truncate(time.Second)
	reset := wall.Add(30 * time.Second)
	for _, tc := range []struct {
		name string
		date time.Time // the server's Date; zero: none sent
		skew time.Duration
		want time.Duration // the wait from now
	}{
		{"no Date", time.Time{}, 0, reset.Sub(now.Round(0))},
		{"Date agrees", wall, 0, reset.Sub(now.Round(0))},
		{"luft an hour ahead of the server", wall, time.Hour, 30 * time.Second},
		{"luft an hour behind the server", wall, -time.Hour, 30 * time.Second},
		{"luft 3 s ahead, within maxSkew", wall, 3 * time.Second, reset.Sub(now.Round(0)) - 3*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := now
			if tc.skew != 0 {
				read = wallShifted(t, now, tc.skew)
			}
			h := http.Header{}
			h.Set("anthropic-ratelimit-requests-reset", reset.UTC().Format(time.RFC3339))
			h.Set("Retry-After", reset.UTC().Format(http.TimeFormat))
			if !tc.date.IsZero() {
				h.Set("Date", tc.date.UTC().Format(http.TimeFormat))
			}
			tel := ParseTelemetry(h, read)
			for what, at := range map[string]time.Time{"reset": tel.Requests.Reset, "retry-after": tel.RetryAt} {
				if got := at.Sub(read); got != tc.want {
					t.Errorf("%s: wait %v, want %v", what, got, tc.want)
				}
				// The system clock is set an hour back, then two hours ahead: the wait
				// left is what the monotonic clock says.
				for _, jump := range []time.Duration{-time.Hour, time.Hour} {
					if got := at.Sub(wallShifted(t, read, jump)); got != tc.want {
						t.Errorf("%s after the clock moved %v: wait %v, want %v", what, jump, got, tc.want)
					}
				}
			}
		})
	}
}
