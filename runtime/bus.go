package runtime

import (
	"context"
	"sync"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// asyncAppender is implemented by stores that can queue an append and commit it with
// others (storage.SQLite); waiting is separate from queueing.
type asyncAppender interface {
	AppendAsync(ctx context.Context, runID string, evs ...event.Event) (wait func() ([]event.Event, error))
}

// bus records a run's events in its log, then wakes subscribers. Emitting never waits for
// the disk: events are queued in order and committed in batches by a writer goroutine.
// Subscribers read from the log, so nothing is shown before it is stored, and a slow
// reader delays only itself. Nothing is dropped.
type bus struct {
	log   storage.EventLog
	runID string
	now   func() time.Time

	mu      sync.Mutex
	queue   []func() error // pending commits, in emit order
	wake    chan struct{}  // closed when more events are stored
	idle    *sync.Cond     // signalled when the queue drains
	closed  bool
	err     error // the first failure to store an event
	running bool
	fail    func(error) // if set, told of every failure to store events
}

func newBus(log storage.EventLog, runID string, now func() time.Time) *bus {
	b := &bus{log: log, runID: runID, now: now, wake: make(chan struct{})}
	b.idle = sync.NewCond(&b.mu)
	return b
}

// emit stamps and queues one event. It is safe from any goroutine; events are stored in
// the order emit is called.
func (b *bus) emit(ev event.Event) {
	b.mu.Lock()
	ev.TS = b.now()
	var commit func() error
	if a, ok := b.log.(asyncAppender); ok {
		wait := a.AppendAsync(context.Background(), b.runID, ev)
		commit = func() error { _, err := wait(); return err }
	} else {
		commit = func() error { _, err := b.log.Append(context.Background(), b.runID, ev); return err }
	}
	b.queue = append(b.queue, commit)
	if !b.running {
		b.running = true
		go b.writer()
	}
	b.mu.Unlock()
}

// writer completes queued commits in order and wakes subscribers after each batch.
func (b *bus) writer() {
	b.mu.Lock()
	for len(b.queue) > 0 {
		batch := b.queue
		b.queue = nil
		b.mu.Unlock()
		var first error
		for _, commit := range batch {
			if err := commit(); err != nil && first == nil {
				first = err
			}
		}
		if first != nil && b.fail != nil {
			b.fail(first)
		}
		b.mu.Lock()
		if first != nil && b.err == nil {
			b.err = first
		}
		close(b.wake)
		b.wake = make(chan struct{})
	}
	b.running = false
	b.idle.Broadcast()
	b.mu.Unlock()
}

// flush waits until every event emitted so far is stored and returns the first failure.
func (b *bus) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.running || len(b.queue) > 0 {
		b.idle.Wait()
	}
	return b.err
}

// close marks the stream finished; subscribers end after the last event.
func (b *bus) close() {
	_ = b.flush()
	b.mu.Lock()
	b.closed = true
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
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
