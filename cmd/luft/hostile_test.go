package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestHostile runs the hostile corpus, testdata/hostile/*.txtar: scripts, agents, configs and
// state dirs written to break luft (the sandbox, the workspace, the disk, the process). Each
// archive asserts the documented outcome — exit code, a message naming the limit and the
// script line, no host data copied into the state dir, the state dir's size bounded, the
// process gone within a bound. The setup is TestScripts' (the same $WORK, helpers and
// environment) plus the commands below.
func TestHostile(t *testing.T) {
	p := scriptParams(t)
	p.Dir = filepath.Join("testdata", "hostile")
	p.Cmds["dirsize"] = cmdDirsize
	p.Cmds["nogrep"] = cmdNogrep
	p.Cmds["exitwithin"] = cmdExitwithin
	toolsHostile(&p)
	p.Cmds["genlua"] = cmdGenlua
	testscript.Run(t, p)
}

// cmdDirsize asserts that the files under DIR take at most MAX bytes (suffixes k, M, G).
//
//	dirsize DIR MAX
func cmdDirsize(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: dirsize DIR MAX")
	}
	limit, err := parseSize(args[1])
	if err != nil {
		ts.Fatalf("dirsize: %v", err)
	}
	var total int64
	err = filepath.WalkDir(ts.MkAbs(args[0]), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		ts.Fatalf("dirsize: %v", err)
	}
	ts.Logf("dirsize %s: %d bytes", args[0], total)
	if total > limit {
		ts.Fatalf("dirsize %s: %d bytes, more than %s", args[0], total, args[1])
	}
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("bad size " + strconv.Quote(s))
	}
	return n * mult, nil
}

// cmdNogrep asserts that no file under the given paths (recursively, binary files such as
// the SQLite database and its WAL included) matches the regular expression.
//
//	nogrep REGEXP PATH...
func cmdNogrep(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: nogrep REGEXP PATH...")
	}
	re, err := regexp.Compile(args[0])
	if err != nil {
		ts.Fatalf("nogrep: %v", err)
	}
	for _, root := range args[1:] {
		err := filepath.WalkDir(ts.MkAbs(root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if loc := re.FindIndex(data); loc != nil {
				ts.Fatalf("nogrep: %s matches %q at byte %d", path, args[0], loc[0])
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			ts.Fatalf("nogrep: %v", err)
		}
	}
}

// cmdExitwithin runs a program and asserts that it exits with CODE having used at most DUR
// of CPU time (user and system, its own and its children's); with -term AFTER it is sent
// SIGTERM after AFTER. CPU time, not the wall clock, is the bound so that a busy machine
// cannot fail the check; a process still alive hangFactor × DUR after its start (hung
// without spinning) is killed and fails the check too. Its stdout and stderr go to $WORK/exitwithin.stdout and .stderr (use grep
// on them). It runs through the exitwithinHelper program, started by testscript's own exec,
// so the program gets exactly the script's environment (everything set with env), plus the
// KEY=VALUE arguments before CODE.
//
//	exitwithin [-term AFTER] DUR [KEY=VALUE...] CODE program [args...]
func cmdExitwithin(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitwithin (give the expected code instead)")
	}
	term := "0s"
	if len(args) > 2 && args[0] == "-term" {
		term, args = args[1], args[2:]
	}
	if len(args) < 3 {
		ts.Fatalf("usage: exitwithin [-term AFTER] DUR [KEY=VALUE...] CODE program [args...]")
	}
	bound := args[0]
	args = args[1:]
	var kv []string
	for len(args) > 0 && strings.Contains(args[0], "=") {
		kv, args = append(kv, args[0]), args[1:]
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitwithin [-term AFTER] DUR [KEY=VALUE...] CODE program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitwithin: bad CODE %q", args[0])
	}
	helperArgs := append([]string{term, bound}, kv...)
	helperArgs = append(append(helperArgs, "--"), args[1:]...)
	got := 0
	if err := ts.Exec(exitwithinHelper, helperArgs...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitwithin: %v", err)
		}
		got = ee.ExitCode()
	}
	stdout, stderr := ts.ReadFile("stdout"), ts.ReadFile("stderr")
	ts.Check(os.WriteFile(ts.MkAbs("exitwithin.stdout"), []byte(stdout), 0o644))
	ts.Check(os.WriteFile(ts.MkAbs("exitwithin.stderr"), []byte(stderr), 0o644))
	if strings.Contains(stderr, withinKilled) {
		ts.Fatalf("%s went over its bound of %s CPU time; stderr:\n%s", args[1], bound, tail(stderr, 2000))
	}
	ts.Logf("%s exited %d", args[1], got)
	if got != want {
		ts.Fatalf("%s exited with code %d, want %d; stderr:\n%s", args[1], got, want, tail(stderr, 2000))
	}
}

// exitwithinHelper is the program name under which this test binary runs one command with
// a deadline (see TestMain): exitwithinHelper TERM BOUND [KEY=VALUE...] -- program [args...].
const exitwithinHelper = "luft-exitwithin"

// withinKilled starts the line the helper writes when the program used more CPU time than
// its bound, or was killed at the wall-clock backstop.
const withinKilled = "exitwithin: over its bound:"

// hangFactor × BOUND is exitwithin's wall-clock backstop: far more than a loaded machine
// stretches a program that keeps to its CPU bound, and still an end for one that hangs.
const hangFactor = 10

// exitwithinMain runs the helper: the program with the helper's own environment (the
// script's) plus the KEY=VALUE pairs, SIGTERM after TERM (0s: never), killed at BOUND. The
// exit code is the program's.
func exitwithinMain(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: luft-exitwithin TERM BOUND [KEY=VALUE...] -- program [args...]")
		return 2
	}
	term, err1 := time.ParseDuration(args[0])
	bound, err2 := time.ParseDuration(args[1])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "exitwithin:", err)
		return 2
	}
	env := os.Environ()
	args = args[2:]
	for len(args) > 0 && args[0] != "--" {
		env, args = append(env, args[0]), args[1:]
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "exitwithin: no program after --")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangFactor*bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[1], args[2:]...)
	// The output goes through pipes of this helper's own, so a killed program's children
	// still holding them cannot keep the check open: WaitDelay closes them.
	var stdout, stderr bytes.Buffer
	// The signal goes once the program has printed something (it is running the workflow,
	// its handlers set), not merely after TERM: a loaded machine can take longer than TERM
	// to start a race-built luft, and SIGTERM before its handler kills it outright.
	spoke := make(chan struct{})
	var once sync.Once
	mark := func(w io.Writer) io.Writer {
		return writerFunc(func(p []byte) (int, error) {
			once.Do(func() { close(spoke) })
			return w.Write(p)
		})
	}
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, nil, mark(&stdout), mark(&stderr)
	cmd.WaitDelay = time.Second
	defer func() {
		os.Stdout.Write(stdout.Bytes())
		os.Stderr.Write(stderr.Bytes())
	}()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "exitwithin:", err)
		return 2
	}
	if term > 0 {
		timer := time.AfterFunc(term, func() {
			select {
			case <-spoke:
			case <-ctx.Done():
				return
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
		})
		defer timer.Stop()
	}
	err := cmd.Wait()
	if ctx.Err() != nil {
		fmt.Fprintf(&stderr, "%s still running after %s of wall time (killed; the CPU bound is %s)\n", withinKilled, hangFactor*bound, bound)
		return 124
	}
	if cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(); cpu > bound {
		fmt.Fprintf(&stderr, "%s it used %s of CPU time, the bound is %s\n", withinKilled, cpu.Round(time.Millisecond), bound)
		return 124
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintln(&stderr, "exitwithin:", err)
		return 2
	}
	return 0
}

// writerFunc is a func as an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
