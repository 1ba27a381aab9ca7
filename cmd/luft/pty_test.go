//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/vt"
	"github.com/creack/pty"
)

// These tests run `luft run` the way a person does: stderr (and stdin) on a real
// pseudo-terminal, the bytes luft writes there played into a terminal emulator, and the
// assertions made on the screen a person would see. Like signal_test.go they never sleep
// to wait for a state: they wait until the screen shows it. The timeouts are only a safety
// net, generous for -race and a loaded machine.

const (
	ptyCols, ptyRows = 120, 40
	screenTimeout    = 60 * time.Second // waiting for the screen to show something
	ptyExitTimeout   = 60 * time.Second // waiting for the process to end
)

// ptyScript fans six agents out in one phase. With --max-concurrency 2 and a mock latency,
// two of them run while four wait for a slot.
const ptyScript = `
meta = {
  reasoning = "Scan six areas, two at a time.",
  phases = {
    { label = "scan", description = "one scanner per area" },
  },
}

local areas = { "alpha", "beta", "gamma", "delta", "epsilon", "zeta" }

function main()
  phase("scan", #areas)
  local found = parallel(areas, function(area)
    local r = agent{ name = "scan " .. area, prompt = "Scan " .. area .. "." }
    return r.output
  end)
  report({ markdown = "# Scan\n\n" .. #found .. " areas scanned\n" })
end
`

const ptyReport = "# Scan\n\n6 areas scanned\n"

// ptyRun is a luft process whose stdin and stderr are a pseudo-terminal and whose stdout
// is a pipe.
type ptyRun struct {
	t    *testing.T
	cmd  *exec.Cmd
	ptmx *os.File // the terminal's master side: what luft draws comes out here, keys go in

	mu      sync.Mutex
	emu     *vt.Emulator
	raw     bytes.Buffer  // every byte luft wrote to the terminal
	changed chan struct{} // closed and replaced whenever the screen may have changed
	readEOF bool          // the terminal's output ended

	stdout bytes.Buffer // the report; read only after done
	read   chan struct{}
	done   chan struct{}
	werr   error // cmd.Wait's error, set before done is closed
}

// ptyEnv is the environment of a luft process under test: the test's own, without what
// would change how luft draws (CI, TERM, NO_COLOR, …) or what it runs (LUFT_*), plus add.
func ptyEnv(add ...string) []string {
	return testEnv([]string{"CI=", "TERM=", "NO_COLOR=", "CLICOLOR", "COLORTERM=", "COLUMNS=", "LINES="}, add...)
}

// ptyDir is a fresh working directory holding scan.lua and an empty luft.toml (so that no
// config of the user's is read).
func ptyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"scan.lua": ptyScript, "luft.toml": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// scanArgs run scan.lua on the mock backend, two agents at a time, keeping the run in dir.
func scanArgs(dir string) []string {
	return []string{"run", "-w", "scan.lua", "--backend", "mock", "--max-concurrency", "2",
		"--state-dir", filepath.Join(dir, "state")}
}

func skipUnlessPTY(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skipf("pseudo-terminal tests run on linux and darwin, not %s", runtime.GOOS)
	}
}

// startPTY runs luft with args in dir, stdin and stderr on a new 120×40 terminal.
func startPTY(t *testing.T, dir string, env []string, args ...string) *ptyRun {
	t.Helper()
	return startTerminal(t, dir, env, false, args...)
}

