package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
)

// board draws one frame of a run: header, totals, plan, agents, log and footer. Every line
// is cut to the width; with a height, the sections share it and lists end in "+N more".
type board struct {
	st       *State
	now      time.Time
	w, h     int // h <= 0: no height limit (lists are still capped)
	sty      Styles
	loc      *time.Location
	selected string // call key of the agent under the cursor; "" = no cursor
	cursor   bool   // draw the cursor column
	showLog  bool
	stopping bool   // a cancel was asked for and the run has not ended
	footer   string // the keys line; "" = none
	footWarn bool
	lanes    []Lane // the scheduler's lanes, when the caller samples them

	out []string
}

// Caps on lists when there is no height limit.
const (
	capPhases = 40
	capAgents = 20
	capLogs   = 10
)

func (b *board) line(style lipgloss.Style, text string) {
	b.out = append(b.out, style.Render(trunc(strings.TrimRight(text, " "), b.w)))
}

func (b *board) render() string {
	b.out = b.out[:0]
	st := b.st
	b.header()
	sub, subStyle := b.subline()
	if sub != "" {
		b.line(subStyle, sub)
	}
	b.line(b.sty.Plain, b.totals())
	for _, l := range laneLines(st.lanes(b.lanes), b.now, maxLaneLines) {
		b.line(b.sty.Dim, l)
	}

	fixed := len(b.out)
	if b.footer != "" {
		fixed++
	}
	nRows := st.NumRows()
	planWant, agentWant, logWant := 0, 1, 0
	if len(st.Phases) > 0 {
		planWant = 1 + min(len(st.Phases), capPhases)
	}
	if nRows > 0 {
		agentWant = 1 + nRows
		if b.h <= 0 {
			agentWant = 1 + min(nRows, capAgents+1)
		}
	}
	if b.showLog && len(st.logs) > 0 {
		logWant = 1 + min(len(st.logs), capLogs)
	}
	planN, agentN, logN := planWant, agentWant, logWant
	if b.h > 0 {
		planN, agentN, logN = 0, 0, 0
		avail := b.h - fixed
		give := func(n *int, upto int) {
			if add := min(upto-*n, avail); add > 0 {
				*n += add
				avail -= add
			}
		}
		give(&agentN, min(agentWant, 2))
		give(&planN, min(planWant, 2))
		give(&logN, min(logWant, 2))
		give(&planN, min(planWant, 1+6))
		give(&logN, min(logWant, 1+5))
		give(&agentN, agentWant) // the agents take what is left
		give(&planN, planWant)
		give(&logN, logWant)
		// A list given only its title shows nothing: hand the line to the agents.
		if planN == 1 && planWant > 1 {
			planN, agentN = 0, agentN+1
		}
		if logN == 1 && logWant > 1 {
			logN, agentN = 0, agentN+1
		}
	}
	if planN > 0 {
		b.plan(planN - 1)
	}
	if agentN > 0 {
		b.agents(agentN - 1)
	}
	if logN > 0 {
		b.logs(logN - 1)
	}
	if b.footer != "" {
		style := b.sty.Dim
		if b.footWarn {
			style = b.sty.Warn
		}
		b.line(style, b.footer)
	}
	if b.h > 0 && len(b.out) > b.h {
		b.out = b.out[:b.h]
	}
	return strings.Join(b.out, "\n")
}

func (b *board) header() {
	st := b.st
	status, style := st.Status, b.sty.Title
	switch {
	case status == "":
		status = "starting"
	case status == "running" && b.stopping:
		status, style = "stopping", b.sty.Warn
	case status == "completed":
		style = b.sty.OK
	case status == "failed":
		style = b.sty.Fail
	case status == "cancelled" || status == "suspended":
		style = b.sty.Warn
	}
	switch {
	case st.Done():
		status += " in " + fmtDur(st.RunElapsed(b.now))
	case st.Status != "":
		status += " " + fmtClock(st.RunElapsed(b.now))
	}
	run := ""
	if st.RunID != "" {
		run = "run " + st.RunID
	}
	b.line(style, join("luft", status, st.Workflow, run))
}

