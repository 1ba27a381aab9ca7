package main

import "github.com/luft-run/luft/cmd/luft/internal/tui"

// Text a run produced — a report, an agent's or a script's error, a phase label, a tool's
// name or arguments, a planned script — is printed exactly where a program reads it (a
// pipe, a file, -o FILE, --json) and made harmless where a person sees it: on a terminal
// it loses escape sequences and control characters (tui.Clean, the filter the live board
// and the plain progress lines use), so that a model cannot write the clipboard (OSC 52),
// retitle the window (OSC 0) or redraw the screen through luft.

// outText is s as stdout shows it.
func (e *env) outText(s string) string {
	if !e.stdoutTTY {
		return s
	}
	return tui.Clean(s)
}

// outLine is s as one line (a table cell) of stdout.
func (e *env) outLine(s string) string {
	if !e.stdoutTTY {
		return s
	}
	return tui.CleanLine(s)
}

// errText is s as stderr shows it.
func (e *env) errText(s string) string {
	if !e.stderrTTY {
		return s
	}
	return tui.Clean(s)
}

// errLine is s as one line of stderr.
func (e *env) errLine(s string) string {
	if !e.stderrTTY {
		return s
	}
	return tui.CleanLine(s)
}
