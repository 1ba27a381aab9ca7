package tui

// Moving agents between lists.

func (s *State) queue(lane string) *laneQueue {
	q := s.queues[lane]
	if q == nil {
		q = &laneQueue{}
		s.queues[lane] = q
	}
	return q
}

// move changes an active agent's status, moving it between the running and the waiting
// list when it crosses between them.
func (s *State) move(a *Agent, to AgentStatus) {
	from := a.Status
	if from == to {
		return
	}
	s.counts[from]--
	s.counts[to]++
	a.Status = to
	if from == Running && !a.runSince.IsZero() {
		a.ranFor += max(s.clock.Sub(a.runSince), 0)
	}
	if to == Running {
		a.runSince = s.clock
	}
	if (from == Running) != (to == Running) {
		a.gen++
		s.list(from).drop()
		s.list(to).add(a)
	}
}

// leave takes an active agent off its list.
func (s *State) leave(a *Agent) {
	if !a.Status.Active() {
		return
	}
	s.counts[a.Status]--
	a.gen++
	s.list(a.Status).drop()
}

func (s *State) list(st AgentStatus) *agentList {
	if st == Running {
		return &s.running
	}
	return &s.waiting
}

// agentList is an ordered list of agents with lazy removal: an entry is live while its
// generation matches the agent's. Dead entries at the front are dropped at once (slots
// are handed on first come, first served, so that is where most die); the others are
// skipped and compacted away once they are half the list. Adding and removing cost O(1)
// amortized, and walking the first rows costs about the rows.
type agentList struct {
	items []entry
	head  int // entries before head are gone
	dead  int // dead entries at or after head
}

type entry struct {
	a   *Agent
	gen uint32
}

func (e entry) live() bool { return e.gen == e.a.gen }

func (l *agentList) add(a *Agent) { l.items = append(l.items, entry{a, a.gen}) }

func (l *agentList) live() int { return len(l.items) - l.head - l.dead }

// drop records that one entry died (its agent's generation moved on).
func (l *agentList) drop() {
	l.dead++
	for l.head < len(l.items) && !l.items[l.head].live() {
		l.items[l.head] = entry{}
		l.head++
		l.dead--
	}
	if l.head+l.dead < 32 || l.dead*2 < len(l.items)-l.head && l.head*2 < len(l.items) {
		return
	}
	kept := l.items[:0]
	for _, e := range l.items[l.head:] {
		if e.live() {
			kept = append(kept, e)
		}
	}
	clear(l.items[len(kept):])
	l.items, l.head, l.dead = kept, 0, 0
}

// each calls fn for the live entries in order until fn returns false; it reports whether
// it went through all of them.
func (l *agentList) each(fn func(*Agent) bool) bool {
	for _, e := range l.items[l.head:] {
		if e.live() && !fn(e.a) {
			return false
		}
	}
	return true
}

// laneQueue is the agents queued on one lane, first come first.
type laneQueue struct {
	items []entry
	head  int
}

func (q *laneQueue) add(a *Agent) { q.items = append(q.items, entry{a, a.gen}) }

// pop takes the first agent still queued off the front, discarding the entries before it
// whose agents moved on.
func (q *laneQueue) pop() *Agent {
	var got *Agent
	for got == nil && q.head < len(q.items) {
		e := q.items[q.head]
		q.items[q.head] = entry{}
		q.head++
		if e.live() && e.a.Status == Queued {
			got = e.a
		}
	}
	if q.head >= 32 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return got
}