// subline says why a run stopped.
func (b *board) subline() (string, lipgloss.Style) {
	st := b.st
	if !st.Done() {
		return "", b.sty.Plain
	}
	switch st.Status {
	case "suspended":
		reason := st.SuspendReason
		if reason == "" {
			reason = st.Err
		}
		s := "suspended: " + oneLine(reason)
		if !st.ResumeAfter.IsZero() {
			s = join(s, resumeAt(st.ResumeAfter, b.now, b.loc))
		}
		return s, b.sty.Warn
	case "failed":
		return "error: " + oneLine(st.Err), b.sty.Fail
	case "cancelled":
		return "stopped: " + oneLine(st.Err), b.sty.Warn
	}
	return "", b.sty.Plain
}

func resumeAt(t, now time.Time, loc *time.Location) string {
	s := "resumable after " + fmtAt(t, now, loc)
	if t.After(now) {
		s += " (in " + fmtClock(t.Sub(now).Round(time.Second)) + ")"
	}
	return s
}

func (b *board) totals() string {
	st, t := b.st, b.st.Totals
	done := plural(t.Finished(), "agent", "agents") + " done"
	if planned, ok := st.Planned(); ok {
		done = fmt.Sprintf("%d/%d agents", t.Finished(), planned)
	}
	var failed, cached, eta, tokens, cost, waits string
	if t.Failed > 0 {
		failed = fmt.Sprintf("%d failed", t.Failed)
	}
	if t.Cached > 0 {
		cached = fmt.Sprintf("%d cached", t.Cached)
	}
	if left, whole, ok := st.ETA(b.now); ok {
		eta = "ETA ~" + fmtClock(left)
		if !whole {
			eta = "phase ETA ~" + fmtClock(left)
		}
	}
	if t.In+t.Out > 0 {
		tokens = "tokens " + fmtTok(t.In) + " in / " + fmtTok(t.Out) + " out"
	}
	if t.Cost > 0 {
		cost = fmtCost(t.Cost)
	}
	if t.RateWaits > 0 {
		waits = plural(t.RateWaits, "rate-limit wait", "rate-limit waits") + " (" + fmtClock(t.RateWait) + ")"
	}
	return join(done, failed, cached, eta, tokens, cost, waits)
}

// plan draws the phases in rows lines (the last one may say how many are hidden).
func (b *board) plan(rows int) {
	st := b.st
	b.line(b.sty.Section, "Plan")
	phases := st.Phases
	if rows <= 0 {
		return
	}
	from, to := 0, len(phases)
	if len(phases) > rows {
		// Show a window around the phase in progress (or the first not done) and, with
		// room for it, one line for the rest.
		shown := rows
		if rows > 1 {
			shown = rows - 1
		}
		focus := len(phases) - 1
		for i, p := range phases {
			if !p.Done {
				focus = i
				break
			}
		}
		from = clamp(focus-1, 0, len(phases)-shown)
		to = from + shown
	}
	lw, cw := 6, 1
	for _, p := range phases[from:to] {
		lw = max(lw, width(p.Label))
		cw = max(cw, width(phaseCount(p)))
	}
	lw = min(lw, 24, max(b.w/3, 6))
	for _, p := range phases[from:to] {
		glyph, style, dim := "○", b.sty.Dim, true
		var extra []string
		switch {
		case p.Done:
			glyph = "✓"
			if !p.StartedAt.IsZero() && !p.EndedAt.IsZero() {
				extra = append(extra, fmtDur(p.EndedAt.Sub(p.StartedAt)))
			}
		case p == st.current:
			glyph, style, dim = "●", b.sty.Plain, false
			extra = append(extra, fmtClock(b.now.Sub(p.StartedAt)))
		case p.Started && st.Done():
			glyph = "■" // the run ended inside it
		case p.Started:
			glyph = "●"
		}
		if p.Failed > 0 {
			extra = append([]string{fmt.Sprintf("%d failed", p.Failed)}, extra...)
			if dim {
				style = b.sty.Fail
			}
		}
		text := "  " + glyph + " " + pad(p.Label, lw) + "  " + padLeft(phaseCount(p), cw)
		if len(extra) > 0 {
			text += "  " + join(extra...)
		}
		if p.Description != "" { // meta.phases[].description (or Luft's detail)
			text += "  — " + p.Description
		}
		b.line(style, text)
	}
	if before, after := from, len(phases)-to; before+after > 0 && rows > 1 {
		var parts []string
		if before > 0 {
			parts = append(parts, fmt.Sprintf("+%d earlier", before))
		}
		if after > 0 {
			parts = append(parts, fmt.Sprintf("+%d later", after))
		}
		b.line(b.sty.Dim, "  "+join(parts...))
	}
}

