package scheduler

import (
	"time"

	"github.com/luft-run/luft/agent"
)

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

// rankBase is the time a turn of run r ranks by, fixed when it is first submitted (see
// Core): its arrival, led for a continuation by ContinuationLead and its run's age, and
// put back BatchOffset for batch work.
func (c *Core) rankBase(j Job, r *runState) time.Time {
	start := j.RunStart
	if start.IsZero() {
		start = r.start
	}
	base := j.Arrival
	if j.Continuation {
		// Program-level order: a continuation ranks by when its call was first
		// admitted, led by ContinuationLead and its run's age then.
		from := j.Arrival
		if !j.CallStart.IsZero() && j.CallStart.Before(from) {
			from = j.CallStart
		}
		age := min(max(from.Sub(start), 0), c.cfg.ContinuationLead)
		base = from.Add(-c.cfg.ContinuationLead - age)
	}
	if j.Class == agent.ClassBatch {
		base = base.Add(c.cfg.BatchOffset)
	}
	return base
}
