package daemon

import (
	"context"
	"sync"

	"github.com/luft-run/luft/scheduler"
)

// Gate stands in front of the daemon's scheduler so that shutting down stops admitting
// turns while the turns already admitted go on: a turn that finishes within the grace
// period is journaled and never runs again. Build the Service with Gate.Wrap(scheduler)
// and pass the Gate in Options.
type Gate struct {
	once   sync.Once
	closed chan struct{}
}

// NewGate returns an open Gate.
func NewGate() *Gate { return &Gate{closed: make(chan struct{})} }

// Close stops admitting turns, those already waiting in the scheduler's queue too: each
// waits until its run is stopped.
func (g *Gate) Close() { g.once.Do(func() { close(g.closed) }) }

// Wrap returns s behind the gate. Permits pass through unchanged, so a scheduler's
// retries of an admitted turn (and its replica choice) are untouched.
func (g *Gate) Wrap(s scheduler.Scheduler) scheduler.Scheduler { return &gated{s: s, g: g} }

type gated struct {
	s scheduler.Scheduler
	g *Gate
}

func (x *gated) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	if x.g.isClosed() {
		return x.g.hold(ctx)
	}
	// A turn still waiting in the scheduler's queue when the gate closes is not admitted
	// either: its wait is called off, and it waits like a turn that came later.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-x.g.closed:
			cancel()
		case <-actx.Done():
		}
	}()
	p, err := x.s.Admit(actx, t)
	if x.g.isClosed() && ctx.Err() == nil {
		if err == nil {
			// Admitted as the gate closed, before the turn began: hand the slot back.
			p.Done(scheduler.Outcome{Err: context.Canceled})
		}
		return x.g.hold(ctx)
	}
	return p, err
}

// isClosed reports whether Close was called.
func (g *Gate) isClosed() bool {
	select {
	case <-g.closed:
		return true
	default:
		return false
	}
}

// hold keeps a turn that came to a closed gate until its run is stopped (suspended or
// cancelled by the shutdown).
func (g *Gate) hold(ctx context.Context) (scheduler.Permit, error) {
	<-ctx.Done()
	return nil, context.Cause(ctx)
}

// Stats forwards the scheduler's counters (runtime.Service.SchedulerStats).
func (x *gated) Stats() scheduler.ExecutorStats {
	if st, ok := x.s.(interface {
		Stats() scheduler.ExecutorStats
	}); ok {
		return st.Stats()
	}
	return scheduler.ExecutorStats{}
}
