package scheduler

import (
	"time"
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
	// upOut is the completion the provider reserves at arrival for a turn without an
	// output cap, learned from a turn's charge (learnCharge) or a 429's words ("Requested
	// N"); 0 = none seen.
	upOut      float64
	chargeSeen float64 // the last such charge learnCharge saw, not yet confirmed; 0 = none
	// silent paces a lane whose provider reports no limits (see silent.go).
	silent silentPace
	// short paces a lane over the provider's short windows once it met a 429 (short.go).
	short shortPace

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
