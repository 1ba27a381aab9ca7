package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// blockedWriter is a terminal or pipe nobody reads: every write blocks until the test
// ends.
type blockedWriter struct{ release chan struct{} }

func (w blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	return len(p), nil
}

// A view blocked writing never keeps luft alive: with stdout (--json) or stderr (plain
// lines) that nobody reads, a flooded run stopped by a signal still returns exit 3, and a
// second signal still exits 130. Before, the first write that blocked held up the exit
// for ever; in plain mode even the "stopping" line did, so the run was never cancelled.
func TestBlockedOutputDoesNotHoldUpExit(t *testing.T) {
	dir := t.TempDir()
	flood := filepath.Join(dir, "flood.lua")
	if err := os.WriteFile(flood, []byte("function main()\n  local i = 0\n  while true do i = i + 1; phase('p' .. i) end\nend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		flag    string
		blocked string // the stream nobody reads: stdout or stderr
		signals int
	}{
		{"json", "--json", "stdout", 1},
		{"plain", "--no-tui", "stderr", 1},
		{"json second signal", "--json", "stdout", 2},
		{"plain second signal", "--no-tui", "stderr", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			done := make(chan struct{})
			// The fake exit of the second signal does not end execute: it goes on writing
			// into the state dir once its output is released. Wait for it, or the test's
			// TempDir is removed under its feet.
			t.Cleanup(func() {
				close(release)
				select {
				case <-done:
				case <-time.After(exitTimeout):
					t.Errorf("luft still ran %s after its output was released", exitTimeout)
				}
			})
			var stdout, stderr io.Writer = io.Discard, io.Discard
			if tc.blocked == "stdout" {
				stdout = blockedWriter{release}
			} else {
				stderr = blockedWriter{release}
			}
			var sigc chan<- os.Signal
			notified := make(chan struct{})
			exits := make(chan int, 4)
			e := &env{
				stdout: stdout, stderr: stderr,
				getenv: func(string) string { return "" },
				now:    time.Now,
				notify: func(c chan<- os.Signal) func() {
					sigc = c
					close(notified)
					return func() {}
				},
				exit: func(code int) { exits <- code },
			}
			// --backend mock: no notice on stderr before the run starts.
			args := []string{"--state-dir", filepath.Join(dir, tc.name), "run", "-w", flood, "--backend", "mock", tc.flag}
			result := make(chan int, 1)
			go func() { defer close(done); result <- execute(e, args) }()
			select {
			case <-notified:
			case <-time.After(exitTimeout):
				t.Fatal("luft never started the run")
			}
			for range tc.signals {
				sigc <- os.Interrupt
			}
			want, got := exitResumable, result
			if tc.signals == 2 {
				want, got = exitHard, exits
			}
			select {
			case code := <-got:
				if code != want {
					t.Fatalf("exit code %d, want %d", code, want)
				}
			case <-time.After(exitTimeout):
				t.Fatalf("luft did not exit within %s of the signal while its %s was blocked", exitTimeout, tc.blocked)
			}
		})
	}
}
