package runtime

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
)

// asyncAppender is implemented by stores that can queue an append and commit it with
// others (storage.SQLite); waiting is separate from queueing.
type asyncAppender interface {
	AppendAsync(ctx context.Context, runID string, evs ...event.Event) (wait func() ([]event.Event, error))
}

// bus records a run's events in its log, then wakes subscribers. Events are queued in
// order and committed in batches by a writer goroutine; emitting waits for the disk only
// when maxPending events are already queued. Subscribers read from the log, so nothing
// is shown before it is stored, and a slow reader delays only itself, never the run.
//
// What a run records is bounded (SPEC §3): an event's payload over lim.MaxEventBytes is
// stored with its longest strings cut, and the event that would pass lim.MaxEvents or
// lim.MaxTotalBytes is refused and ends the run through overLimit. After that only the
// events that close the run (agent_done of the calls it cancels, phase_done,
// run_suspended, run_done) are stored.
type bus struct {
	log   storage.EventLog
	runID string
	now   func() time.Time
	lim   EventLimits
	// overLimit ends the run when it reaches a limit; called once, without b.mu held.
	overLimit func(error)

	mu      sync.Mutex
	queue   []func() error // pending commits, in emit order
	wake    chan struct{}  // closed when more events are stored
	idle    *sync.Cond     // signalled when the queue drains
	closed  bool
	err     error // the first failure to store an event
	running bool
	fail    func(error) // if set, told of every failure to store events

	count int   // events recorded by this attempt
	bytes int64 // their payloads' size
	over  bool  // a limit was reached

	// pending counts the events queued and not yet committed; emit waits on room while
	// there are maxPending. The bound is what a stopped run still has to write before
	// it can end, so it keeps the stop prompt on a slow disk.
	pending int
	room    *sync.Cond
}

func newBus(log storage.EventLog, runID string, now func() time.Time, lim EventLimits, overLimit func(error)) *bus {
	b := &bus{log: log, runID: runID, now: now, lim: lim.withDefaults(), overLimit: overLimit, wake: make(chan struct{})}
	b.idle = sync.NewCond(&b.mu)
	b.room = sync.NewCond(&b.mu)
	return b
}

// maxPending bounds the events of a run queued for the disk (see bus.pending); a few
// of the store's batches, so emitters still share commits.
const maxPending = 1024

// closing reports whether an event of type typ is still stored after a limit was
// reached: the ones that close the run and what it had under way, so its phases and
// calls end in the record. There are at most as many as calls in flight, plus the phase
// the run stopped in: the VM stops at its next instruction.
func closing(typ string) bool {
	return typ == event.RunDone || typ == event.RunSuspended || typ == event.AgentDone || typ == event.PhaseDone
}

// emit stamps and queues one event. It is safe from any goroutine; the events one
// goroutine emits are stored in the order it emits them.
func (b *bus) emit(ev event.Event) {
	size := event.Size(ev.Data)
	if size > b.lim.MaxEventBytes {
		ev.Data, size = capPayload(ev.Data, b.lim.MaxEventBytes)
	}
	b.mu.Lock()
	if !closing(ev.Type) {
		if b.over {
			b.mu.Unlock()
			return
		}
		if err := b.lim.check(b.count+1, b.bytes+int64(size)); err != nil {
			b.over = true
			b.mu.Unlock()
			if b.overLimit != nil {
				b.overLimit(err)
			}
			return
		}
	}
	b.count++
	b.bytes += int64(size)
	for b.pending >= maxPending {
		b.room.Wait()
	}
	b.pending++
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
		b.pending -= len(batch)
		b.room.Broadcast()
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

// EventLimits bound what one attempt of a run records (SPEC §3: no script can fill the
// disk). Zero fields take the defaults.
type EventLimits struct {
	// MaxEventBytes caps one event's payload as JSON; a bigger one is stored with its
	// longest strings cut, each with a marker. Default 1 MiB plus room for the fields
	// around a full log message or report (those are capped at 1 MiB themselves).
	MaxEventBytes int
	// MaxEvents caps the events of one attempt. Default 1,000,000: a run at the default
	// 10,000 agent calls records about 4 events per call, so this leaves 25 times that
	// for logs, phases and progress lines; small events take about 200-300 bytes each on
	// disk, so the count alone bounds an attempt at a few hundred MB.
	MaxEvents int
	// MaxTotalBytes caps the payload bytes of one attempt's events. Default 256 MiB:
	// without it 1,000,000 events of 1 MiB each could take a terabyte.
	MaxTotalBytes int64
}

// DefaultEventLimits are the limits zero fields of EventLimits stand for.
var DefaultEventLimits = EventLimits{MaxEventBytes: event.DefaultMaxBytes + 16<<10, MaxEvents: 1_000_000, MaxTotalBytes: 256 << 20}

func (l EventLimits) withDefaults() EventLimits {
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultEventLimits.MaxEventBytes
	}
	if l.MaxEvents <= 0 {
		l.MaxEvents = DefaultEventLimits.MaxEvents
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = DefaultEventLimits.MaxTotalBytes
	}
	return l
}

// check is the limit error for an attempt that would record count events of bytes in all.
func (l EventLimits) check(count int, bytes int64) error {
	var msg string
	switch {
	case count > l.MaxEvents:
		msg = fmt.Sprintf("event limit reached: the run recorded %d events in this attempt, the most limits.max_events (luft.toml) allows", l.MaxEvents)
	case bytes > l.MaxTotalBytes:
		msg = fmt.Sprintf("event limit reached: the run's events of this attempt would take more than %s, the most limits.max_events_bytes (luft.toml) allows", event.FormatBytes(l.MaxTotalBytes))
	default:
		return nil
	}
	return &lua.ScriptError{Kind: lua.KindLimit, Msg: msg + "; does a loop log, print or start phases without end? Write less, or raise the limit"}
}

// capPayload fits an event's fields into max bytes: long strings are cut with a marker;
// when that is not enough (a huge structure), each field too big is replaced by a marker
// saying what it was.
func capPayload(data map[string]any, limitBytes int) (map[string]any, int) {
	const limit = "limits.max_event_bytes"
	if fitted, ok := event.Fit(data, limitBytes, limit); ok {
		m := fitted.(map[string]any)
		return m, event.Size(m)
	}
	m := make(map[string]any, len(data))
	share := limitBytes / max(len(data), 1)
	for k, v := range data {
		if n := event.Size(v); n > share {
			v = fmt.Sprintf("[cut by luft: a value of %s not kept (%s)]", event.FormatBytes(int64(n)), limit)
		}
		m[k] = v
	}
	return m, event.Size(m)
}

// maxErrorBytes caps the message of the error a run ends with: a script's error(msg) may
// carry a 16 MB string, and the message goes into the run's row, run_done and the
// terminal.
const maxErrorBytes = 64 << 10

// cutError is an error whose message was cut; the error itself stays in the chain, so its
// kind is still found.
type cutError struct {
	error
	msg string
}

func (c *cutError) Error() string { return c.msg }
func (c *cutError) Unwrap() error { return c.error }

func capError(err error) error {
	if err == nil {
		return nil
	}
	if msg := err.Error(); len(msg) > maxErrorBytes {
		return &cutError{error: err, msg: event.Cut(msg, maxErrorBytes, "the error message cap")}
	}
	return err
}
