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

// Close stops admitting new turns: each waits until its run is stopped.
func (g *Gate) Close() { g.once.Do(func() { close(g.closed) }) }

// Wrap returns s behind the gate. Permits pass through unchanged, so a scheduler's
// retries of an admitted turn (and its replica choice) are untouched.
func (g *Gate) Wrap(s scheduler.Scheduler) scheduler.Scheduler { return &gated{s: s, g: g} }

type gated struct {
	s scheduler.Scheduler
	g *Gate
}

func (x *gated) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	select {
	case <-x.g.closed:
		<-ctx.Done() // the run is suspended (or cancelled) by the shutdown
		return nil, context.Cause(ctx)
	default:
	}
	return x.s.Admit(ctx, t)
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
