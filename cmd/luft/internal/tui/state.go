package tui

import (
	"strings"
	"time"

	"github.com/luft-run/luft/event"
)

// Phase is a phase of the plan (meta.phases) or one the script started.
type Phase struct {
	ID          int // 0 while only planned
	Label       string
	Description string
	Planned     int // planned agent calls (phase(label, planned)); 0 = not said
	OK, Failed  int // calls finished in it
	Cancelled   int // calls a cancel cut off in it (not in Failed)
	Started     bool
	Done        bool
	StartedAt   time.Time
	EndedAt     time.Time
}

// Finished is the number of calls finished in the phase.
func (p *Phase) Finished() int { return p.OK + p.Failed + p.Cancelled }

// Totals count a run's agent calls, tokens, money and waits.
type Totals struct {
	Started       int // agent_started events
	OK            int
	Failed        int
	Cached        int
	Cancelled     int // cut off by a cancel, a timeout or a suspension: not Failed
	In, Out       int // tokens
	Cost          float64
	Retries       int
	SchemaRetries int
	RateWaits     int           // turns that waited for a rate-limit budget (or retried after a 429)
	RateWait      time.Duration // their waits added up
}

// Finished is the number of calls finished, cached ones included.
func (t Totals) Finished() int { return t.OK + t.Failed + t.Cached + t.Cancelled }

// LogLine is one line of the log pane.
type LogLine struct {
	TS    time.Time
	Level string
	Msg   string
}

// StateOptions bound what a State keeps.
type StateOptions struct {
	LogLines  int    // latest log lines kept (default 100)
	Recent    int    // finished agents kept for the board (default 20)
	MaxOutput int    // bytes of output kept per agent (default 64 KiB)
	LogLevel  string // lowest log level kept (default info)
}

// State is what a run's events say so far. It is pure: Apply folds one event, and nothing
// in it reads the clock. It is not safe for concurrent use.
type State struct {
	RunID         string
	Workflow      string
	Attempt       int
	Resumed       bool
	Status        string // "" before run_started, running, then run_done's status
	Err           string // run_done's error
	Started       time.Time
	Ended         time.Time
	Elapsed       time.Duration // run_done's elapsed_ms
	Reasoning     string
	Phases        []*Phase
	Totals        Totals
	HasReport     bool
	SuspendReason string
	ResumeAfter   time.Time

	o       StateOptions
	level   int
	current *Phase
	byID    map[int]*Phase
	agents  map[string]*Agent     // active agents by call key
	running agentList             // Running agents, in the order they started running
	waiting agentList             // Queued, Waiting, Retrying and Suspended agents, in the order they stopped
	queues  map[string]*laneQueue // agents queued per lane, to hand a freed slot to
	others  map[string][2]int     // per lane, other runs' running and queued turns at the last sample
	clock   time.Time             // the latest event's time: when a status change happened
	counts  [numStatuses]int      // active agents by status
	recent  []*Agent              // the latest finished agents, oldest first
	logs    []LogLine             // the latest log lines, oldest first

	// unstarted counts the planned phases in Phases that have not started.
	unstarted int
}

