package tui

import (
	"strings"
	"time"

	"github.com/luft-run/luft/event"
)

// Apply folds one event into the state. Unknown types are ignored.
func (s *State) Apply(ev event.Event) {
	if ev.TS.After(s.clock) {
		s.clock = ev.TS
	}
	d := ev.Data
	switch ev.Type {
	case event.RunStarted:
		s.runStarted(ev)
	case event.Plan:
		s.plan(d)
	case event.PhaseStarted:
		s.phaseStarted(ev)
	case event.PhaseDone:
		s.phaseDone(ev)
	case event.AgentStarted:
		s.agentStarted(ev)
	case event.AgentQueued:
		s.agentQueued(d)
	case event.RateLimit:
		s.rateLimit(ev)
	case event.AgentRetry:
		s.agentRetry(ev)
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

// runStarted starts the state afresh for a run, or for a later attempt of it.
func (s *State) runStarted(ev event.Event) {
	d := ev.Data
	attempt := intOf(d, "attempt")
	if s.Status != "" {
		// A later attempt of the run (a stored stream read from the start): show
		// that attempt alone.
		*s = *NewState(s.o)
	}
	s.RunID, s.Workflow, s.Attempt = ev.RunID, oneLine(str(d, "workflow")), attempt
	s.Resumed = d["resumed"] == true
	s.Started, s.Status = ev.TS, "running"
}

// phaseDone closes a phase with the counts its end reports.
func (s *State) phaseDone(ev event.Event) {
	d := ev.Data
	p := s.byID[intOf(d, "phase_id")]
	if p == nil {
		return
	}
	p.Done, p.EndedAt = true, ev.TS
	p.OK, p.Failed, p.Cancelled = intOf(d, "ok"), intOf(d, "failed"), intOf(d, "cancelled")
	if s.current == p {
		s.current = nil
	}
}

// agentQueued moves an agent to its lane's queue.
func (s *State) agentQueued(d map[string]any) {
	if a := s.agents[str(d, "call_key")]; a != nil {
		a.Lane, a.Position = str(d, "lane"), intOf(d, "position")
		s.move(a, Queued)
		s.queue(a.Lane).add(a)
	}
}

// agentRetry counts a retry (and a rate-limit wait), and shows the agent retrying.
func (s *State) agentRetry(ev event.Event) {
	d := ev.Data
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
	a.readDone(d, ev.TS)
	s.tally(a, d["cached"] == true, ev.TS)
	s.countInPhase(a)
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

// readDone takes what an agent_done event at ts says of a: its model, usage, cost,
// times, attempts and outcome.
func (a *Agent) readDone(d map[string]any, ts time.Time) {
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
	a.Elapsed, a.Ended = msOf(d, "elapsed_ms"), ts
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
}

// tally sets a finished agent's status (cached: its result came from the cache) and
// adds it to the run's totals; a failure is logged at ts.
func (s *State) tally(a *Agent, cached bool, ts time.Time) {
	switch {
	case cached:
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
		s.log(ts, "error", a.Label()+" "+failure(a))
	}
	s.Totals.In += a.In
	s.Totals.Out += a.Out
	s.Totals.Cost += a.Cost
}

// countInPhase counts a finished agent in its phase (or the current one, for an agent
// of no known phase) while that phase is open.
func (s *State) countInPhase(a *Agent) {
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
