package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile is what a model's answer may carry to a terminal: a clipboard write (OSC 52),
// a title change (OSC 0) and CSI sequences that move the cursor and recolour.
const hostile = "\x1b]52;c;aGVsbG8=\x07\x1b]0;pwned\x07\x1b[9999;1H\x1b[31m"

// escapesScript has the mock echo hostile back (its text is "mock: " + the prompt) and
// puts it in a phase label and the report; escapesFail fails with it in its error.
const (
	escapesScript = `local osc = "\27]52;c;aGVsbG8=\7\27]0;pwned\7\27[9999;1H\27[31m"
function main()
  phase{label = "scan" .. osc}
  local r = agent{name = "echo", prompt = osc}
  report({markdown = "# Report\n" .. r.text .. "\n" .. osc .. "end\n"})
end
`
	escapesFail = `function main()
  local r = agent{name = "echo", prompt = "\27]52;c;aGVsbG8=\7\27]0;pwned\7\27[9999;1H\27[31m"}
  error("the model said: " .. r.text)
end
`
)

// escapesReport is the exact report of escapesScript.
const escapesReport = "# Report\nmock: " + hostile + "\n" + hostile + "end\n"

// ttyEnv is an in-process environment whose stdout and stderr say whether they are
// terminals as tty does.
func ttyEnv(stdout, stderr *bytes.Buffer, tty bool) *env {
	e := docsEnv(stdout, stderr)
	e.stdoutTTY, e.stderrTTY = tty, tty
	return e
}

type escapesRun struct {
	t             *testing.T
	dir, stateDir string
}

func newEscapesRun(t *testing.T) *escapesRun {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"escapes.lua": escapesScript, "fail.lua": escapesFail, "luft.toml": ""})
	return &escapesRun{t: t, dir: dir, stateDir: filepath.Join(dir, "state")}
}

// luft runs the CLI in-process on a terminal or not; it returns stdout and stderr.
func (r *escapesRun) luft(tty bool, wantCode int, args ...string) (string, string) {
	r.t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"--state-dir", r.stateDir, "--config", filepath.Join(r.dir, "luft.toml")}, args...)
	if code := execute(ttyEnv(&out, &errb, tty), all); code != wantCode {
		r.t.Fatalf("luft %s: exit %d, want %d\nstderr:\n%s", strings.Join(args, " "), code, wantCode, errb.String())
	}
	return out.String(), errb.String()
}

func (r *escapesRun) path(name string) string { return filepath.Join(r.dir, name) }

// newestRun is the id of the newest run.
func (r *escapesRun) newestRun() string {
	r.t.Helper()
	out, _ := r.luft(false, exitOK, "list", "--json", "--limit", "1")
	var runs []runJSON
	if err := json.Unmarshal([]byte(out), &runs); err != nil || len(runs) != 1 {
		r.t.Fatalf("list --json: %v %q", err, out)
	}
	return runs[0].ID
}

func noEscapes(t *testing.T, what, s string) {
	t.Helper()
	// ESC and BEL, the C1 CSI and OSC as runes, and as the raw bytes a terminal in a
	// non-UTF-8 mode reads as CSI and OSC.
	i := strings.IndexAny(s, "\x1b\x07\u009b\u009d")
	if j := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError }); j >= 0 && (i < 0 || j < i) {
		i = j
	}
	if i >= 0 {
		t.Errorf("%s on a terminal has a control character at %d: %q", what, i, s[max(0, i-20):min(len(s), i+40)])
	}
}

