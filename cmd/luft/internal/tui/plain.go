package tui

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/luft-run/luft/event"
)

// PlainOptions configure the plain renderer.
type PlainOptions struct {
	Level    string         // lowest log level printed: trace, debug, info (default), warn, error
	Styles   Styles         // NoColor (the default) for NO_COLOR, --no-color and pipes
	Location *time.Location // for times of day (default time.Local)
	// ShowRunDone prints run_done as a line (luft logs). luft run leaves it out and
	// prints the Summary instead.
	ShowRunDone bool
	State       StateOptions
}

// Plain shows a run as one concise line per state change, for stderr when it is not a
// terminal and for `luft logs`. The caller drives the periodic Status line.
type Plain struct {
	w     io.Writer
	o     PlainOptions
	sty   Styles
	level int
	st    *State
	// lane → the refill time last reported, so turns that wait for the same refill make
	// one line, not one each.
	waits map[string]time.Time
	// Calls cancelled in a row (the siblings of a failure, the calls a stop ended) make
	// one line, written before the next line.
	cancelled     int
	cancelledLine string
	lanes         []Lane
}

// SetLanes gives the next Status the scheduler's lanes as sampled now.
func (p *Plain) SetLanes(ls []Lane) {
	p.lanes = ls
	if !p.st.Done() {
		p.st.SyncLanes(ls)
	}
}

