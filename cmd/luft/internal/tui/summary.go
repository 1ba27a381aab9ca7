package tui

import (
	"fmt"
	"strings"
	"time"
)

// SummaryOptions say what the summary cannot know from the events.
type SummaryOptions struct {
	// ReportPath is where the report was written besides stdout (-o FILE); "" = stdout.
	ReportPath string
	// StateDir is repeated in the resume command (--state-dir DIR) when not "": pass it
	// when the run's state dir is not the default one.
	StateDir string
	// Resume replaces the resume command (e.g. one with --rerun-from-divergence).
	Resume string
	// Lanes are the scheduler's lanes at the end: a line each for those that met or
	// learned a rate limit (their budgets, waits and 429s).
	Lanes []Lane
	// NoResume leaves the resume command out: the run cannot go on (its script is broken).
	NoResume bool
	Now      time.Time      // for "in 3m" of a resume time (default: the run's end)
	Location *time.Location // for times of day (default time.Local)
	Styles   Styles
}

var statusMarks = map[string]string{"completed": "✓", "failed": "✗", "cancelled": "■", "suspended": "⏸"}

// Summary is the end of a run in a few lines: status, elapsed, agents, tokens, cost,
// rate-limit waits, where the report went, and for a run that can go on, the command that
// resumes it (and when, for a suspended one).
func Summary(st *State, o SummaryOptions) string {
	sty := o.Styles.orDefault()
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.Now.IsZero() {
		o.Now = st.Ended
	}
	status := st.Status
	if status == "" || status == "running" {
		status = "ended" // the stream stopped before run_done
	}
	mark := statusMarks[status]
	if mark == "" {
		mark = "•"
	}
	var b strings.Builder
	b.WriteString(statusStyle(sty, st.Status).Render(fmt.Sprintf("%s run %s %s in %s", mark, st.RunID, status,
		fmtDur(st.RunElapsed(o.Now)))))
	b.WriteByte('\n')
	row := func(label, value string) {
		fmt.Fprintf(&b, "  %-9s %s\n", label, value)
	}
	if msg := strings.TrimSpace(st.Err); msg != "" && status != "completed" {
		label := "error"
		if status == "suspended" || status == "cancelled" {
			label = "reason"
		}
		if status == "suspended" && st.SuspendReason != "" {
			msg = strings.TrimSpace(st.SuspendReason)
		}
		// A multi-line message (a script traceback) stays readable under its label.
		row(label, strings.ReplaceAll(msg, "\n", "\n"+strings.Repeat(" ", 12)))
	}
	t := st.Totals
	agents := fmt.Sprintf("%d ok, %d failed, %d cached", t.OK, t.Failed, t.Cached)
	if t.Cancelled > 0 {
		agents += fmt.Sprintf(", %d cancelled", t.Cancelled)
	}
	row("agents", agents)
	row("tokens", fmt.Sprintf("%d in / %d out", t.In, t.Out))
	row("cost", fmt.Sprintf("$%.4f", t.Cost))
	waits := "none on rate limits"
	if t.RateWaits > 0 {
		waits = fmt.Sprintf("%s on rate limits, %s in all", plural(t.RateWaits, "wait", "waits"), fmtDur(t.RateWait))
	}
	if t.Retries > 0 {
		waits += " · " + plural(t.Retries, "retry", "retries")
	}
	row("waits", waits)
	for _, l := range laneLines(limitedOnly(o.Lanes), o.Now, maxLaneLines) {
		row("", l)
	}
	if status == "completed" {
		switch {
		case !st.HasReport:
			row("report", "none (the script called no report())")
		case o.ReportPath != "":
			row("report", "stdout and "+o.ReportPath)
		default:
			row("report", "stdout")
		}
	}
	if status == "suspended" && !st.ResumeAfter.IsZero() {
		row("resumable", strings.TrimPrefix(resumeAt(st.ResumeAfter, o.Now, o.Location), "resumable "))
	}
	if !o.NoResume && (status == "failed" || status == "cancelled" || status == "suspended" || status == "ended") {
		cmd := o.Resume
		if cmd == "" {
			cmd = ResumeCommand(st.RunID, o.StateDir)
		}
		row("resume", sty.Title.Render(cmd))
	}
	return strings.TrimRight(b.String(), "\n")
}

// ResumeCommand is the command that resumes a run: luft run --resume ID, with
// --state-dir DIR when stateDir is not "".
func ResumeCommand(runID, stateDir string) string {
	cmd := "luft run --resume " + runID
	if stateDir != "" {
		cmd += " --state-dir " + shellQuote(stateDir)
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:=@%+,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