// NewState returns an empty state.
func NewState(o StateOptions) *State {
	if o.LogLines <= 0 {
		o.LogLines = 100
	}
	if o.Recent <= 0 {
		o.Recent = 20
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = 64 << 10
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	return &State{o: o, level: levelRank(o.LogLevel), byID: map[int]*Phase{}, agents: map[string]*Agent{},
		queues: map[string]*laneQueue{}}
}

// Fold returns the state after evs.
func Fold(o StateOptions, evs ...event.Event) *State {
	st := NewState(o)
	for _, ev := range evs {
		st.Apply(ev)
	}
	return st
}

// Done reports whether run_done has been seen.
func (s *State) Done() bool {
	return s.Status != "" && s.Status != "running"
}

// RunElapsed is how long the run has taken: run_done's figure once it ended.
func (s *State) RunElapsed(now time.Time) time.Duration {
	switch {
	case s.Done() && s.Elapsed > 0:
		return s.Elapsed
	case s.Done() && !s.Ended.IsZero() && !s.Started.IsZero():
		return s.Ended.Sub(s.Started)
	case s.Started.IsZero():
		return 0
	}
	return now.Sub(s.Started)
}

// Count is the number of active agents with status st.
func (s *State) Count(st AgentStatus) int {
	if st.Active() {
		return s.counts[st]
	}
	return 0
}

// Queued is the number of active agents not running: queued, waiting, retrying or
// suspended.
func (s *State) Queued() int {
	return s.counts[Queued] + s.counts[Waiting] + s.counts[Retrying] + s.counts[Suspended]
}

// Agent is the active or recently finished agent with the call key, or nil.
func (s *State) Agent(key string) *Agent {
	if a := s.agents[key]; a != nil {
		return a
	}
	for i := len(s.recent) - 1; i >= 0; i-- {
		if s.recent[i].Key == key {
			return s.recent[i]
		}
	}
	return nil
}

// Rows calls fn for the agents a board lists, in its order: running agents, then waiting
// ones, then the recently finished, newest first with failures (not cancellations) ahead.
// It stops when fn returns false. The cost is the number of rows visited, not the number
// of agents.
func (s *State) Rows(fn func(*Agent) bool) {
	if !s.running.each(fn) || !s.waiting.each(fn) {
		return
	}
	for _, failures := range []bool{true, false} {
		for i := len(s.recent) - 1; i >= 0; i-- {
			a := s.recent[i]
			if isFailure(a) == failures && !fn(a) {
				return
			}
		}
	}
}

func isFailure(a *Agent) bool { return a.Status == Failed && a.Result != "cancelled" }

// failure says how a failed call ended: its status and error, once.
func failure(a *Agent) string {
	msg := oneLine(a.Err)
	switch {
	case msg == "":
		return a.Result
	case a.Result == "" || strings.HasPrefix(msg, a.Result):
		return msg
	}
	return a.Result + ": " + msg
}

// NumRows is the number of agents Rows visits.
func (s *State) NumRows() int { return s.running.live() + s.waiting.live() + len(s.recent) }

// Recent is the latest finished agents, oldest first.
func (s *State) Recent() []*Agent { return s.recent }

// Logs is the latest log lines, oldest first.
func (s *State) Logs() []LogLine { return s.logs }

// Current is the phase in progress, or nil.
func (s *State) Current() *Phase { return s.current }

// Planned is the number of agent calls the plan expects, when every phase not done says
// how many it plans (and there is a plan at all).
func (s *State) Planned() (int, bool) {
	if len(s.Phases) == 0 {
		return 0, false
	}
	n := 0
	for _, p := range s.Phases {
		switch {
		case p.Done:
			n += p.Finished()
		case p.Planned <= 0:
			return 0, false
		default:
			n += max(p.Planned, p.Finished())
		}
	}
	return n, true
}

// ETA estimates the time left: for the whole run when the plan gives every phase a
// planned count (whole is true), else for the current phase when it has one. The rate is
// the calls finished so far (not replayed ones) over the time they took.
func (s *State) ETA(now time.Time) (left time.Duration, whole, ok bool) {
	if s.Done() {
		return 0, false, false
	}
	if planned, known := s.Planned(); known {
		live := s.Totals.OK + s.Totals.Failed
		remaining := planned - s.Totals.Finished()
		if el := s.RunElapsed(now); live > 0 && remaining > 0 && el > 0 {
			return el / time.Duration(live) * time.Duration(remaining), true, true
		}
		return 0, false, false
	}
	if p := s.current; p != nil && p.Planned > 0 && !p.StartedAt.IsZero() {
		done, remaining := p.Finished(), p.Planned-p.Finished()
		if el := now.Sub(p.StartedAt); done > 0 && remaining > 0 && el > 0 {
			return el / time.Duration(done) * time.Duration(remaining), false, true
		}
	}
	return 0, false, false
}
