package luft_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft"
	"github.com/luft-run/luft/scheduler"
)

// manualClock stands still; its timers fire only when the test fires them.
type manualClock struct {
	now    time.Time
	timers chan *manualTimer // every AfterFunc, as it is made
}

type manualTimer struct {
	d       time.Duration
	f       func()
	mu      sync.Mutex
	stopped bool
}

func (c *manualClock) Now() time.Time { return c.now }

func (c *manualClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	t := &manualTimer{d: d, f: f}
	c.timers <- t
	return t
}

func (t *manualTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func (t *manualTimer) fire() {
	t.mu.Lock()
	stopped := t.stopped
	t.stopped = true
	t.mu.Unlock()
	if !stopped {
		t.f()
	}
}

// Options.Clock times the runs' waits: a run's Timeout ends it when the clock says so,
// and not before, however long the wall clock takes.
func TestOptionsClockTimesRuns(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), timers: make(chan *manualTimer, 1000)}
	hang, entered := blockOn("hang")
	eng := newEngine(t, luft.Options{Clock: clock, Backend: "hang"}, luft.WithBackend("hang", hang))
	run, err := eng.Start(t.Context(), luft.Script{Source: "function main() agent{prompt='hang'} end", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	for tm := range clock.timers {
		if tm.d == time.Hour {
			tm.fire()
			break
		}
	}
	res, err := run.Wait()
	if !errors.Is(err, luft.ErrTimeout) || res.Status != luft.StatusFailed {
		t.Fatalf("after the clock's hour: %s %v", res.Status, err)
	}
	for ev, err := range eng.Events(t.Context(), run.ID(), 0) {
		if err != nil || !ev.Time.Equal(clock.now) {
			t.Fatalf("event %d %s at %v, want the clock's %v (%v)", ev.Seq, ev.Type, ev.Time, clock.now, err)
		}
	}
}
