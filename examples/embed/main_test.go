package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The program runs the built-in workflow on the mock backend and prints its progress
// and report.
func TestRunBuiltIn(t *testing.T) {
	var out, errOut strings.Builder
	if code := run(t.Context(), []string{"-state-dir", t.TempDir()}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{
		"phase review\n", "phase summary\n", "main/1/par[1]/1 reviewer security ok", "main/2 summarizer ok",
		"completed in ", `"summary": "mock: Summarize: mock: Review the code for security problems.`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.HasPrefix(errOut.String(), "run ") {
		t.Errorf("stderr: %q, want the run id", errOut.String())
	}
}

// A workflow file with args, events as JSON lines: every line is an event, in order.
func TestRunFileJSON(t *testing.T) {
	hello, err := filepath.Abs(filepath.Join("..", "hello.lua"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	code := run(t.Context(), []string{"-state-dir", t.TempDir(), "-workflow", hello, "-args", `{"name": "Ada"}`, "-json"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	var seq float64
	var last map[string]any
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not an event: %s", sc.Text())
		}
		if ev["seq"] != seq+1 {
			t.Fatalf("seq %v after %v", ev["seq"], seq)
		}
		seq, last = ev["seq"].(float64), ev
	}
	if last["type"] != "run_done" || last["status"] != "completed" {
		t.Fatalf("last event %v", last)
	}
	if rep, _ := json.Marshal(last["report"]); !strings.Contains(string(rep), "Ada") {
		t.Fatalf("report %s does not greet Ada", rep)
	}
}

// Bad input exits 2 with the reason; a script error exits 1 naming the line.
func TestRunFailures(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken.lua")
	if err := os.WriteFile(broken, []byte("function main()\n  error('no input')\nend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-args", "{"}, 2, "-args is not JSON"},
		{[]string{"-workflow", filepath.Join(t.TempDir(), "none.lua")}, 2, "none.lua"},
		{[]string{"-workflow", broken}, 1, "the script failed at " + broken + ":2: no input"},
	} {
		var out, errOut strings.Builder
		code := run(t.Context(), append([]string{"-state-dir", t.TempDir()}, tc.args...), &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errOut.String(), tc.code, tc.want)
		}
	}
}
