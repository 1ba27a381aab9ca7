package scheduler

import (
	"time"

	"github.com/luft-run/luft/agent"
)

// lane is one place turns go: its queue (per-caller heaps under a fairness policy), its
// slots and replicas, its budgets, its estimator and its circuit breaker.
//
// Queue structure (per lane, all O(log n)): every caller with queued turns owns a heap
// of its turns ordered by rank key. A caller is urgent when its best key is not in the
// future (interactive work, continuations, and batch work that has aged past
// BatchOffset) and calm otherwise. The next turn is the best turn of the urgent caller
// with the least virtual token counter, or, with no urgent caller, of the calm caller
// with the least counter (VTC, Sheng et al., OSDI '24). Ageing ranks classes only: when
// the urgent caller with the least counter is urgent only through aged batch work, a calm
// (batch) caller with a smaller counter goes first. Calm callers are also kept by best
// key, so the moment one ages into urgency costs one heap move.
type lane struct {
	name     string
	cfg      LaneConfig
	fallback *lane
	// dependents are the lanes whose fallback this lane is; freeing capacity here
	// may let their turns through.
	dependents []*lane

	callers  map[string]*caller
	urgent   indexHeap[*caller] // by counter
	calmCnt  indexHeap[*caller] // by counter
	calmKey  indexHeap[*caller] // by best key
	lastLeft float64            // counter of the last caller whose queue emptied
	queued   [2]int             // by class: 0 interactive, 1 batch
	delayed  int                // turns of this lane waiting out a backoff

	running  int
	replicas []int // running turns per replica
	// lastInteractive is when an interactive turn last started or ended on the lane
	// (see Config.InteractiveSlots).
	lastInteractive time.Time
	flightID        uint64

	requests, tokens, inTokens, outTokens bucket
	est                                   estimator
	outFrac                               float64 // learned share of output in a turn's tokens
	outs                                  outputs // completion lengths of turns without an output cap
	// upfront: a turn without an output cap must fit its whole reservation, output
	// included, set once such a turn was refused with a 429 (a provider that charges
	// the output at arrival).
	upfront bool

	pausedUntil time.Time
	br          breaker
	// scouting holds the lane to one turn at a time until its first answer (Scout).
	scouting bool

	// Waiting state, for notices and NextWake.
	blocked       bool
	blockedReason string
	wakeAt        time.Time

	st LaneStats
}

func newLane(name string, cfg LaneConfig, c *Config) *lane {
	n := max(1, cfg.Replicas)
	l := &lane{
		name:      name,
		cfg:       cfg,
		callers:   map[string]*caller{},
		replicas:  make([]int, n),
		requests:  newBucket(cfg.RPM),
		tokens:    newBucket(cfg.TPM),
		inTokens:  newBucket(0),
		outTokens: newBucket(0),
		est:       estimator{cfg: c},
		outFrac:   0.25,
		scouting:  cfg.Scout && cfg.TPM == 0 && cfg.RPM == 0,
	}
	byCounter := func(a, b *caller) bool {
		if a.counter != b.counter {
			return a.counter < b.counter
		}
		if a.lastServed != b.lastServed {
			return a.lastServed < b.lastServed // the longest unserved first; a newcomer has 0
		}
		return a.name < b.name
	}
	l.urgent = indexHeap[*caller]{less: byCounter, setIdx: func(c *caller, i int) { c.iUrgent = i }}
	l.calmCnt = indexHeap[*caller]{less: byCounter, setIdx: func(c *caller, i int) { c.iCalmCnt = i }}
	l.calmKey = indexHeap[*caller]{
		less: func(a, b *caller) bool {
			ka, kb := a.jobs.Peek(), b.jobs.Peek()
			if ka.key != kb.key {
				return ka.key < kb.key
			}
			return a.name < b.name
		},
		setIdx: func(c *caller, i int) { c.iCalmKey = i },
	}
	return l
}

