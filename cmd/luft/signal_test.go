package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests drive a real luft process (the copy of this test binary that testscript.Main
// put on $PATH) and send it real signals. They never sleep to wait for a state: they wait
// for the output line that proves it. The timeouts are only a safety net.

const (
	// Hang guards, not timings: a wait ends as soon as its line or exit comes, so these are
	// margins a loaded machine (and a -race build) meets, yet far below the slow agent's
	// 10-minute latency that a run not cancelled would wait out.
	lineTimeout = 2 * time.Minute // waiting for one line of output
	exitTimeout = 2 * time.Minute // waiting for the process to end
)

const slowScript = `
function main()
  log("calling the slow agent")
  local r = agent{ name = "slow", prompt = "take your time" }
  report(r.output)
end
`

// wideScript fans out to many agents; with LUFT_MOCK_FAIL=hang and a high
// --max-concurrency they all wait until cancelled, so unwinding the run after the first
// Ctrl-C takes a while (hundreds of milliseconds).
const wideScript = `
function main()
  local items = {}
  for i = 1, 5000 do items[i] = i end
  parallel(items, function(i) return agent{ name = "hang " .. i, prompt = "wait " .. i } end)
end
`

// luftProc is a running luft process whose stdout and stderr are read line by line.
type luftProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *lineReader
	err  *lineReader
	done chan struct{}
	werr error // cmd.Wait's error, set before done is closed
}

// lineReader collects a stream's lines and lets a test wait for one.
type lineReader struct {
	mu    sync.Mutex
	lines []string
	next  int           // first line not yet consumed by waitFor
	more  chan struct{} // closed and replaced when a line arrives or the stream ends
	eof   bool
}

func newLineReader() *lineReader { return &lineReader{more: make(chan struct{})} }

func (r *lineReader) feed(sc *bufio.Scanner) {
	for sc.Scan() {
		r.mu.Lock()
		r.lines = append(r.lines, sc.Text())
		close(r.more)
		r.more = make(chan struct{})
		r.mu.Unlock()
	}
	r.mu.Lock()
	r.eof = true
	close(r.more)
	r.mu.Unlock()
}

// waitFor consumes lines until one contains substr and returns it.
func (r *lineReader) waitFor(substr string, timeout time.Duration) (string, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for r.next < len(r.lines) {
			l := r.lines[r.next]
			r.next++
			if strings.Contains(l, substr) {
				r.mu.Unlock()
				return l, nil
			}
		}
		eof, more := r.eof, r.more
		r.mu.Unlock()
		if eof {
			return "", fmt.Errorf("stream ended without a line containing %q", substr)
		}
		select {
		case <-more:
		case <-deadline.C:
			return "", fmt.Errorf("no line containing %q within %s", substr, timeout)
		}
	}
}

func (r *lineReader) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == 0 {
		return ""
	}
	return strings.Join(r.lines, "\n") + "\n"
}

// luftBinary is the luft command testscript.Main installed on $PATH for this test binary.
func luftBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("luft")
	if err != nil {
		t.Fatalf("luft is not on $PATH (TestMain should have put it there): %v", err)
	}
	if !strings.HasPrefix(filepath.Base(filepath.Dir(filepath.Dir(p))), "testscript-main") {
		t.Fatalf("luft on $PATH is %s, not the copy of this test binary", p)
	}
	return p
}

// testEnv is the environment of a luft process under test: the test's own without LUFT_*
// (which would change what luft runs) and without the variables starting with one of
// drop, with GORACE keeping a -race build from sleeping a second at exit, plus add.
func testEnv(drop []string, add ...string) []string {
	drop = append([]string{"LUFT_", "GORACE="}, drop...)
	var env []string
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(drop, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			env = append(env, kv)
		}
	}
	g := os.Getenv("GORACE")
	if !strings.Contains(g, "atexit_sleep_ms") {
		g = strings.TrimSpace(g + " atexit_sleep_ms=0")
	}
	return append(append(env, "GORACE="+g), add...)
}

