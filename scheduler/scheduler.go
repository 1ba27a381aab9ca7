package scheduler

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/luft-run/luft/agent"
)

// Turn is one model request that wants to run.
type Turn struct {
	RunID        string
	CallKey      string
	Lane         string // backend + model, e.g. "mock/mock-1"
	Class        agent.Class
	Caller       string
	EstTokens    int  // estimated prompt + expected output tokens
	Continuation bool // follows a tool result or an earlier turn of the same call
}

// Outcome is what a turn cost and how it ended, reported when its permit is released.
type Outcome struct {
	Usage  agent.Usage
	Header http.Header // response headers, for rate-limit learning; may be nil
	Err    error
}

// Scheduler admits turns. Admit blocks until the turn may run or ctx ends.
type Scheduler interface {
	Admit(ctx context.Context, t Turn) (Permit, error)
}

// Permit is the right to run one turn. Done must be called exactly once.
type Permit interface {
	Done(o Outcome)
}

// Gate admits at most n turns at once, first come first served.
type Gate struct {
	slots chan struct{}

	mu      sync.Mutex
	waiting int
	stats   GateStats
}

// GateStats are counters a status view can show.
type GateStats struct {
	Admitted int
	Waited   int // turns that found no free slot on arrival
	Running  int
	Queued   int
}

// NewGate returns a Gate with n slots (n < 1 is treated as 1).
func NewGate(n int) *Gate {
	if n < 1 {
		n = 1
	}
	return &Gate{slots: make(chan struct{}, n)}
}

// Admit waits for a free slot.
func (g *Gate) Admit(ctx context.Context, t Turn) (Permit, error) {
	select {
	case g.slots <- struct{}{}:
	default:
		g.mu.Lock()
		g.stats.Waited++
		g.waiting++
		g.mu.Unlock()
		select {
		case g.slots <- struct{}{}:
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
		case <-ctx.Done():
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
			return nil, fmt.Errorf("admit %s: %w", t.CallKey, context.Cause(ctx))
		}
	}
	g.mu.Lock()
	g.stats.Admitted++
	g.stats.Running++
	g.mu.Unlock()
	return &gatePermit{g: g}, nil
}

// Stats returns a snapshot of the gate's counters.
func (g *Gate) Stats() GateStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Queued = g.waiting
	return s
}

type gatePermit struct {
	g    *Gate
	once sync.Once
}

func (p *gatePermit) Done(Outcome) {
	p.once.Do(func() {
		p.g.mu.Lock()
		p.g.stats.Running--
		p.g.mu.Unlock()
		<-p.g.slots
	})
}
