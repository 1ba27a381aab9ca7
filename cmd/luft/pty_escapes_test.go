//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// rawSequences are the sequences of hostile as they would reach a terminal raw.
var rawSequences = []string{"\x1b]52;", "\x1b]0;pwned", "\x1b[9999;1H"}

// On a real terminal (stdout and stderr both on it), a report carrying OSC 52, OSC 0 and
// CSI sequences reaches it without them: through luft run with the live board, with
// --no-tui, and through luft status. Through a pipe the same report is exact.
func TestPTYReportEscapes(t *testing.T) {
	skipUnlessPTY(t)
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"escapes.lua": escapesScript, "luft.toml": ""})
	state := filepath.Join(dir, "state")
	run := []string{"run", "-w", "escapes.lua", "--backend", "mock", "--state-dir", state}

	// The live board and the report on one terminal.
	r := startTerminal(t, dir, ptyEnv("TERM=xterm-256color"), true, run...)
	if code := r.exitCode(); code != 0 {
		t.Fatalf("exit %d; the terminal:\n%s", code, r.everything())
	}
	raw := r.raw.String()
	for _, seq := range rawSequences {
		if strings.Contains(raw, seq) {
			t.Errorf("luft run wrote %q to the terminal", seq)
		}
	}
	if all := r.everything(); !strings.Contains(all, "# Report\nmock:\n") || !strings.Contains(all, "\nend\n") {
		t.Errorf("the report is not on the terminal:\n%s", all)
	}

	// Plain progress and luft status, without colour: not one escape sequence.
	for _, args := range [][]string{
		append(run, "--no-tui"),
		{"status", "--state-dir", state, newestRunID(t, dir, state)},
	} {
		r := startTerminal(t, dir, ptyEnv("TERM=xterm-256color", "NO_COLOR=1"), true, args...)
		if code := r.exitCode(); code != 0 {
			t.Fatalf("luft %s: exit %d; the terminal:\n%s", args[0], code, r.everything())
		}
		// The only sequences left are the terminal queries of the colour detection
		// (background colour, cursor position), which ask and change nothing.
		raw := strings.NewReplacer("\x1b]11;?\x1b\\", "", "\x1b[6n", "").Replace(r.raw.String())
		if strings.Contains(raw, "\x1b") {
			t.Errorf("luft %s wrote an escape sequence to the terminal:\n%q", args[0], raw)
		}
		if all := r.everything(); !strings.Contains(all, "# Report\nmock:\n") {
			t.Errorf("luft %s: the report is not on the terminal:\n%s", args[0], all)
		}
	}

	// Through a pipe: the exact bytes.
	cmd := exec.Command(luftBinary(t), append(run, "-q")...)
	cmd.Dir, cmd.Env = dir, ptyEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := runWithin(cmd, ptyExitTimeout); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	if got := stdout.String(); got != escapesReport {
		t.Errorf("through a pipe the report is %q, want %q", got, escapesReport)
	}
}

// newestRunID is the id of the newest run in state, read through a pipe.
func newestRunID(t *testing.T, dir, state string) string {
	t.Helper()
	cmd := exec.Command(luftBinary(t), "list", "--json", "--limit", "1", "--state-dir", state)
	cmd.Dir, cmd.Env = dir, ptyEnv()
	out, err := cmd.Output()
	var runs []runJSON
	if err != nil || json.Unmarshal(out, &runs) != nil || len(runs) != 1 {
		t.Fatalf("luft list --json: %v %q", err, out)
	}
	return runs[0].ID
}