// caller is one caller's queue on one lane and its virtual token counter.
type caller struct {
	name       string
	counter    float64 // tokens served (charged at admission, reconciled on completion)
	lastServed uint64  // core sequence of the last admission; 0 = never
	jobs       indexHeap[*job]

	iUrgent, iCalmCnt, iCalmKey int
}

func newCaller(name string) *caller {
	return &caller{
		name: name, iUrgent: -1, iCalmCnt: -1, iCalmKey: -1,
		jobs: indexHeap[*job]{
			less: func(a, b *job) bool {
				if a.key != b.key {
					return a.key < b.key
				}
				return a.seq < b.seq
			},
			setIdx: func(j *job, i int) { j.idx = i },
		},
	}
}

func classIndex(c agent.Class) int {
	if c == agent.ClassBatch {
		return 1
	}
	return 0
}

// minCounter is the least counter among backlogged callers.
func (l *lane) minCounter() (float64, bool) {
	m, ok := 0.0, false
	if l.urgent.Len() > 0 {
		m, ok = l.urgent.Peek().counter, true
	}
	if l.calmCnt.Len() > 0 {
		if c := l.calmCnt.Peek().counter; !ok || c < m {
			m, ok = c, true
		}
	}
	return m, ok
}

// detach takes c out of the group heaps.
func (l *lane) detach(c *caller) {
	if c.iUrgent >= 0 {
		l.urgent.Remove(c.iUrgent)
	}
	if c.iCalmCnt >= 0 {
		l.calmCnt.Remove(c.iCalmCnt)
	}
	if c.iCalmKey >= 0 {
		l.calmKey.Remove(c.iCalmKey)
	}
}

// attach files c under the group its best turn puts it in at now.
func (l *lane) attach(c *caller, now int64) {
	if c.jobs.Len() == 0 {
		return
	}
	if c.jobs.Peek().key <= now {
		l.urgent.Push(c)
		return
	}
	l.calmCnt.Push(c)
	l.calmKey.Push(c)
}

// enqueue adds j to its caller's queue. A caller that was not backlogged starts at the
// least counter of those that are (or of the last one to leave, when none is), so time
// spent away banks no credit; a caller ahead of that keeps its own counter.
func (l *lane) enqueue(j *job, now int64) {
	c := l.callers[j.Caller]
	if c == nil {
		c = newCaller(j.Caller)
		l.callers[j.Caller] = c
	}
	if c.jobs.Len() == 0 {
		if m, ok := l.minCounter(); ok {
			c.counter = max(c.counter, m)
		} else {
			c.counter = max(c.counter, l.lastLeft)
		}
	}
	l.detach(c)
	c.jobs.Push(j)
	l.attach(c, now)
	l.queued[classIndex(j.Class)]++
}

// unqueue removes a queued j from its caller's queue.
func (l *lane) unqueue(j *job, now int64) {
	c := l.callers[j.Caller]
	l.detach(c)
	c.jobs.Remove(j.idx)
	l.queued[classIndex(j.Class)]--
	if c.jobs.Len() == 0 {
		l.lastLeft = c.counter
		return
	}
	l.attach(c, now)
}

// head returns the turn the lane would admit next at now, promoting calm callers whose
// best turn has come due.
func (l *lane) head(now int64) (*caller, *job) {
	for l.calmKey.Len() > 0 && l.calmKey.Peek().jobs.Peek().key <= now {
		c := l.calmKey.Peek()
		l.detach(c)
		l.urgent.Push(c)
	}
	var c *caller
	switch {
	case l.urgent.Len() > 0:
		c = l.urgent.Peek()
		// Ageing reorders classes, not callers within a class: when the urgent
		// caller with the least counter is there only because its batch work has
		// aged, batch is due, and the batch caller with the least counter gets it,
		// aged or not (calm callers hold only unaged batch work).
		if c.jobs.Peek().Class == agent.ClassBatch && l.calmCnt.Len() > 0 &&
			l.calmCnt.Peek().counter < c.counter {
			c = l.calmCnt.Peek()
		}
	case l.calmCnt.Len() > 0:
		c = l.calmCnt.Peek()
	default:
		return nil, nil
	}
	return c, c.jobs.Peek()
}