func phaseCount(p *Phase) string {
	switch {
	case p.Planned > 0:
		return fmt.Sprintf("%d/%d", p.Finished(), p.Planned)
	case p.Started:
		return fmt.Sprintf("%d", p.Finished())
	}
	return "–"
}

// agentCols are the column widths of agent rows; 0 hides a column.
type agentCols struct{ name, where, el, tok int }

func (b *board) cols(rows []*Agent) agentCols {
	maxName, maxWhere := 4, 4
	for _, a := range rows {
		maxName = max(maxName, width(a.Label()))
		maxWhere = max(maxWhere, width(a.Where()))
	}
	switch {
	case b.w >= 100:
		return agentCols{name: min(maxName, 28), where: min(maxWhere, 24), el: 6, tok: 6}
	case b.w >= 72:
		return agentCols{name: min(maxName, 20), where: min(maxWhere, 16), el: 6, tok: 6}
	case b.w >= 50:
		return agentCols{name: min(maxName, 16), el: 6, tok: 6}
	}
	return agentCols{name: min(maxName, max(b.w/3, 4)), el: 5}
}

// agents draws the agent list in rows lines, keeping the cursor in view.
func (b *board) agents(rows int) {
	st := b.st
	title := join("Agents", counted(st.Count(Running), "running"), counted(st.Count(Queued), "queued"),
		counted(st.Count(Waiting)+st.Count(Retrying), "waiting"), counted(st.Count(Suspended), "suspended"))
	n := st.NumRows()
	if n == 0 {
		title = join(title, "none yet")
		if st.Done() {
			title = "Agents · none"
		}
	}
	b.line(b.sty.Section, title)
	if rows <= 0 || n == 0 {
		return
	}
	shown := rows
	if n > rows && rows > 1 {
		shown = rows - 1 // the last line says how many more
	}
	offset := 0
	if b.selected != "" && n > shown {
		idx := -1
		i := 0
		st.Rows(func(a *Agent) bool {
			if a.Key == b.selected {
				idx = i
				return false
			}
			i++
			return true
		})
		if idx >= shown {
			offset = idx - shown + 1
		}
	}
	list := make([]*Agent, 0, shown)
	i := 0
	st.Rows(func(a *Agent) bool {
		if i >= offset {
			list = append(list, a)
		}
		i++
		return len(list) < shown
	})
	c := b.cols(list)
	for _, a := range list {
		text, style := b.agentRow(a, c)
		if b.cursor {
			mark := "  "
			if a.Key == b.selected {
				mark, style = "> ", b.sty.Selected
			}
			text = mark + text
		} else {
			text = "  " + text
		}
		b.line(style, text)
	}
	if more := n - len(list); more > 0 && len(list) < rows {
		b.line(b.sty.Dim, fmt.Sprintf("  +%d more", more))
	}
}

func counted(n int, what string) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d %s", n, what)
}

