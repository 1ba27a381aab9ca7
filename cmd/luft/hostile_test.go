package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// cmdExitwithin runs a program and asserts that it exits with CODE within DUR of its start;
// with -term AFTER it is sent SIGTERM after AFTER. A process still alive at DUR is killed and
// fails the check. Its stdout and stderr go to $WORK/exitwithin.stdout and .stderr (use grep
// on them). The environment is the script's: every variable the archive set with env is
// passed (testscript's own list), plus the ones named by KEY=VALUE arguments before CODE.
//
//	exitwithin [-term AFTER] DUR [KEY=VALUE...] CODE program [args...]
func cmdExitwithin(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitwithin (give the expected code instead)")
	}
	var term time.Duration
	if len(args) > 2 && args[0] == "-term" {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			ts.Fatalf("exitwithin: bad -term %q: %v", args[1], err)
		}
		term, args = d, args[2:]
	}
	if len(args) < 3 {
		ts.Fatalf("usage: exitwithin [-term AFTER] DUR [KEY=VALUE...] CODE program [args...]")
	}
	bound, err := time.ParseDuration(args[0])
	if err != nil {
		ts.Fatalf("exitwithin: bad DUR %q: %v", args[0], err)
	}
	args = args[1:]
	env := scriptEnv(ts)
	for len(args) > 0 && strings.Contains(args[0], "=") {
		env = append(env, args[0])
		args = args[1:]
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitwithin [-term AFTER] DUR [KEY=VALUE...] CODE program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitwithin: bad CODE %q", args[0])
	}
	prog, err := lookPath(ts, args[1])
	if err != nil {
		ts.Fatalf("exitwithin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args[2:]...)
	cmd.Dir = ts.MkAbs(".")
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		ts.Fatalf("exitwithin: %v", err)
	}
	if term > 0 {
		timer := time.AfterFunc(term, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
		defer timer.Stop()
	}
	err = cmd.Wait()
	took := time.Since(start)
	ts.Check(os.WriteFile(ts.MkAbs("exitwithin.stdout"), stdout.Bytes(), 0o644))
	ts.Check(os.WriteFile(ts.MkAbs("exitwithin.stderr"), stderr.Bytes(), 0o644))
	if ctx.Err() != nil {
		ts.Fatalf("%s was still running after %s (killed); stderr:\n%s", args[1], bound, tail(stderr.String(), 2000))
	}
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitwithin: %v", err)
		}
		got = ee.ExitCode()
	}
	ts.Logf("%s exited %d after %s", args[1], got, took.Round(time.Millisecond))
	if got != want {
		ts.Fatalf("%s exited with code %d, want %d; stderr:\n%s", args[1], got, want, tail(stderr.String(), 2000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// scriptEnv is the environment a testscript exec would get, rebuilt from the variables the
// setup and the archive may set.
func scriptEnv(ts *testscript.TestScript) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "WORK", "LUFT_HOME", "NO_COLOR", "GORACE",
		"LUFT_MOCK_LATENCY_MS", "LUFT_MOCK_FAIL", "LUFT_CONFIG", "OPENAI_API_KEY", "OPENAI_BASE_URL", "TERM", "CI"} {
		if v := ts.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func lookPath(ts *testscript.TestScript, prog string) (string, error) {
	if strings.ContainsRune(prog, filepath.Separator) {
		return ts.MkAbs(prog), nil
	}
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, prog)
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(prog + " not found on $PATH")
}
