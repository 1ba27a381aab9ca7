package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/internal/testkit/acpfake"
	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

// update rewrites the files that scripts compare with `cmp stdout FILE` / `cmp stderr FILE`:
//
//	go test ./cmd/luft/ -run TestScripts -update
//
// fakeACPArg as the first argument makes this test binary the fake ACP agent.
const fakeACPArg = "--luft-fake-acp"

var update = flag.Bool("update", false, "update testscript archives with the actual output of cmp stdout/stderr")

// TestMain makes this test binary double as the luft executable: testscript.Main installs
// a copy of it named "luft" on $PATH, so scripts (and signal_test.go) run the CLI as a real
// process with real exit codes, signals and separate stdout/stderr.
//
// It also doubles as the fake MCP tool server of mcp_test.go, when started as one.
func TestMain(m *testing.M) {
	mcpfake.ServeChildIfRequested()
	if len(os.Args) > 1 && os.Args[1] == fakeACPArg {
		// The fake coding agent of acp_test.go, on stdin and stdout.
		if err := acpfake.Serve(context.Background(), os.Stdin, os.Stdout, acpfake.OptionsFromEnv(os.Getenv)); err != nil {
			fmt.Fprintln(os.Stderr, "luft-fake-acp:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testscript.Main(m, map[string]func(){
		"luft":           func() { os.Exit(execute(osEnv(), os.Args[1:])) },
		exitwithinHelper: func() { os.Exit(exitwithinMain(os.Args[1:])) },
	})
}

// TestScripts runs every testdata/script/*.txtar. Each script's $WORK holds a copy of the
// repository's examples/ and workflows/ folders and of the shell helpers in testdata/sh
// (luft.sh, saveid.sh, waitrunning.sh) next to the archive's own files.
func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams(t))
}

// scriptParams is the setup shared by TestScripts and TestHostile.
func scriptParams(t *testing.T) testscript.Params {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	helpers, err := filepath.Abs(filepath.Join("testdata", "sh"))
	if err != nil {
		t.Fatal(err)
	}
	return testscript.Params{
		Dir:                 filepath.Join("testdata", "script"),
		UpdateScripts:       *update,
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			for _, dir := range []string{"examples", "workflows"} {
				if err := os.CopyFS(filepath.Join(env.WorkDir, dir), os.DirFS(filepath.Join(repo, dir))); err != nil {
					return fmt.Errorf("copy %s into $WORK: %w", dir, err)
				}
			}
			if err := os.CopyFS(env.WorkDir, os.DirFS(helpers)); err != nil {
				return fmt.Errorf("copy the shell helpers into $WORK: %w", err)
			}
			// The mock backend reads these; scripts set them where they need them.
			env.Setenv("LUFT_MOCK_LATENCY_MS", "")
			env.Setenv("LUFT_MOCK_FAIL", "")
			env.Setenv("LUFT_HOME", filepath.Join(env.WorkDir, ".luft"))
			env.Setenv("NO_COLOR", "1")
			// A -race build sleeps 1s at exit by default; every luft process here is one.
			if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
				env.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
			}
			return nil
		},
		Condition: toolCondition,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode":   cmdExitcode,
			"checkjsonl": cmdCheckJSONL,
		},
	}
}

// toolCondition is [tool:NAME], true when the outside tool NAME (a program on PATH, or a file
// by absolute path) is there. A script that needs one starts with
//
//	[!tool:git] skip 'git is not installed: apt-get install git'
//
// and under LUFT_TEST_REQUIRE_TOOLS (.ci/run sets it) a missing tool is an error instead of a
// skip (see testkit.NeedTool).
func toolCondition(cond string) (bool, error) {
	what, ok := strings.CutPrefix(cond, "tool:")
	if !ok {
		return false, fmt.Errorf("unknown condition %q", cond)
	}
	if _, err := testkit.FindTool(what, "the skip line after this condition says how to install it"); err != nil {
		if msg, fail := testkit.MissingTool(err); fail {
			return false, errors.New(msg)
		}
		return false, nil
	}
	return true, nil
}