// agentState is an agent's glyph, what it is doing (or how it ended) and its style.
func (b *board) agentState(a *Agent) (glyph, text string, style lipgloss.Style) {
	glyph, style = "●", b.sty.Plain
	switch a.Status {
	case Running:
		text = a.Last
		if text == "" {
			text = "running"
		}
	case Queued:
		glyph, style = "○", b.sty.Dim
		text = "queued for a slot"
	case Waiting:
		glyph, style = "○", b.sty.Warn
		text = "rate limit"
		if a.Reason != "" {
			text += " (" + a.Reason + ")"
		}
		if left := a.Until.Sub(b.now); left > 0 {
			text += " · refill in " + fmtClock(left.Round(time.Second))
		} else {
			text += " · refilled"
		}
	case Retrying:
		glyph, style = "↻", b.sty.Warn
		text = fmt.Sprintf("retry %d", a.Attempt)
		if left := a.Until.Sub(b.now); left > 0 {
			text += " in " + fmtDur(left)
		}
		if a.Reason != "" {
			text += " (" + a.Reason + ")"
		}
	case Suspended:
		glyph, style = "○", b.sty.Warn
		text = "rate limit"
		if a.Reason != "" {
			text += " (" + a.Reason + ")"
		}
		text += " · the run suspends"
		if !a.Until.IsZero() {
			text += " until " + fmtAt(a.Until, b.now, b.loc)
		}
	case Done:
		glyph, style = "✓", b.sty.Dim
		text = a.Last
	case Cached:
		glyph, style = "✓", b.sty.Dim
		text = "cached"
	case Failed:
		glyph, style = "✗", b.sty.Fail
		if a.Result == "cancelled" {
			glyph = "■"
		}
		text = failure(a)
	}
	return glyph, text, style
}

// agentRow is one agent's line (without the cursor column) and its style.
func (b *board) agentRow(a *Agent, c agentCols) (string, lipgloss.Style) {
	glyph, text, style := b.agentState(a)
	var el, tok string
	if a.Status.Active() {
		if run := a.RunTime(b.now); run > 0 || a.Status == Running {
			el = fmtClock(run)
		}
		if a.Streamed > 0 {
			tok = "~" + fmtTok(a.Streamed) // output so far, estimated from the streamed text
		}
	} else {
		if a.Ran > 0 {
			el = fmtDur(a.Ran)
		}
		if a.Tokens > 0 {
			tok = fmtTok(a.Tokens)
		}
		text = join(a.waits(), text)
	}
	row := glyph + " " + pad(a.Label(), c.name)
	if c.where > 0 {
		row += " " + pad(a.Where(), c.where)
	}
	if c.el > 0 {
		row += " " + padLeft(el, c.el)
	}
	if c.tok > 0 {
		row += " " + padLeft(tok, c.tok)
	}
	return row + "  " + text, style
}

// agentInfo is the title line of an agent's detail pane.
func (b *board) agentInfo(a *Agent) (string, lipgloss.Style) {
	glyph, text, style := b.agentState(a)
	state := a.Status.String()
	switch {
	case a.Status.Active() && !a.Started.IsZero():
		state += " " + fmtClock(a.RunTime(b.now))
	case !a.Status.Active() && a.Elapsed > 0:
		state += " in " + fmtDur(a.Ran)
		if w := a.waits(); w != "" {
			state += " (" + w + ")"
		}
	}
	var tok string
	if a.Tokens > 0 {
		tok = fmtTok(a.Tokens) + " tok"
	}
	if a.Status == Running || a.Status == Done || a.Status == Cached {
		text = "" // the output below says it
	}
	return join(glyph+" "+a.Label(), a.Where(), state, tok, a.Key, text), style
}

func (b *board) logs(rows int) {
	b.line(b.sty.Section, "Log")
	logs := b.st.logs
	if rows <= 0 {
		return
	}
	if len(logs) > rows {
		logs = logs[len(logs)-rows:]
	}
	for _, l := range logs {
		style := b.sty.Plain
		switch l.Level {
		case "warn":
			style = b.sty.Warn
		case "error":
			style = b.sty.Fail
		case "trace", "debug":
			style = b.sty.Dim
		}
		text := "  " + pad(l.Level, 5) + " " + l.Msg
		if b.w >= 50 && !l.TS.IsZero() {
			text = "  " + l.TS.In(b.loc).Format("15:04:05") + " " + pad(l.Level, 5) + " " + l.Msg
		}
		b.line(style, text)
	}
}

// StatusView draws the board of a run without keys or a height limit (lists are capped):
// for `luft status RUN` and other one-shot views of stored events. Lines are at most width
// cells wide.
func StatusView(st *State, now time.Time, width int, sty Styles, loc *time.Location) string {
	if width <= 0 {
		width = 80
	}
	if loc == nil {
		loc = time.Local
	}
	b := &board{st: st, now: now, w: width, sty: sty.orDefault(), loc: loc, showLog: true}
	return b.render()
}
