package main

import (
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"
)

// env is the process state every command uses. Nothing else in luft reads os.Stdout,
// os.Getenv or the wall clock directly.
type env struct {
	stdin     io.Reader // what luft mcp serve reads; nil = nothing
	stdout    io.Writer
	stderr    io.Writer
	stderrTTY bool
	// stdoutTTY is set when stdout is a terminal (whatever TERM says): text the run
	// produced is then made harmless before it is printed there (see terminal.go).
	stdoutTTY bool
	// termWidth is the terminal's width in columns (see width).
	termWidth func() int
	// stdinTTY is the terminal keys come from (stdin when it is one), or nil.
	stdinTTY io.Reader
	getenv   func(string) string
	now      func() time.Time
	// notify delivers SIGINT/SIGTERM to c until stop is called.
	notify func(c chan<- os.Signal) (stop func())
	// exit ends the process at once (used for the second Ctrl-C).
	exit func(code int)
}

func osEnv() *env {
	tty := term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("TERM") != "dumb"
	var keys io.Reader
	if term.IsTerminal(int(os.Stdin.Fd())) {
		keys = os.Stdin
	}
	return &env{
		termWidth: func() int {
			if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w > 0 {
				return w
			}
			return 100
		},
		stdinTTY:  keys,
		stdin:     os.Stdin,
		stdout:    os.Stdout,
		stderr:    os.Stderr,
		stderrTTY: tty,
		stdoutTTY: term.IsTerminal(int(os.Stdout.Fd())),
		getenv:    os.Getenv,
		now:       time.Now,
		notify: func(c chan<- os.Signal) func() {
			signal.Notify(c, os.Interrupt, syscall.SIGTERM)
			return func() { signal.Stop(c) }
		},
		exit: os.Exit,
	}
}

// width is the width human output is laid out for: the terminal's, or 100 columns.
func (e *env) width() int {
	if e.termWidth != nil {
		if w := e.termWidth(); w > 0 {
			return w
		}
	}
	return 100
}
