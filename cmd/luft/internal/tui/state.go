package tui

import (
	"strings"
	"time"

	"github.com/luft-run/luft/event"
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

// Apply folds one event into the state. Unknown types are ignored.
func (s *State) Apply(ev event.Event) {
	if ev.TS.After(s.clock) {
		s.clock = ev.TS
	}
	d := ev.Data
	switch ev.Type {
	case event.RunStarted:
		attempt := intOf(d, "attempt")
		if s.Status != "" {
			// A later attempt of the run (a stored stream read from the start): show
			// that attempt alone.
			*s = *NewState(s.o)
		}
		s.RunID, s.Workflow, s.Attempt = ev.RunID, oneLine(str(d, "workflow")), attempt
		s.Resumed = d["resumed"] == true
		s.Started, s.Status = ev.TS, "running"
	case event.Plan:
		s.plan(d)
	case event.PhaseStarted:
		s.phaseStarted(ev)
	case event.PhaseDone:
		p := s.byID[intOf(d, "phase_id")]
		if p == nil {
			return
		}
		p.Done, p.EndedAt = true, ev.TS
		p.OK, p.Failed, p.Cancelled = intOf(d, "ok"), intOf(d, "failed"), intOf(d, "cancelled")
		if s.current == p {
			s.current = nil
		}
	case event.AgentStarted:
		s.agentStarted(ev)
	case event.AgentQueued:
		if a := s.agents[str(d, "call_key")]; a != nil {
			a.Lane, a.Position = str(d, "lane"), intOf(d, "position")
			s.move(a, Queued)
			s.queue(a.Lane).add(a)
		}
	case event.RateLimit:
		s.rateLimit(ev)
	case event.AgentRetry:
		s.Totals.Retries++
		wait := msOf(d, "wait_ms")
		reason := str(d, "reason")
		if reason == "rate_limited" {
			s.Totals.RateWaits++
			s.Totals.RateWait += wait
		}
		if a := s.agents[str(d, "call_key")]; a != nil {
			a.Attempt, a.Reason, a.Until = intOf(d, "attempt"), oneLine(reason), ev.TS.Add(wait)
			if reason == "rate_limited" {
				a.retryUntil = a.Until
			}
			s.move(a, Retrying)
		}
		s.log(ev.TS, "warn", join(s.label(str(d, "call_key"))+" retry "+str(d, "attempt")+" in "+fmtDur(wait), oneLine(reason)))
	case event.SchemaRetry:
		s.Totals.SchemaRetries++
		if a := s.agents[str(d, "call_key")]; a != nil {
			a.Last = "output did not match its schema (re-prompt " + str(d, "attempt") + ")"
		}
	case event.AgentProgress:
		s.progress(d)
	case event.AgentDone:
		s.agentDone(ev)
	case event.Log:
		s.log(ev.TS, str(d, "level"), oneLine(str(d, "msg")))
	case event.WorkflowStarted:
		s.log(ev.TS, "info", "workflow "+oneLine(str(d, "path")))
	case event.WorkflowDone:
		if d["ok"] != true {
			s.log(ev.TS, "error", "workflow "+oneLine(str(d, "path"))+" failed: "+oneLine(str(d, "error")))
		}
	case event.Report:
		s.HasReport = true
	case event.RunSuspended:
		s.SuspendReason = cleanText(str(d, "reason"))
		s.ResumeAfter = timeOf(d["resume_after"])
	case event.RunDone:
		s.runDone(ev)
	}
}

func (s *State) plan(d map[string]any) {
	s.Reasoning = oneLine(str(d, "reasoning"))
	var list []map[string]any
	switch ps := d["phases"].(type) {
	case []any:
		for _, p := range ps {
			if m := fields(p); m != nil {
				list = append(list, m)
			}
		}
	case []map[string]any:
		list = ps
	}
	// The plan replaces planned phases that have not started; phases under way stay.
	kept := s.Phases[:0]
	for _, p := range s.Phases {
		if p.Started {
			kept = append(kept, p)
		}
	}
	s.Phases = kept
	s.unstarted = 0
	for _, m := range list[:min(len(list), maxPlanned)] {
		label := oneLine(str(m, "label"))
		if label == "" {
			label = oneLine(str(m, "name"))
		}
		desc := str(m, "description")
		if desc == "" {
			desc = str(m, "detail") // Luft's meta.phases[].detail
		}
		s.Phases = append(s.Phases, &Phase{Label: label, Description: oneLine(desc), Planned: intOf(m, "planned")})
		s.unstarted++
	}
}

// A script may start phases in a loop without end, and its plan may name any number: the
// state keeps the planned phases up to maxPlanned and, past keepPhases, forgets the
// oldest finished phases, so folding a phase costs the same at the millionth as at the
// first.
const (
	maxPlanned = 200
	keepPhases = 200
)

// forgetPhases drops the oldest finished phases once there are twice keepPhases, down
// to keepPhases (amortised: one pass per keepPhases phases).
func (s *State) forgetPhases() {
	if len(s.Phases) < 2*keepPhases {
		return
	}
	drop := len(s.Phases) - keepPhases
	kept := s.Phases[:0]
	for _, p := range s.Phases {
		if drop > 0 && p.Done && p != s.current {
			drop--
			if s.byID[p.ID] == p {
				delete(s.byID, p.ID)
			}
			continue
		}
		kept = append(kept, p)
	}
	clear(s.Phases[len(kept):])
	s.Phases = kept
}

func (s *State) phaseStarted(ev event.Event) {
	d := ev.Data
	id, label := intOf(d, "phase_id"), oneLine(str(d, "label"))
	var p *Phase
	if s.unstarted > 0 {
		for _, q := range s.Phases {
			if !q.Started && q.Label == label {
				p = q // the planned phase this one carries out
				s.unstarted--
				break
			}
		}
	}
	switch {
	case p != nil:
	case s.unstarted == 0:
		// No planned phase is still to come: the new one goes last.
		p = &Phase{Label: label}
		s.Phases = append(s.Phases, p)
		s.forgetPhases()
	default:
		p = &Phase{Label: label}
		// A phase the plan did not name goes after the last started one, before the
		// planned phases still to come.
		at := 0
		for i, q := range s.Phases {
			if q.Started {
				at = i + 1
			}
		}
		s.Phases = append(s.Phases, nil)
		copy(s.Phases[at+1:], s.Phases[at:])
		s.Phases[at] = p
		s.forgetPhases()
	}
	p.ID, p.Started, p.StartedAt = id, true, ev.TS
	if n := intOf(d, "planned"); n > 0 {
		p.Planned = n
	}
	if desc := oneLine(str(d, "description")); desc != "" {
		p.Description = desc
	}
	s.byID[id] = p
	s.current = p
}

func (s *State) agentStarted(ev event.Event) {
	d := ev.Data
	key := str(d, "call_key")
	if old := s.agents[key]; old != nil {
		s.leave(old)
	}
	a := &Agent{Key: key, Name: oneLine(str(d, "name")), Backend: oneLine(str(d, "backend")),
		Model: oneLine(str(d, "model")), Class: str(d, "class"), PhaseID: intOf(d, "phase_id"),
		Started: ev.TS, Status: Running, Attempt: 1, runSince: ev.TS}
	s.Totals.Started++
	s.agents[key] = a
	s.counts[Running]++
	s.running.add(a)
}

func (s *State) rateLimit(ev event.Event) {
	d := ev.Data
	wait := msOf(d, "wait_ms")
	until := timeOf(d["until"])
	if until.IsZero() {
		until = ev.TS.Add(wait)
	}
	a := s.agents[str(d, "call_key")]
	// After a 429 the scheduler reports the retry (agent_retry) and then, when the turn
	// reaches the head of its lane while the lane is still paused, the same wait again
	// (rate_limit): that is one wait, extended at most.
	sameWait := false
	if a != nil {
		sameWait = !a.retryUntil.IsZero() && !ev.TS.After(a.retryUntil)
		if sameWait && until.After(a.retryUntil) {
			s.Totals.RateWait += until.Sub(a.retryUntil)
		}
		a.retryUntil = time.Time{}
		a.Lane, a.Reason, a.Until = str(d, "lane"), oneLine(str(d, "reason")), until
	}
	if str(d, "action") == "suspend" {
		if a != nil {
			s.move(a, Suspended)
		}
		s.log(ev.TS, "warn", "rate limit on "+oneLine(str(d, "lane"))+" ("+oneLine(str(d, "reason"))+"): a wait of "+
			fmtDur(wait)+" is too long, the run suspends")
		return
	}
	if !sameWait {
		s.Totals.RateWaits++
		s.Totals.RateWait += wait
	}
	if a != nil {
		s.move(a, Waiting)
	}
}

func (s *State) progress(d map[string]any) {
	a := s.agents[str(d, "call_key")]
	if a == nil {
		return
	}
	if n := intOf(d, "tokens"); n > a.Streamed {
		a.Streamed = n
	}
	text := cleanText(str(d, "text"))
	if kind := str(d, "kind"); kind != "" && kind != "text" {
		text = "[" + oneLine(kind) + "] " + strings.TrimRight(text, "\n") + "\n"
	}
	if l := lastLine(text); l != "" {
		a.Last = l
	}
	a.out = append(a.out, text...)
	if len(a.out) > s.o.MaxOutput {
		// Keep the tail, cut at a line (or at least a rune) boundary.
		drop := len(a.out) - s.o.MaxOutput*3/4
		if i := strings.IndexByte(string(a.out[drop:]), '\n'); i >= 0 && i < 256 {
			drop += i + 1
		}
		for drop < len(a.out) && a.out[drop]&0xC0 == 0x80 {
			drop++
		}
		a.out = append(a.out[:0:0], a.out[drop:]...)
		a.cut = true
	}
	// Output means the agent runs, whatever it last waited for.
	if a.Status != Running {
		s.move(a, Running)
	}
}

func (s *State) agentDone(ev event.Event) {
	d := ev.Data
	key := str(d, "call_key")
	a := s.agents[key]
	wasRunning := a != nil && a.Status == Running
	if a == nil {
		// A call replayed from the journal (or started before this stream began).
		a = &Agent{Key: key, Name: oneLine(str(d, "name")), Backend: oneLine(str(d, "backend")), PhaseID: -1}
	} else {
		s.leave(a)
	}
	delete(s.agents, key)
	if m := oneLine(str(d, "model")); m != "" {
		a.Model = m
	}
	u := fields(d["usage"])
	a.In, a.Out = intOf(u, "input"), intOf(u, "output")
	a.Tokens = intOf(d, "tokens")
	if a.Tokens == 0 {
		a.Tokens = a.In + a.Out
	}
	a.Cost = num(d["cost"])
	a.Elapsed, a.Ended = msOf(d, "elapsed_ms"), ev.TS
	a.Ran, a.Queued, a.Approval = a.Elapsed, msOf(d, "queued_ms"), msOf(d, "approval_ms")
	_, hasRun := d["run_ms"]
	_, hasWait := d["wait_ms"]
	switch {
	case hasRun:
		a.Ran = msOf(d, "run_ms")
	case hasWait: // a proxied turn: elapsed_ms with its wait_ms in luft's queue
		a.Queued = msOf(d, "wait_ms")
		a.Ran = max(a.Elapsed-a.Queued, 0)
	}
	if n := intOf(d, "attempts"); n > 0 {
		a.Attempt = n
	}
	a.Result = str(d, "status")
	a.Err = cleanText(str(d, "error"))
	a.Reason, a.Until = "", time.Time{}
	switch {
	case d["cached"] == true:
		a.Status = Cached
		s.Totals.Cached++
	case a.Result == "ok" && a.Err == "":
		a.Status = Done
		s.Totals.OK++
	case a.Result == "cancelled":
		// Cancelled siblings of a failure are its echo, not news, and no failure.
		a.Status = Failed
		s.Totals.Cancelled++
	default:
		a.Status = Failed
		s.Totals.Failed++
		s.log(ev.TS, "error", a.Label()+" "+failure(a))
	}
	s.Totals.In += a.In
	s.Totals.Out += a.Out
	s.Totals.Cost += a.Cost
	p := s.byID[a.PhaseID]
	if a.PhaseID < 0 || p == nil {
		p = s.current
	}
	if p != nil && !p.Done {
		switch {
		case a.Result == "cancelled":
			p.Cancelled++
		case a.Status == Failed:
			p.Failed++
		default:
			p.OK++
		}
	}
	s.recent = append(s.recent, a)
	if len(s.recent) > s.o.Recent {
		s.recent = append(s.recent[:0], s.recent[1:]...)
	}
	if wasRunning {
		// Its slot went to the next turn queued on the lane. No event says so; without
		// this, every queued agent would look queued until its output or its end.
		if next := s.queue(a.LaneName()).pop(); next != nil {
			s.move(next, Running)
		}
	}
}

func (s *State) runDone(ev event.Event) {
	d := ev.Data
	s.Status = str(d, "status")
	if s.Status == "" || s.Status == "running" {
		s.Status = "failed"
	}
	s.Err = cleanText(str(d, "error"))
	s.Ended, s.Elapsed = ev.TS, msOf(d, "elapsed_ms")
	if str(d, "report") != "" {
		s.HasReport = true
	}
	// run_done's figures are the run's own account: they win over the sums of events.
	if c := fields(d["agents"]); c != nil {
		s.Totals.OK, s.Totals.Failed, s.Totals.Cached = intOf(c, "ok"), intOf(c, "failed"), intOf(c, "cached")
		s.Totals.Cancelled = intOf(c, "cancelled")
	}
	if u := fields(d["usage"]); u != nil {
		s.Totals.In, s.Totals.Out = intOf(u, "input"), intOf(u, "output")
	}
	if _, ok := d["cost"]; ok {
		s.Totals.Cost = num(d["cost"])
	}
	s.current = nil
	// The run is over: nothing of it runs or waits any more, whatever events did not come
	// (a call cut off when the run stopped, a viewer that joined late), and the final frame
	// says so.
	for key, a := range s.agents {
		s.leave(a)
		a.Status, a.Result, a.Ended = Failed, "cancelled", ev.TS
		delete(s.agents, key)
	}
}

func (s *State) log(ts time.Time, level, msg string) {
	if levelRank(level) < s.level {
		return
	}
	if len(s.logs) >= s.o.LogLines {
		s.logs = append(s.logs[:0], s.logs[1:]...)
	}
	s.logs = append(s.logs, LogLine{TS: ts, Level: level, Msg: msg})
}

// label is the name of the agent with key, or the key.
func (s *State) label(key string) string {
	if a := s.Agent(key); a != nil {
		return a.Label()
	}
	return key
}

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
