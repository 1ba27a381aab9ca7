package tui

import (
	"time"
)

// AgentStatus is where an agent call stands, as far as the events tell.
type AgentStatus uint8

// The statuses of an agent call. Running, Queued, Waiting, Retrying and Suspended are
// active; Done, Failed and Cached are final.
const (
	Running   AgentStatus = iota // admitted (or not known to wait)
	Queued                       // no free slot on its lane (agent_queued)
	Waiting                      // its lane's rate-limit budget is short until Until (rate_limit wait)
	Retrying                     // backing off until Until before another attempt (agent_retry)
	Suspended                    // its wait would exceed suspend_after: the run suspends (rate_limit suspend)
	Done                         // finished ok
	Failed                       // finished with an error, cancelled or timed out
	Cached                       // replayed from the journal
	numStatuses
)

var statusNames = [...]string{"running", "queued", "waiting", "retrying", "suspended", "done", "failed", "cached"}

func (s AgentStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// Active reports whether the call has not finished.
func (s AgentStatus) Active() bool { return s <= Suspended }

// Agent is one agent call.
type Agent struct {
	Key, Name, Backend, Model, Class string
	PhaseID                          int
	Status                           AgentStatus
	Result                           string // agent_done's status: ok, error, cancelled, timed_out
	Started, Ended                   time.Time
	Elapsed                          time.Duration // agent_done's elapsed_ms: its whole time
	// Ran is the part of Elapsed the agent itself took; Queued and Approval the parts it
	// waited for a scheduler slot and for a person (agent_done's run_ms, queued_ms,
	// approval_ms; events from before they existed have only Elapsed, all of it Ran).
	Ran, Queued, Approval time.Duration
	Lane                  string    // the lane it queued or waited on
	Position              int       // its place in the lane's queue when it queued
	Reason                string    // why it waits or retries
	Until                 time.Time // when the wait or back-off ends
	Attempt               int
	Tokens, In, Out       int
	// Streamed is the output a running agent has streamed so far, in estimated tokens
	// (agent_progress "tokens"); its usage is known only when it ends.
	Streamed int
	Cost     float64
	Err      string
	Last     string // the latest progress line

	out []byte // output so far (the tail when it grew past the cap)
	// retryUntil is when the back-off of its latest retry after a 429 ends: a rate_limit
	// wait before then is that same wait (the lane paused by the 429), counted once.
	retryUntil time.Time
	// ranFor is the time the agent has been shown running before its current stretch,
	// runSince when that stretch began: its clock on the board leaves out its time queued.
	ranFor   time.Duration
	runSince time.Time
	cut      bool   // the start of out was dropped
	gen      uint32 // bumped whenever the agent leaves a list, so stale entries are skipped
}

// RunTime is how long an active agent has been running at now, its time queued or
// waiting left out.
func (a *Agent) RunTime(now time.Time) time.Duration {
	if a.Status == Running && !a.runSince.IsZero() {
		return a.ranFor + max(now.Sub(a.runSince), 0)
	}
	return a.ranFor
}

// Label is the agent's name, or its call key when it has none.
func (a *Agent) Label() string {
	if a.Name != "" {
		return a.Name
	}
	return a.Key
}

// LaneName is the lane the agent's turns go to: backend/model.
func (a *Agent) LaneName() string {
	if a.Lane != "" {
		return a.Lane
	}
	return a.Backend + "/" + a.Model
}

// Where is backend/model for display, without a trailing slash when there is no model.
func (a *Agent) Where() string {
	if a.Model == "" {
		return a.Backend
	}
	return a.Backend + "/" + a.Model
}

// Output is the agent's streamed output so far (its progress events, in order).
func (a *Agent) Output() string {
	if a.cut {
		return "…" + string(a.out)
	}
	return string(a.out)
}