// writeScripts writes slow.lua and wide.lua into dir.
func writeScripts(t *testing.T, dir string) {
	t.Helper()
	for name, text := range map[string]string{"slow.lua": slowScript, "wide.lua": wideScript} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startLuft runs luft with args in a fresh directory holding slow.lua and wide.lua. env
// adds variables (LUFT_* from the test's own environment are dropped).
func startLuft(t *testing.T, env []string, args ...string) *luftProc {
	t.Helper()
	dir := t.TempDir()
	writeScripts(t, dir)
	return startLuftIn(t, dir, env, args...)
}

// startLuftIn runs luft with args in dir, as startLuft does.
func startLuftIn(t *testing.T, dir string, env []string, args ...string) *luftProc {
	t.Helper()
	cmd := exec.Command(luftBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = testEnv(nil, env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &luftProc{t: t, cmd: cmd, out: newLineReader(), err: newLineReader(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	for _, s := range []struct {
		r  *lineReader
		sc *bufio.Scanner
	}{{p.out, bufio.NewScanner(stdout)}, {p.err, bufio.NewScanner(stderr)}} {
		s.sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
		readers.Add(1)
		go func() {
			defer readers.Done()
			s.r.feed(s.sc)
		}()
	}
	go func() {
		readers.Wait() // all output is read before Wait closes the pipes
		p.werr = cmd.Wait()
		close(p.done)
	}()
	killAtCleanup(t, cmd, p.done)
	return p
}

// killAtCleanup kills cmd when the test ends unless it has exited (done is closed), and
// waits until it has.
func killAtCleanup(t *testing.T, cmd *exec.Cmd, done <-chan struct{}) {
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// waitStderr waits for a stderr line containing substr or fails the test.
func (p *luftProc) waitStderr(substr string) string {
	p.t.Helper()
	l, err := p.err.waitFor(substr, lineTimeout)
	if err != nil {
		p.t.Fatalf("%v\nstderr so far:\n%s", err, p.err.text())
	}
	return l
}

// waitStdout waits for a stdout line containing substr or fails the test.
func (p *luftProc) waitStdout(substr string) string {
	p.t.Helper()
	l, err := p.out.waitFor(substr, lineTimeout)
	if err != nil {
		p.t.Fatalf("%v\nstdout so far:\n%s\nstderr so far:\n%s", err, p.out.text(), p.err.text())
	}
	return l
}

func (p *luftProc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("send %v: %v", sig, err)
	}
}

// exitCode waits for the process to end and returns its exit code; ending by a signal
// (rather than exiting) fails the test.
func (p *luftProc) exitCode() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(exitTimeout):
		p.t.Fatalf("luft did not exit within %s\nstderr:\n%s", exitTimeout, p.err.text())
	}
	if p.werr == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(p.werr, &ee) {
		p.t.Fatalf("wait: %v", p.werr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		p.t.Fatalf("luft was killed by %v instead of exiting\nstderr:\n%s", ws.Signal(), p.err.text())
	}
	return ee.ExitCode()
}

// The first SIGINT stops the run: in-flight calls are cancelled and luft exits 3 with a
// message saying the run was cancelled, long before the agent's 10-minute latency (exitCode waits at most exitTimeout).
func TestSignalInterruptCancelsRun(t *testing.T) {
	t.Parallel()
	p := startLuft(t, []string{"LUFT_MOCK_LATENCY_MS=600000"}, "run", "-w", "slow.lua")
	started := p.waitStderr(" started: slow.lua")
	runID := strings.Fields(strings.TrimPrefix(started, "luft: run "))[0]
	p.waitStderr("[info] calling the slow agent")

	p.signal(os.Interrupt)
	p.waitStderr("luft: stopping")
	if code := p.exitCode(); code != exitResumable {
		t.Fatalf("exit code %d, want %d\nstderr:\n%s", code, exitResumable, p.err.text())
	}
	stderr := p.err.text()
	if !strings.Contains(stderr, "run "+runID+" cancelled") {
		t.Errorf("stderr does not say run %s was cancelled:\n%s", runID, stderr)
	}
	if out := p.out.text(); out != "" {
		t.Errorf("a cancelled run printed a report on stdout:\n%s", out)
	}
}

// SIGTERM is handled like the first Ctrl-C.
func TestSignalTermCancelsRun(t *testing.T) {
	t.Parallel()
	p := startLuft(t, []string{"LUFT_MOCK_LATENCY_MS=600000"}, "run", "-w", "slow.lua")
	p.waitStderr("[info] calling the slow agent")
	p.signal(syscall.SIGTERM)
	p.waitStderr("luft: stopping")
	if code := p.exitCode(); code != exitResumable {
		t.Fatalf("exit code %d, want %d\nstderr:\n%s", code, exitResumable, p.err.text())
	}
	if stderr := p.err.text(); !strings.Contains(stderr, " cancelled") {
		t.Errorf("stderr does not say the run was cancelled:\n%s", stderr)
	}
}

// With --json, SIGINT still gives exit 3, a stream that starts with run_started and has a
// run_done with status cancelled, and the cancellation message on stderr.
func TestSignalInterruptJSON(t *testing.T) {
	t.Parallel()
	p := startLuft(t, []string{"LUFT_MOCK_LATENCY_MS=600000"}, "run", "-w", "slow.lua", "--json")
	p.waitStdout(`"type":"agent_started"`)
	p.signal(os.Interrupt)
	if code := p.exitCode(); code != exitResumable {
		t.Fatalf("exit code %d, want %d\nstderr:\n%s", code, exitResumable, p.err.text())
	}
	out := p.out.text()
	if !strings.HasPrefix(out, `{"seq":1,`) || !strings.Contains(strings.SplitN(out, "\n", 2)[0], `"type":"run_started"`) {
		t.Errorf("the events do not start with run_started:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^\{"seq":\d+,.*"type":"run_done",.*"status":"cancelled"`).MatchString(out) {
		t.Errorf("no run_done with status cancelled in the events:\n%s", out)
	}
	// (run_done is not always last today: see TestSignalInterruptEventOrder.)
	if stderr := p.err.text(); !strings.Contains(stderr, " cancelled") || strings.Contains(stderr, "stopping") {
		t.Errorf("stderr should hold only the cancellation message in --json mode:\n%s", stderr)
	}
}

// After SIGINT, the cancelled in-flight call still gets its agent_done (status cancelled)
// and run_done is the last event (SPEC §1, §5).
func TestSignalInterruptEventOrder(t *testing.T) {
	t.Parallel()
	for i := 0; i < 10; i++ {
		p := startLuft(t, []string{"LUFT_MOCK_LATENCY_MS=600000"}, "run", "-w", "slow.lua", "--json")
		p.waitStdout(`"type":"agent_started"`)
		p.signal(os.Interrupt)
		if code := p.exitCode(); code != exitResumable {
			t.Fatalf("exit code %d, want %d", code, exitResumable)
		}
		out := p.out.text()
		if err := checkJSONL(out, "cancelled"); err != nil {
			t.Fatalf("attempt %d: %v\n%s", i+1, err, out)
		}
		if !strings.Contains(out, `"type":"agent_done"`) {
			t.Fatalf("attempt %d: no agent_done for the cancelled call:\n%s", i+1, out)
		}
	}
}

// A second SIGINT while the first is still being handled exits 130 at once. The run fans
// out to 5000 branches, 1000 of them in hanging agent calls at once, so it is still
// unwinding when the second signal arrives: the signal is sent as soon as "stopping" is
// read, and unwinding takes far longer than that (TestSecondInterruptInProcess checks the
// same without any timing window).
func TestSignalSecondInterruptExits130(t *testing.T) {
	t.Parallel()
	p := startLuft(t, []string{"LUFT_MOCK_FAIL=hang"}, "run", "-w", "wide.lua", "--max-concurrency", "1000")
	p.waitStderr("⇉ parallel main/1 · 5000 branches")
	p.signal(os.Interrupt)
	p.waitStderr("luft: stopping")
	p.signal(os.Interrupt)
	if code := p.exitCode(); code != exitHard {
		t.Fatalf("exit code %d, want %d\nstderr:\n%s", code, exitHard, p.err.text())
	}
	if strings.Contains(p.err.text(), " cancelled in ") {
		t.Errorf("luft printed the cancelled summary instead of quitting at once:\n%s", p.err.text())
	}
}

// hookWriter is a goroutine-safe buffer that calls onLine for every complete line, in the
// writing goroutine, before Write returns.
type hookWriter struct {
	mu      sync.Mutex
	buf     strings.Builder
	partial string
	onLine  func(string)
}

func (w *hookWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.partial += string(p)
	var lines []string
	for {
		i := strings.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, w.partial[:i])
		w.partial = w.partial[i+1:]
	}
	w.mu.Unlock()
	for _, l := range lines {
		w.onLine(l)
	}
	return len(p), nil
}

func (w *hookWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// The same contract in-process, without any timing window: the CLI's env carries the
// signal channel and the exit function, so the test delivers the second signal while luft
// is still writing its "stopping" line, before it has even cancelled the run.
func TestSecondInterruptInProcess(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeScripts(t, dir)

	var (
		sigc     chan<- os.Signal
		notified = make(chan struct{})
		calling  = make(chan struct{}, 1)
		exits    = make(chan int, 4)
	)
	stderr := &hookWriter{onLine: func(l string) {
		switch {
		case strings.Contains(l, "[info] calling the slow agent"):
			calling <- struct{}{}
		case strings.Contains(l, "luft: stopping"):
			sigc <- os.Interrupt // the second Ctrl-C
		}
	}}
	var stdout strings.Builder
	e := &env{
		stdout: &stdout,
		stderr: stderr,
		getenv: func(k string) string {
			if k == "LUFT_MOCK_FAIL" {
				return "hang"
			}
			return ""
		},
		now: time.Now,
		notify: func(c chan<- os.Signal) func() {
			sigc = c
			close(notified)
			return func() {}
		},
		exit: func(code int) { exits <- code },
	}
	result := make(chan int, 1)
	go func() { result <- execute(e, []string{"run", "-w", filepath.Join(dir, "slow.lua")}) }()

	for _, step := range []struct {
		name string
		ch   <-chan struct{}
	}{{"signal.Notify", notified}, {"the script's log line", calling}} {
		select {
		case <-step.ch:
		case <-time.After(lineTimeout):
			t.Fatalf("waiting for %s: timed out\nstderr:\n%s", step.name, stderr.String())
		}
	}
	sigc <- os.Interrupt // the first Ctrl-C

	select {
	case code := <-exits:
		if code != exitHard {
			t.Fatalf("exit(%d), want exit(%d)", code, exitHard)
		}
	case <-time.After(exitTimeout):
		t.Fatalf("no exit(%d) after the second signal\nstderr:\n%s", exitHard, stderr.String())
	}
	// exit returned (a real os.Exit would not): the run still ends, cancelled.
	select {
	case code := <-result:
		if code != exitResumable {
			t.Errorf("after the first signal the run ended with %d, want %d", code, exitResumable)
		}
	case <-time.After(exitTimeout):
		t.Fatalf("the cancelled run did not end\nstderr:\n%s", stderr.String())
	}
	if n := len(exits); n != 0 {
		t.Errorf("exit was called %d more times", n)
	}
}

// A Ctrl-C that comes with the first line luft prints (the notice of the default backend),
// while the run is still being set up, must find luft listening: it stops the run as soon
// as it exists (exit 3, resumable). Before, the handler came only once the run had
// started, and such a signal killed the process (exit 255 in caps-signal under load).
func TestInterruptDuringSetup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeScripts(t, dir)

	var (
		mu        sync.Mutex
		sigc      chan<- os.Signal
		unhandled = make(chan struct{}, 1)
		sent      = make(chan struct{}, 1)
	)
	stderr := &hookWriter{onLine: func(l string) {
		if !strings.Contains(l, "no backend configured") {
			return
		}
		mu.Lock()
		c := sigc
		mu.Unlock()
		if c == nil {
			unhandled <- struct{}{} // a real SIGTERM now would kill the process
			return
		}
		c <- syscall.SIGTERM
		sent <- struct{}{}
	}}
	e := &env{
		stdout: io.Discard,
		stderr: stderr,
		getenv: func(k string) string {
			if k == "LUFT_MOCK_FAIL" {
				return "hang"
			}
			return ""
		},
		now: time.Now,
		notify: func(c chan<- os.Signal) func() {
			mu.Lock()
			sigc = c
			mu.Unlock()
			return func() {}
		},
		exit: func(code int) { t.Errorf("exit(%d) after one signal", code) },
	}
	result := make(chan int, 1)
	go func() {
		result <- execute(e, []string{"run", "-w", filepath.Join(dir, "slow.lua"), "--no-tui", "--state-dir", filepath.Join(dir, "state")})
	}()
	select {
	case <-unhandled:
		t.Fatalf("luft printed its first line before it listened for signals\nstderr:\n%s", stderr.String())
	case <-sent:
	case code := <-result:
		t.Fatalf("luft ended with %d before printing the backend notice\nstderr:\n%s", code, stderr.String())
	case <-time.After(lineTimeout):
		t.Fatalf("no backend notice\nstderr:\n%s", stderr.String())
	}
	select {
	case code := <-result:
		if code != exitResumable {
			t.Errorf("a signal during setup ended the run with %d, want %d\nstderr:\n%s", code, exitResumable, stderr.String())
		}
	case <-time.After(exitTimeout):
		t.Fatalf("the run did not stop after a signal during its setup\nstderr:\n%s", stderr.String())
	}
}
