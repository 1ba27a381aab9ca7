package scheduler

import (
	"time"
)

type runState struct {
	id            string
	start         time.Time
	active        int
	jobs          *job // head of the run's list of turns in the core
	convs         map[string]*conv
	idleSince     time.Time
	suspended     time.Time // until when the run is suspended
	suspendReason string
}

type idleRun struct {
	r     *runState
	since time.Time
}

func (c *Core) run(id string, now time.Time) *runState {
	r := c.runs[id]
	if r == nil {
		r = &runState{id: id, start: now, convs: map[string]*conv{}}
		c.runs[id] = r
	}
	return r
}

// link adds j to the front of r's list of turns, as active.
func (r *runState) link(j *job) {
	r.active++
	j.next = r.jobs
	if r.jobs != nil {
		r.jobs.prev = j
	}
	r.jobs = j
}

// suspend drops every queued turn of run r; its running turns finish normally.
func (c *Core) suspend(r *runState, until time.Time, reason string, l *lane, now time.Time) {
	r.suspended, r.suspendReason = until, reason
	l.st.Suspended++
	var first TurnID
	for j := r.jobs; j != nil; {
		next := j.next
		if j.state != jobRunning {
			if first == 0 {
				first = j.ID
			}
			c.unlink(j, now)
			c.finish(j, now)
		}
		j = next
	}
	c.emit(Action{Kind: ActSuspend, ID: first, RunID: r.id, Lane: l.name, Until: until, Reason: reason})
}

// gcRuns forgets runs that have had no turn in the core for RunIdleTTL. Runs go idle
// in time order, so the idle list is oldest first; an entry whose run came back (or went
// idle again later) is stale and skipped.
func (c *Core) gcRuns(now time.Time) {
	for c.idleHead < len(c.idle) {
		e := c.idle[c.idleHead]
		if now.Sub(e.since) < c.cfg.RunIdleTTL {
			break
		}
		c.idle[c.idleHead] = idleRun{}
		c.idleHead++
		r := e.r
		if r.active != 0 || !r.idleSince.Equal(e.since) || c.runs[r.id] != r {
			continue // came back since, or already forgotten
		}
		if r.suspended.After(now) {
			// Keep a suspended run until its suspension is over.
			r.idleSince = now
			c.idle = append(c.idle, idleRun{r: r, since: now})
			continue
		}
		delete(c.runs, r.id)
	}
	if c.idleHead == len(c.idle) {
		c.idle, c.idleHead = c.idle[:0], 0
	} else if c.idleHead > 64 && c.idleHead > len(c.idle)/2 {
		n := copy(c.idle, c.idle[c.idleHead:])
		c.idle, c.idleHead = c.idle[:n], 0
	}
}
