package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

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
	Continuation bool // a later turn of the same agent call (after a tool result, a schema re-prompt, a retry)

	// CallStart is when the turn's agent call was first admitted. A continuation ranks
	// by it, not by its own arrival, so a tool follow-up goes ahead of the first turns of
	// sibling calls still queued (SPEC §7); zero = the turn's own arrival.
	CallStart time.Time
	// Conversation names the conversation the turn belongs to, for replica affinity:
	// the agent call, or the session_id it continues. Turns of one conversation go back
	// to the replica that holds its KV cache while that replica is not overloaded.
	// "" = CallKey; when that is empty too, the run is one conversation.
	Conversation string

	// EstOutput is the part of EstTokens expected as output (the request's max_tokens);
	// 0 = unknown. The Executor hands it to the decision core as Job.EstOutput.
	EstOutput int
	// RunStart is when the turn's run started, for ranking continuations by run age;
	// zero = the first time the scheduler saw the run. The Executor hands it to the
	// decision core as Job.RunStart.
	RunStart time.Time
	// Notify, when set, is told what happens to the turn while it waits: queued,
	// waiting for a rate-limit budget, its run suspended, retried (see Notice). It is
	// called outside the scheduler's lock, in the order the scheduler decided, and must
	// neither block for long nor call the scheduler.
	Notify func(Notice)
	// NoCircuitWait refuses the turn at once (a *RefuseError with Reason
	// ReasonCircuitOpen and Until, when the lane's circuit is due to half-open) instead
	// of letting it wait while its lane's circuit is open and no fallback takes it: for
	// a door whose client retries on its own and should not be kept waiting (the proxy).
	NoCircuitWait bool
}

// Outcome is what a turn cost and how it ended, reported when its permit is released.
type Outcome struct {
	Usage  agent.Usage
	Header http.Header // response headers, for rate-limit learning; may be nil
	Err    error
	// StatusCode is the HTTP status of the response, when the caller has one outside
	// Err; 0 = none, and then an Err that carries a status (see HTTPStatus) gives it.
	StatusCode int
}

// Scheduler admits turns. Admit blocks until the turn may run or ctx ends.
type Scheduler interface {
	Admit(ctx context.Context, t Turn) (Permit, error)
}

// Permit is the right to run one turn. Done must be called exactly once (a second Done
// is harmless); Done ends the turn even when its scheduler would have retried it.
type Permit interface {
	Done(o Outcome)
}

// Retrier is implemented by the permits of a scheduler that retries failed turns itself
// (the Executor): a turn answered with HTTP 429 honours the server's wait and keeps its
// place in line, a 5xx or a lost response backs off, and both come back to the same
// caller instead of being submitted again.
type Retrier interface {
	// Again releases the permit like Done and reports o. When the scheduler retries
	// the turn, Again blocks until it is admitted again and returns the permit of the
	// next attempt, which the caller sends and releases like the first. When the turn
	// is over (success, or a failure the scheduler does not retry) it returns nil, nil.
	// Errors: *RefuseError when the retries are used up (it wraps o.Err), *SuspendError
	// when the run was suspended while the turn waited, or ctx's cause when ctx ended
	// first (the turn is then withdrawn).
	Again(ctx context.Context, o Outcome) (Permit, error)
}

// Router is implemented by the permits of a scheduler that routes attempts (the
// Executor): Lane is the lane the attempt runs on — the turn's own, or its fallback
// while the turn's lane has an open circuit — and Replica the replica of that lane to
// send to (0: the backend's own endpoint).
type Router interface {
	Lane() string
	Replica() int
}

// Observer is implemented by the permits of a scheduler that reads a response's
// rate-limit headers as soon as they arrive (the Executor): a caller whose answer is
// still coming (a stream) passes them to Observe, then releases the permit as usual.
type Observer interface {
	Observe(h http.Header)
}

// Finish releases p with o and returns the permit of the turn's next attempt when p's
// scheduler retries it (see Retrier); with any other permit it calls Done and returns
// nil, nil. A caller's turn loop is:
//
//	p, err := s.Admit(ctx, turn)
//	for err == nil && p != nil {
//		o := send()
//		p, err = scheduler.Finish(ctx, p, o)
//	}
func Finish(ctx context.Context, p Permit, o Outcome) (Permit, error) {
	if r, ok := p.(Retrier); ok {
		return r.Again(ctx, o)
	}
	p.Done(o)
	return nil, nil
}

// HTTPStatus reports the HTTP status a backend error carries. The convention, for
// backends that speak HTTP (this package never imports them): the error, or one it
// wraps, has a method StatusCode() int, and optionally Header() http.Header with the
// response's headers (retry-after, x-ratelimit-*). Code 0 means the request got no
// response at all (a connection error or a transport timeout), which is retried like a
// 5xx. An error without StatusCode is not an HTTP failure: the scheduler does not retry
// it, and the runtime's own retry policy applies.
func HTTPStatus(err error) (code int, header http.Header, ok bool) {
	var sc interface{ StatusCode() int }
	if err == nil || !errors.As(err, &sc) {
		return 0, nil, false
	}
	var hc interface{ Header() http.Header }
	if errors.As(err, &hc) {
		header = hc.Header()
	}
	return sc.StatusCode(), header, true
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