// On a terminal, what luft prints of a run (the report of luft run, luft status, its
// phases, the errors) carries no escape sequence; through a pipe, in -o FILE and with
// --json it is the exact text.
func TestReportEscapesOnTerminal(t *testing.T) {
	r := newEscapesRun(t)
	run := []string{"run", "-w", r.path("escapes.lua"), "--backend", "mock", "--no-tui"}

	// Through a pipe and in -o FILE: the exact report.
	out, _ := r.luft(false, exitOK, append(run, "-q", "-o", r.path("pipe.md"))...)
	if out != escapesReport {
		t.Errorf("run through a pipe printed %q, want the exact report %q", out, escapesReport)
	}
	if b, _ := os.ReadFile(r.path("pipe.md")); string(b) != escapesReport {
		t.Errorf("-o FILE through a pipe holds %q, want %q", b, escapesReport)
	}
	id := r.newestRun()

	// On a terminal: stdout and stderr are harmless; the file is still exact.
	out, errText := r.luft(true, exitOK, append(run, "-o", r.path("tty.md"))...)
	noEscapes(t, "luft run's report", out)
	noEscapes(t, "luft run's progress", errText)
	if want := "# Report\nmock: \nend\n"; out != want {
		t.Errorf("run on a terminal printed %q, want %q", out, want)
	}
	if b, _ := os.ReadFile(r.path("tty.md")); string(b) != escapesReport {
		t.Errorf("-o FILE on a terminal holds %q, want the exact report %q", b, escapesReport)
	}

	// --json on a terminal: the events, byte for byte as through a pipe (JSON escapes
	// control characters itself).
	jsonOut, _ := r.luft(true, exitOK, append(run, "--json")...)
	if !strings.Contains(jsonOut, `"markdown":"# Report\nmock: \u001b]52;c;aGVsbG8=\u0007\u001b]0;pwned\u0007`) {
		t.Errorf("--json on a terminal does not carry the exact report:\n%s", jsonOut)
	}

	// luft status: exact through a pipe, harmless on a terminal; --json the same on both.
	piped, _ := r.luft(false, exitOK, "status", id)
	if !strings.Contains(piped, "\nreport:\n"+escapesReport) {
		t.Errorf("status through a pipe does not end with the exact report:\n%q", piped)
	}
	shown, _ := r.luft(true, exitOK, "status", id)
	noEscapes(t, "luft status", shown)
	if !strings.Contains(shown, "\nreport:\n# Report\nmock: \nend\n") || !strings.Contains(shown, "scan") {
		t.Errorf("status on a terminal lost the report's text or the phase:\n%s", shown)
	}
	pipedJSON, _ := r.luft(false, exitOK, "status", "--json", id)
	shownJSON, _ := r.luft(true, exitOK, "status", "--json", id)
	if pipedJSON != shownJSON || !strings.Contains(shownJSON, `\u001b]52;c;aGVsbG8=`) {
		t.Errorf("status --json differs on a terminal, or lost the report's bytes:\npipe: %s\ntty:  %s", pipedJSON, shownJSON)
	}

	// The phase label, in luft phases and luft list's neighbours.
	phases, _ := r.luft(true, exitOK, "phases", id)
	noEscapes(t, "luft phases", phases)
	if piped, _ := r.luft(false, exitOK, "phases", id); !strings.Contains(piped, "scan"+hostile) {
		t.Errorf("phases through a pipe lost the label's exact text:\n%q", piped)
	}
}

// A run whose error carries model text: the error is harmless on a terminal, in the
// summary, in the quiet mode's error line and in luft status.
func TestErrorEscapesOnTerminal(t *testing.T) {
	r := newEscapesRun(t)
	for _, mode := range []string{"--no-tui", "-q", "--json"} {
		out, errText := r.luft(true, exitFailed, "run", "-w", r.path("fail.lua"), "--backend", "mock", mode)
		noEscapes(t, "the error of luft run "+mode, errText)
		if !strings.Contains(errText, "the model said: mock:") {
			t.Errorf("luft run %s does not show the error:\n%s", mode, errText)
		}
		if mode != "--json" {
			noEscapes(t, "stdout of luft run "+mode, out)
		}
	}
	id := r.newestRun()
	shown, _ := r.luft(true, exitOK, "status", id)
	noEscapes(t, "luft status of a failed run", shown)
	if piped, _ := r.luft(false, exitOK, "status", id); !strings.Contains(piped, "the model said: mock: "+hostile) {
		t.Errorf("status through a pipe lost the error's exact text:\n%q", piped)
	}
}
