package runtime

import (
	"context"
	"time"

	"github.com/luft-run/luft/scheduler"
)

// Every wait of the runtime — an agent's timeout_ms, the run's time budget and
// --timeout, retry backoff, polls for another process's cancel request and events —
// runs on Options.Clock, so tests drive them on a virtual clock like the scheduler's.

// nowClock is the wall clock's timers with the time read from now (Options.Now), for a
// Service given Now but no Clock.
type nowClock struct{ now func() time.Time }

func (c nowClock) Now() time.Time { return c.now() }

func (nowClock) AfterFunc(d time.Duration, f func()) scheduler.Timer { return time.AfterFunc(d, f) }

// sleepOn waits d on clock; it reports false when ctx ended first.
func sleepOn(ctx context.Context, clock scheduler.Clock, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	fired := make(chan struct{})
	t := clock.AfterFunc(d, func() { close(fired) })
	select {
	case <-fired:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}