// startTerminal is startPTY, with stdout on the terminal too when stdoutToo is set.
func startTerminal(t *testing.T, dir string, env []string, stdoutToo bool, args ...string) *ptyRun {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Cols: ptyCols, Rows: ptyRows}); err != nil {
		t.Fatal(err)
	}
	r := &ptyRun{t: t, ptmx: ptmx, emu: vt.NewEmulator(ptyCols, ptyRows), changed: make(chan struct{}),
		read: make(chan struct{}), done: make(chan struct{})}
	r.cmd = exec.Command(luftBinary(t), args...)
	r.cmd.Dir = dir
	r.cmd.Env = env
	// stdout stays a pipe so the report can be read apart from the board, unless the
	// test wants what a person sees of the report too.
	r.cmd.Stdin, r.cmd.Stdout, r.cmd.Stderr = tty, &r.stdout, tty
	if stdoutToo {
		r.cmd.Stdout = tty
	}
	// The terminal is the controlling terminal of a new session (fd 0 in the child), as a
	// shell would set it up.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := r.cmd.Start(); err != nil {
		ptmx.Close()
		tty.Close()
		t.Fatal(err)
	}
	// The child has its copy; without closing ours the master never sees the end.
	tty.Close()

	// The emulator answers the program's queries (cursor position, colours) on its input
	// pipe: pass them back to the program as a terminal would.
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		_, _ = io.Copy(ptmx, r.emu)
	}()
	go func() {
		defer close(r.read)
		buf := make([]byte, 32*1024)
		for {
			n, err := ptmx.Read(buf)
			r.mu.Lock()
			if n > 0 {
				r.raw.Write(buf[:n])
				_, _ = r.emu.Write(buf[:n])
			}
			if err != nil {
				// EOF, or EIO on Linux once the last holder of the terminal closed it.
				r.readEOF = true
			}
			close(r.changed)
			r.changed = make(chan struct{})
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		r.werr = r.cmd.Wait()
		close(r.done)
	}()
	// Cleanups run last first: the process is killed and reaped before the terminal closes.
	t.Cleanup(func() {
		ptmx.Close()
		<-r.read
		// Not emu.Close: it races with a Read in progress. Closing the input pipe ends
		// that Read.
		if c, ok := r.emu.InputPipe().(io.Closer); ok {
			_ = c.Close()
		}
		<-answered
	})
	killAtCleanup(t, r.cmd, r.done)
	return r
}

// screen is the emulated terminal's visible text, one line per row, trailing blanks cut.
func (r *ptyRun) screen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.screenLocked()
}

