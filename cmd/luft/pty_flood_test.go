//go:build unix

package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// floodScript starts phases and logs long lines without end: a live board that folded
// every event in turn would fall behind it and hold up the exit.
const floodScript = `
function main()
  local line = string.rep("w", 100000)
  local i = 0
  while true do
    i = i + 1
    phase("p" .. i)
    if i % 50 == 0 then log(line) end
  end
end
`

// floodBound is the CPU time a flooded run may spend after its --timeout or its SIGTERM:
// the run's own stop plus the view's drain, with room for -race. A board that fell behind
// the flood would spend its backlog's worth after the stop; CPU time, unlike the wall
// clock, does not grow when the machine is busy. (A board that held up the exit without
// working is caught by exitCode's wall-clock guard.)
const floodBound = 15 * time.Second

// The live board never holds up the exit: a flooded run with --timeout 2s, and one
// stopped by SIGTERM, exit in time with the right code, the terminal restored.
func TestPTYFloodExitsInTime(t *testing.T) {
	skipUnlessPTY(t)
	for _, tc := range []struct {
		name string
		args []string
		term bool
		code int
	}{
		{"timeout", []string{"--timeout", "2s"}, false, exitFailed},
		{"sigterm", nil, true, exitResumable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := ptyDir(t)
			if err := os.WriteFile(filepath.Join(dir, "flood.lua"), []byte(floodScript), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"run", "-w", "flood.lua", "--state-dir", filepath.Join(dir, "state")}, tc.args...)
			// stopped is when the run was asked to stop: its start plus the timeout, or
			// the signal.
			start := time.Now()
			stopped := start.Add(2 * time.Second)
			r := startPTY(t, dir, ptyEnv("TERM=xterm-256color"), args...)
			r.waitScreen("the board with a flooded phase", func(s string) bool { return strings.Contains(s, "p1") })
			if tc.term {
				stopped = time.Now()
				if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			code := r.exitCode()
			// Before the stop luft can have used at most that wall time on every core.
			before := stopped.Sub(start) * time.Duration(runtime.NumCPU())
			if cpu := r.cmd.ProcessState.UserTime() + r.cmd.ProcessState.SystemTime(); cpu > before+floodBound {
				t.Errorf("luft used %s of CPU time, more than %s before the stop (%s on %d cores) and %s after it",
					cpu.Round(time.Millisecond), before, stopped.Sub(start).Round(time.Millisecond), runtime.NumCPU(), floodBound)
			}
			if code != tc.code {
				t.Fatalf("exit code %d, want %d; the screen:\n%s", code, tc.code, r.screen())
			}
		})
	}
}