// charge adds tokens to a caller's counter and re-sorts it if it is queued.
func (l *lane) charge(name string, tokens float64) {
	c := l.callers[name]
	if c == nil {
		return
	}
	c.counter += tokens
	if c.counter < 0 {
		c.counter = 0
	}
	if c.iUrgent >= 0 {
		l.urgent.Fix(c.iUrgent)
	}
	if c.iCalmCnt >= 0 {
		l.calmCnt.Fix(c.iCalmCnt)
	}
}

// hasSlot reports whether some replica has a free slot.
func (l *lane) hasSlot() bool {
	if l.cfg.Slots <= 0 {
		return true
	}
	for _, n := range l.replicas {
		if n < l.cfg.Slots {
			return true
		}
	}
	return false
}

// slotHeld reports whether a batch turn must leave the lane's last free slots to
// interactive work at now, and until when.
func (l *lane) slotHeld(cfg *Config, now time.Time) (bool, time.Time) {
	if l.cfg.Slots <= 0 || cfg.InteractiveSlots <= 0 || l.lastInteractive.IsZero() {
		return false, time.Time{}
	}
	until := l.lastInteractive.Add(cfg.InteractiveLinger)
	if !now.Before(until) {
		return false, time.Time{}
	}
	capacity := l.cfg.Slots * len(l.replicas)
	keep := min(cfg.InteractiveSlots, capacity-1)
	return l.running >= capacity-keep, until
}

// pickReplica chooses the replica for a turn of a run last served on prev (-1 = none):
// prev while it has a free slot and carries at most bound more turns than the least
// loaded replica (its KV cache is worth a little imbalance, not an overload), else the
// least-loaded replica with a free slot.
func (l *lane) pickReplica(prev, bound int) int {
	best, least := -1, -1
	for r, n := range l.replicas {
		if least < 0 || n < l.replicas[least] {
			least = r
		}
		if l.cfg.Slots > 0 && n >= l.cfg.Slots {
			continue
		}
		if best < 0 || n < l.replicas[best] {
			best = r
		}
	}
	if bound >= 0 && prev >= 0 && prev < len(l.replicas) {
		n := l.replicas[prev]
		if (l.cfg.Slots <= 0 || n < l.cfg.Slots) && n-l.replicas[least] <= bound {
			return prev
		}
	}
	return best
}

// Breaker states.
const (
	breakerClosed = iota
	breakerOpen
	breakerHalfOpen
)

// breaker is a lane's circuit breaker: BreakerThreshold consecutive failures open it;
// after BreakerCooldown it lets exactly one real turn through as a probe, whose success
// closes it and whose failure opens it again. A 429 is not a failure (the lane's pause
// handles it), nor is an error that says the request was bad.
type breaker struct {
	state     int
	fails     int
	openUntil time.Time
	probing   bool
}

// current moves an open breaker whose cooldown is over to half-open.
func (b *breaker) current(now time.Time) int {
	if b.state == breakerOpen && !now.Before(b.openUntil) {
		b.state, b.probing = breakerHalfOpen, false
	}
	return b.state
}

func (b *breaker) success() {
	b.state, b.fails, b.probing = breakerClosed, 0, false
}

// failure records a failure and reports whether it opened the circuit.
func (b *breaker) failure(now time.Time, probe bool, cfg *Config) bool {
	b.fails++
	if probe || (b.state == breakerClosed && b.fails >= cfg.BreakerThreshold) {
		b.state, b.probing = breakerOpen, false
		b.openUntil = now.Add(cfg.BreakerCooldown)
		return true
	}
	return false
}

func (b *breaker) String() string {
	switch b.state {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half-open"
	}
	return "closed"
}