func (r *ptyRun) screenLocked() string {
	var b strings.Builder
	for y := 0; y < r.emu.Height(); y++ {
		var line strings.Builder
		for x := 0; x < r.emu.Width(); {
			c := r.emu.CellAt(x, y)
			if c == nil || c.Content == "" {
				line.WriteByte(' ')
				x++
				continue
			}
			line.WriteString(c.Content)
			x += max(c.Width, 1)
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// everything is the scrollback followed by the screen: all the text still on the terminal.
func (r *ptyRun) everything() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	if sb := r.emu.Scrollback(); sb != nil {
		for _, l := range sb.Lines() {
			b.WriteString(strings.TrimRight(l.String(), " "))
			b.WriteByte('\n')
		}
	}
	b.WriteString(r.screenLocked())
	return b.String()
}

// waitScreen waits until ok holds for the screen and returns that screen.
func (r *ptyRun) waitScreen(what string, ok func(screen string) bool) string {
	r.t.Helper()
	deadline := time.NewTimer(screenTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		s, eof, changed := r.screenLocked(), r.readEOF, r.changed
		r.mu.Unlock()
		if ok(s) {
			return s
		}
		if eof {
			r.t.Fatalf("the terminal closed before it showed %s; the screen:\n%s", what, s)
		}
		select {
		case <-changed:
		case <-deadline.C:
			r.t.Fatalf("the terminal did not show %s within %s; the screen:\n%s", what, screenTimeout, s)
		}
	}
}

// key types s on the terminal.
func (r *ptyRun) key(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.ptmx, s); err != nil {
		r.t.Fatalf("type %q: %v", s, err)
	}
}

// exitCode waits for the process to end, and for all it wrote to the terminal to be on the
// emulated screen, and returns its exit code.
func (r *ptyRun) exitCode() int {
	r.t.Helper()
	timeout := time.NewTimer(ptyExitTimeout)
	defer timeout.Stop()
	select {
	case <-r.done:
	case <-timeout.C:
		r.t.Fatalf("luft did not exit within %s; the screen:\n%s", ptyExitTimeout, r.screen())
	}
	select {
	case <-r.read:
	case <-timeout.C:
		r.t.Fatalf("the terminal's output did not end within %s after luft exited", ptyExitTimeout)
	}
	if r.werr == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(r.werr, &ee) {
		r.t.Fatalf("wait: %v", r.werr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.t.Fatalf("luft was killed by %v instead of exiting; the screen:\n%s", ws.Signal(), r.screen())
	}
	return ee.ExitCode()
}

var agentsLine = regexp.MustCompile(`(?m)^Agents · (\d+) running · (\d+) queued`)

// agentCounts reads the running and queued counts of the board's Agents line.
func agentCounts(screen string) (running, queued int, ok bool) {
	m := agentsLine.FindStringSubmatch(screen)
	if m == nil {
		return 0, 0, false
	}
	running, _ = strconv.Atoi(m[1])
	queued, _ = strconv.Atoi(m[2])
	return running, queued, true
}

var (
	runningHeader = regexp.MustCompile(`(?m)^luft · running \S+ · scan\.lua · run \S`)
	scanRunning   = regexp.MustCompile(`(?m)^Plan\n  ● scan +\d/6 `)
)

// midRun waits for the board of a running scan.lua with two agents running (the
// --max-concurrency) and the others queued, and returns it. Every part of the board is in
// the condition waited for: the terminal may be read between two halves of a frame, which
// the next read completes, and for a moment after agent_started every agent counts as
// running until the scheduler's agent_queued arrives.
func midRun(t *testing.T, r *ptyRun) string {
	t.Helper()
	return r.waitScreen("the header, the scan phase running and 2 agents running, others queued", func(s string) bool {
		running, queued, ok := agentCounts(s)
		return ok && running == 2 && queued > 0 && queued <= 4 && strings.Count(s, "queued for a slot") == queued &&
			runningHeader.MatchString(s) && scanRunning.MatchString(s) && strings.Contains(s, "\nq stop · ")
	})
}

// On a terminal, `luft run` draws the board while the run goes (header, plan with the
// phase, agents running and queued), leaves its final frame with the summary below it, and
// keeps the report on stdout.
func TestPTYLiveBoard(t *testing.T) {
	skipUnlessPTY(t)
	t.Parallel()
	dir := ptyDir(t)
	r := startPTY(t, dir, ptyEnv("TERM=xterm-256color", "LUFT_MOCK_LATENCY_MS=2500"), scanArgs(dir)...)

	midRun(t, r)

	if code := r.exitCode(); code != 0 {
		t.Fatalf("exit code %d, want 0; the terminal:\n%s", code, r.everything())
	}
	all := r.everything()
	m := regexp.MustCompile(`(?m)^✓ run (\S+) completed in \S+$`).FindStringSubmatch(all)
	if m == nil {
		t.Fatalf("no summary line ✓ run … completed on the terminal:\n%s", all)
	}
	runID := m[1]
	for _, want := range []string{
		"\n  agents    6 ok, 0 failed, 0 cached\n",
		"\n  report    stdout\n",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("the summary has no line %q:\n%s", strings.TrimSpace(want), all)
		}
	}
	// The final frame stays above the summary: the whole board of the completed run.
	board := all[:strings.Index(all, m[0])]
	for _, re := range []string{
		`(?m)^luft · completed in \S+ · scan\.lua · run ` + regexp.QuoteMeta(runID) + `$`,
		`(?m)^Plan\n  ✓ scan +6/6 `,
		`(?m)^Agents\b`,
	} {
		if !regexp.MustCompile(re).MatchString(board) {
			t.Errorf("the final frame does not match %s:\n%s", re, board)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^  ✓ scan \w+ +mock/`).FindAllString(board, -1)); n != 6 {
		t.Errorf("the final frame shows %d finished scan agents, want 6:\n%s", n, board)
	}
	if n := strings.Count(all, "luft · "); n != 1 {
		t.Errorf("%d headers on the terminal, want 1 (frames must replace each other):\n%s", n, all)
	}
	if strings.Contains(board, "q stop") || strings.Contains(board, "running ·") {
		t.Errorf("the final frame still shows a running board:\n%s", board)
	}
	if got := r.stdout.String(); got != ptyReport {
		t.Errorf("stdout = %q, want the report %q", got, ptyReport)
	}
}

// q on the board stops the run gracefully: the in-flight agents are cancelled (their 600 s
// latency would outlast the test), luft exits 3, the final frame says cancelled and the
// summary gives the command that resumes the run.
func TestPTYStopWithQ(t *testing.T) {
	skipUnlessPTY(t)
	t.Parallel()
	dir := ptyDir(t)
	r := startPTY(t, dir, ptyEnv("TERM=xterm-256color", "LUFT_MOCK_LATENCY_MS=600000"), scanArgs(dir)...)

	midRun(t, r)
	r.key("q")

	if code := r.exitCode(); code != exitResumable {
		t.Fatalf("exit code %d, want %d; the terminal:\n%s", code, exitResumable, r.everything())
	}
	all := r.everything()
	m := regexp.MustCompile(`(?m)^■ run (\S+) cancelled in \S+$`).FindStringSubmatch(all)
	if m == nil {
		t.Fatalf("no summary line ■ run … cancelled on the terminal:\n%s", all)
	}
	resume := "  resume    luft run --resume " + m[1] + " --state-dir " + filepath.Join(dir, "state")
	if !strings.Contains(all, "\n"+resume+"\n") {
		t.Errorf("the summary has no line %q:\n%s", resume, all)
	}
	// The calls q cut off are cancelled, not failed.
	if !regexp.MustCompile(`(?m)^  agents    0 ok, 0 failed, 0 cached, [1-9]\d* cancelled$`).MatchString(all) {
		t.Errorf("the summary has no agents line with none ok and the cut-off calls cancelled:\n%s", all)
	}
	if !regexp.MustCompile(`(?m)^luft · cancelled in `).MatchString(all) {
		t.Errorf("the final frame's header does not say cancelled:\n%s", all)
	}
	if out := r.stdout.String(); out != "" {
		t.Errorf("a cancelled run printed a report on stdout:\n%s", out)
	}
}

// Through a pipe the same run prints plain lines: no escape sequence, a line per phase and
// per finished agent, and the summary.
func TestPTYPlainThroughPipe(t *testing.T) {
	skipUnlessPTY(t)
	t.Parallel()
	dir := ptyDir(t)
	cmd := exec.Command(luftBinary(t), scanArgs(dir)...)
	cmd.Dir = dir
	cmd.Env = ptyEnv("TERM=xterm-256color", "LUFT_MOCK_LATENCY_MS=100")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := runWithin(cmd, ptyExitTimeout); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
	}
	errText := stderr.String()
	if strings.Contains(errText, "\x1b") {
		t.Errorf("stderr through a pipe has escape sequences:\n%q", errText)
	}
	m := regexp.MustCompile(`(?m)^luft: run (\S+) started: scan\.lua$`).FindStringSubmatch(errText)
	if m == nil {
		t.Fatalf("no line luft: run … started: scan.lua:\n%s", errText)
	}
	for _, re := range []string{
		`(?m)^phase 1 · scan · 6 planned$`,
		`(?m)^phase 1 done · 6 ok, 0 failed · `,
		`(?m)^✓ run ` + regexp.QuoteMeta(m[1]) + ` completed in \S+$`,
		`(?m)^  agents    6 ok, 0 failed, 0 cached$`,
		`(?m)^  report    stdout$`,
	} {
		if !regexp.MustCompile(re).MatchString(errText) {
			t.Errorf("stderr has no line matching %s:\n%s", re, errText)
		}
	}
	done := regexp.MustCompile(`(?m)^  ✓ scan (\w+) · `).FindAllStringSubmatch(errText, -1)
	if len(done) != 6 {
		t.Errorf("%d lines '  ✓ scan …', want 6:\n%s", len(done), errText)
	}
	if got := stdout.String(); got != ptyReport {
		t.Errorf("stdout = %q, want the report %q", got, ptyReport)
	}
}

// runWithin runs cmd to its end, killing it after timeout.
func runWithin(cmd *exec.Cmd, timeout time.Duration) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("luft did not exit within %s", timeout)
	}
}