// cmdExitcode runs a program like exec and asserts its exact exit code; stdout and stderr
// are kept for the following stdout/stderr/cmp commands.
//
//	exitcode CODE program [args...]
func cmdExitcode(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! exitcode (give the expected code instead)")
	}
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode CODE program [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exitcode: bad CODE %q: %v", args[0], err)
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exitcode: running %s: %v", args[1], err)
		}
		got = ee.ExitCode()
		if got < 0 {
			ts.Fatalf("exitcode: %s did not exit normally: %v (want exit code %d)", args[1], ee, want)
		}
	}
	if got != want {
		ts.Fatalf("%s exited with code %d, want %d", args[1], got, want)
	}
}

// cmdCheckJSONL checks a file of JSON events as `luft run --json` writes them (SPEC §5):
// every line one JSON object {"seq":n, "run_id":"...", "ts":"RFC3339Nano", "type":"...", ...}
// with its keys in that order, seq 1..n without gaps, one run_id, ts not going backwards,
// run_started first and run_done last (with -status S, run_done's status must be S).
//
//	checkjsonl [-status S] FILE
//
// With ! the file must fail the check (used to prove the checker catches bad streams).
func cmdCheckJSONL(ts *testscript.TestScript, neg bool, args []string) {
	status := ""
	if len(args) >= 2 && args[0] == "-status" {
		status, args = args[1], args[2:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: checkjsonl [-status S] FILE")
	}
	err := checkJSONL(ts.ReadFile(args[0]), status)
	switch {
	case neg && err == nil:
		ts.Fatalf("checkjsonl %s: passed, want a failure", args[0])
	case neg:
		ts.Logf("checkjsonl %s failed as expected: %v", args[0], err)
	case err != nil:
		ts.Fatalf("checkjsonl %s: %v", args[0], err)
	}
}

func checkJSONL(data, wantStatus string) error {
	if data == "" {
		return errors.New("no events")
	}
	if !strings.HasSuffix(data, "\n") {
		return errors.New("the last line does not end with a newline")
	}
	var (
		runID, lastType string
		lastTS          time.Time
		lastEvent       map[string]any
		n               int
	)
	sc := bufio.NewScanner(strings.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return fmt.Errorf("line %d is not a JSON object: %v: %s", n, err, line)
		}
		prefix := fmt.Sprintf(`{"seq":%d,"run_id":`, n)
		if !strings.HasPrefix(line, prefix) {
			return fmt.Errorf("line %d does not start with %s: %s", n, prefix, line)
		}
		// The envelope's keys come in the order seq, run_id, ts, type.
		for _, k := range []string{`"seq":`, `"run_id":`, `"ts":`, `"type":`} {
			i := strings.Index(line, k)
			if i < 0 {
				return fmt.Errorf("line %d has no %s field: %s", n, k, line)
			}
			line = line[i+len(k):]
		}
		if seq, ok := ev["seq"].(float64); !ok || int(seq) != n {
			return fmt.Errorf("line %d: seq is %v, want %d", n, ev["seq"], n)
		}
		id, _ := ev["run_id"].(string)
		switch {
		case id == "":
			return fmt.Errorf("line %d: empty or missing run_id", n)
		case runID == "":
			runID = id
		case id != runID:
			return fmt.Errorf("line %d: run_id %q differs from the first line's %q", n, id, runID)
		}
		tsText, _ := ev["ts"].(string)
		ts, err := time.Parse(time.RFC3339Nano, tsText)
		if err != nil {
			return fmt.Errorf("line %d: ts %q is not RFC3339Nano: %v", n, tsText, err)
		}
		if ts.Before(lastTS) {
			return fmt.Errorf("line %d: ts %s is before the previous line's %s", n, tsText, lastTS.Format(time.RFC3339Nano))
		}
		lastTS = ts
		typ, _ := ev["type"].(string)
		if typ == "" {
			return fmt.Errorf("line %d: empty or missing type", n)
		}
		if n == 1 && typ != "run_started" {
			return fmt.Errorf("line 1: type %q, want run_started", typ)
		}
		if lastType == "run_done" {
			return fmt.Errorf("line %d: %s after run_done", n, typ)
		}
		lastType, lastEvent = typ, ev
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if lastType != "run_done" {
		return fmt.Errorf("the last event is %q, want run_done", lastType)
	}
	if wantStatus != "" && lastEvent["status"] != wantStatus {
		return fmt.Errorf("run_done status is %v, want %s", lastEvent["status"], wantStatus)
	}
	return nil
}