// NewPlain returns a plain renderer writing to w.
func NewPlain(w io.Writer, o PlainOptions) *Plain {
	if o.Level == "" {
		o.Level = "info"
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.State.LogLevel == "" {
		o.State.LogLevel = o.Level
	}
	return &Plain{w: w, o: o, sty: o.Styles.orDefault(), level: levelRank(o.Level), st: NewState(o.State),
		waits: map[string]time.Time{}}
}

// State is the run as the renderer has folded it (for the Summary).
func (p *Plain) State() *State { return p.st }

// Event folds ev and writes its line, if it has one. Calls cancelled one after another
// are written as one line.
func (p *Plain) Event(ev event.Event) error {
	line := p.Line(ev)
	if ev.Type == event.AgentDone && line != "" {
		if a := p.st.Agent(str(ev.Data, "call_key")); a != nil && a.Status == Failed && a.Result == "cancelled" {
			p.cancelled++
			p.cancelledLine = line
			return nil
		}
	}
	var err error
	if line != "" || ev.Type == event.RunDone {
		err = p.flush()
	}
	if line != "" && err == nil {
		_, err = io.WriteString(p.w, line+"\n")
	}
	return err
}

// flush writes the cancelled calls not written yet.
func (p *Plain) flush() error {
	n, line := p.cancelled, p.cancelledLine
	p.cancelled, p.cancelledLine = 0, ""
	switch {
	case n == 0:
		return nil
	case n > 1:
		line = p.sty.Warn.Render(fmt.Sprintf("  ■ %d agents cancelled", n))
	}
	_, err := io.WriteString(p.w, line+"\n")
	return err
}

// Status writes the one-line status of the run at now.
func (p *Plain) Status(now time.Time) error {
	if err := p.flush(); err != nil {
		return err
	}
	_, err := io.WriteString(p.w, p.sty.Dim.Render(p.StatusLine(now))+"\n")
	for _, l := range laneLines(p.st.lanes(p.lanes), now, maxLaneLines) {
		if err == nil {
			_, err = io.WriteString(p.w, p.sty.Dim.Render("  "+l)+"\n")
		}
	}
	return err
}

// StatusLine is the one-line status of the run at now, e.g. "12/40 agents · 3 running ·
// 2 queued · 15.2k tokens · $0.04 · 1m12s".
func (p *Plain) StatusLine(now time.Time) string {
	return statusLine(p.st, now)
}

func statusLine(st *State, now time.Time) string {
	t := st.Totals
	agents := plural(t.Finished(), "agent", "agents") + " done"
	if planned, ok := st.Planned(); ok {
		agents = fmt.Sprintf("%d/%d agents", t.Finished(), planned)
	}
	if t.Failed > 0 {
		agents += fmt.Sprintf(" (%d failed)", t.Failed)
	}
	var cost, eta string
	if t.Cost > 0 {
		cost = fmtCost(t.Cost)
	}
	if left, _, ok := st.ETA(now); ok {
		eta = "ETA ~" + fmtClock(left)
	}
	return join(agents, fmt.Sprintf("%d running", st.Count(Running)), fmt.Sprintf("%d queued", st.Queued()),
		fmtTok(t.In+t.Out)+" tokens", cost, fmtClock(st.RunElapsed(now)), eta)
}

// Line folds ev and returns its line, styled, or "" when the event makes none.
func (p *Plain) Line(ev event.Event) string {
	p.st.Apply(ev)
	text, style := p.text(ev)
	if text == "" {
		return ""
	}
	return style.Render(text)
}

func (p *Plain) text(ev event.Event) (string, lipgloss.Style) {
	st, d, none := p.st, ev.Data, p.sty.Plain
	switch ev.Type {
	case event.RunStarted:
		s := fmt.Sprintf("luft: run %s started: %s", ev.RunID, st.Workflow)
		if st.Resumed {
			s += fmt.Sprintf(" (resumed, attempt %d)", st.Attempt)
		}
		return s, p.sty.Title
	case event.Plan:
		labels := make([]string, 0, len(st.Phases))
		for _, ph := range st.Phases {
			if !ph.Started {
				labels = append(labels, ph.Label)
			}
		}
		if len(labels) == 0 {
			return "", none
		}
		return "plan: " + strings.Join(labels, " → "), none
	case event.PhaseStarted:
		s := fmt.Sprintf("phase %d · %s", intOf(d, "phase_id"), oneLine(str(d, "label")))
		if n := intOf(d, "planned"); n > 0 {
			s += fmt.Sprintf(" · %d planned", n)
		}
		return s, p.sty.Section
	case event.PhaseDone:
		s := fmt.Sprintf("phase %d done · %d ok, %d failed", intOf(d, "phase_id"), intOf(d, "ok"), intOf(d, "failed"))
		if ph := st.byID[intOf(d, "phase_id")]; ph != nil && !ph.StartedAt.IsZero() {
			s += " · " + fmtDur(ph.EndedAt.Sub(ph.StartedAt))
		}
		return s, p.sty.Section
	case event.AgentStarted:
		// A line per start, so a long phase is not silent until its first agent ends.
		a := st.Agent(str(d, "call_key"))
		if a == nil {
			return "", none
		}
		where := str(d, "backend")
		if m := str(d, "model"); m != "" {
			where += "/" + m
		}
		return "  ▸ " + join(a.Label(), oneLine(where)), p.sty.Dim
	case event.AgentDone:
		return p.agentDone(d)
	case event.AgentRetry:
		s := fmt.Sprintf("  ↻ %s retry %d in %s: %s", st.label(str(d, "call_key")), intOf(d, "attempt"),
			fmtDur(msOf(d, "wait_ms")), oneLine(str(d, "reason")))
		if e := oneLine(str(d, "error")); e != "" {
			s += " (" + e + ")"
		}
		return s, p.sty.Warn
	case event.SchemaRetry:
		return fmt.Sprintf("  ↻ %s output did not match its schema (re-prompt %d): %s", st.label(str(d, "call_key")),
			intOf(d, "attempt"), oneLine(str(d, "errors"))), p.sty.Warn
	case event.RateLimit:
		return p.rateLimit(ev)
	case event.ParallelStarted:
		return fmt.Sprintf("  ⇉ parallel %s · %d branches", str(d, "span_id"), intOf(d, "count")), none
	case event.ParallelDone:
		return fmt.Sprintf("  ⇇ parallel %s · %d ok, %d failed", str(d, "span_id"), intOf(d, "ok"), intOf(d, "failed")), none
	case event.PipelineStarted:
		return fmt.Sprintf("  ⇶ pipeline %s · %d items × %d stages", str(d, "span_id"), intOf(d, "items"),
			intOf(d, "total_stages")), none
	case event.PipelineDone:
		return fmt.Sprintf("  ⇶ pipeline %s done · %d ok, %d failed", str(d, "span_id"), intOf(d, "ok"), intOf(d, "failed")), none
	case event.ConvergeStarted:
		return fmt.Sprintf("  ⟲ converge · %d items, up to %d rounds", intOf(d, "items"), intOf(d, "max_rounds")), none
	case event.ConvergeDone:
		state := "did not converge"
		if d["converged"] == true {
			state = "converged"
		}
		return fmt.Sprintf("  ⟲ converge %s after %d rounds · %d findings", state, intOf(d, "rounds"), intOf(d, "findings")), none
	case event.WorkflowStarted:
		return "  ↳ workflow " + oneLine(str(d, "path")), none
	case event.WorkflowDone:
		if d["ok"] == true {
			return "  ↲ workflow " + oneLine(str(d, "path")) + " done", none
		}
		return "  ↲ workflow " + oneLine(str(d, "path")) + " failed: " + oneLine(str(d, "error")), p.sty.Fail
	case event.Log:
		level := str(d, "level")
		if levelRank(level) < p.level {
			return "", none
		}
		style := none
		switch level {
		case "warn":
			style = p.sty.Warn
		case "error":
			style = p.sty.Fail
		}
		return fmt.Sprintf("  [%s] %s", level, oneLine(str(d, "msg"))), style
	case event.Budget:
		s := fmt.Sprintf("  budget set: time_ms=%s agents=%s tokens=%s usd=%s", str(d, "time_ms"), str(d, "agents"),
			str(d, "tokens"), str(d, "usd"))
		if r := intOf(d, "rounds"); r > 0 {
			s += fmt.Sprintf(" rounds=%d (a hint)", r)
		}
		return s, none
	case event.ApprovalRequested:
		return fmt.Sprintf("  ⏸ %s waits for approval %s: %s %s", st.label(str(d, "call_key")), str(d, "approval_id"),
			oneLine(str(d, "tool")), oneLine(str(d, "arguments"))), p.sty.Warn
	case event.ApprovalDecided:
		what := "declined"
		if d["allow"] == true {
			what = "allowed"
		}
		return fmt.Sprintf("  ▶ %s %s: %s", st.label(str(d, "call_key")), what, oneLine(str(d, "tool"))), none
	case event.RunSuspended:
		s := "luft: run suspended: " + oneLine(str(d, "reason"))
		if !st.ResumeAfter.IsZero() {
			s += "; " + resumeAt(st.ResumeAfter, ev.TS, p.o.Location)
		}
		return s, p.sty.Warn
	case event.RunDone:
		if !p.o.ShowRunDone {
			return "", none
		}
		s := fmt.Sprintf("luft: run %s %s in %s", ev.RunID, st.Status, fmtDur(st.Elapsed))
		if st.Err != "" {
			s += ": " + oneLine(st.Err)
		}
		return s, statusStyle(p.sty, st.Status)
	}
	return "", none
}

func (p *Plain) agentDone(d map[string]any) (string, lipgloss.Style) {
	a := p.st.Agent(str(d, "call_key"))
	if a == nil {
		return "", p.sty.Plain
	}
	var el, cost string
	if a.Ran > 0 {
		el = fmtDur(a.Ran)
	}
	el = join(el, a.waits())
	if a.Cost > 0 {
		cost = fmtCost(a.Cost)
	}
	switch a.Status {
	case Cached:
		return fmt.Sprintf("  ✓ %s · %d tok (cached)", a.Label(), a.Tokens), p.sty.Plain
	case Done:
		return "  ✓ " + join(a.Label(), el, fmt.Sprintf("%d tok", a.Tokens), cost), p.sty.Plain
	}
	if a.Result == "cancelled" {
		return "  ■ " + join(a.Label(), el, failure(a)), p.sty.Warn
	}
	return "  ✗ " + join(a.Label(), el, failure(a)), p.sty.Fail
}

func (p *Plain) rateLimit(ev event.Event) (string, lipgloss.Style) {
	d := ev.Data
	lane, reason, wait := oneLine(str(d, "lane")), oneLine(str(d, "reason")), msOf(d, "wait_ms")
	what := "rate limit on " + lane
	if reason != "" {
		what += " (" + reason + ")"
	}
	if str(d, "action") == "suspend" {
		return "  ⧗ " + what + ": a wait of " + fmtDur(wait) + " is too long, the run suspends", p.sty.Warn
	}
	until := timeOf(d["until"])
	if until.IsZero() {
		until = ev.TS.Add(wait)
	}
	if last, ok := p.waits[lane]; ok && until.Sub(last).Abs() < time.Second {
		return "", p.sty.Plain // the same refill as the line before
	}
	p.waits[lane] = until
	return fmt.Sprintf("  ⧗ %s: %s waits %s", what, p.st.label(str(d, "call_key")), fmtDur(wait)), p.sty.Warn
}

func statusStyle(sty Styles, status string) lipgloss.Style {
	switch status {
	case "completed":
		return sty.OK
	case "failed":
		return sty.Fail
	case "cancelled", "suspended":
		return sty.Warn
	}
	return sty.Title
}
