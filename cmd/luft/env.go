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
	stdout    io.Writer
	stderr    io.Writer
	stderrTTY bool
	getenv    func(string) string
	now       func() time.Time
	// notify delivers SIGINT/SIGTERM to c until stop is called.
	notify func(c chan<- os.Signal) (stop func())
	// exit ends the process at once (used for the second Ctrl-C).
	exit func(code int)
}

func osEnv() *env {
	tty := term.IsTerminal(int(os.Stderr.Fd())) && os.Getenv("TERM") != "dumb"
	return &env{
		stdout:    os.Stdout,
		stderr:    os.Stderr,
		stderrTTY: tty,
		getenv:    os.Getenv,
		now:       time.Now,
		notify: func(c chan<- os.Signal) func() {
			signal.Notify(c, os.Interrupt, syscall.SIGTERM)
			return func() { signal.Stop(c) }
		},
		exit: os.Exit,
	}
}
