package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// bus records a run's events in its log, then wakes subscribers. Events are never dropped:
// a subscriber reads from the log at its own pace, so a slow reader delays only itself.
type bus struct {
	mu     sync.Mutex
	log    storage.EventLog
	runID  string
	now    func() time.Time
	wake   chan struct{}
	closed bool
	err    error // the first append failure; the run fails with it
}

func newBus(log storage.EventLog, runID string, now func() time.Time) *bus {
	return &bus{log: log, runID: runID, now: now, wake: make(chan struct{})}
}

// emit stamps, persists and announces one event. It is safe from any goroutine; events
// are ordered as emit calls are.
func (b *bus) emit(ev event.Event) event.Event {
	b.mu.Lock()
	ev.TS = b.now()
	out, err := b.log.Append(context.Background(), b.runID, ev)
	if err != nil && b.err == nil {
		b.err = err
	}
	old := b.wake
	b.wake = make(chan struct{})
	b.mu.Unlock()
	close(old)
	if len(out) == 1 {
		return out[0]
	}
	return ev
}

// close marks the stream finished; subscribers end after the last event.
func (b *bus) close() {
	b.mu.Lock()
	b.closed = true
	old := b.wake
	b.wake = make(chan struct{})
	b.mu.Unlock()
	close(old)
}

// subscribe streams every event with seq > since until the run is over or ctx ends.
func (b *bus) subscribe(ctx context.Context, since int64) <-chan event.Event {
	ch := make(chan event.Event, 256)
	go func() {
		defer close(ch)
		cursor := since
		for {
			b.mu.Lock()
			wake, closed := b.wake, b.closed
			b.mu.Unlock()
			evs, _ := b.log.Events(ctx, b.runID, cursor, 1024)
			for _, ev := range evs {
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
				cursor = ev.Seq
			}
			if len(evs) > 0 {
				continue
			}
			if closed {
				return
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
