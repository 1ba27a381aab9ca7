package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperArg as the first argument makes the test binary act as a small program for
// run_command to run (see helperMain), so the command tests need nothing installed.
const helperArg = "luft-tools-helper"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		os.Exit(helperMain(os.Args[2:]))
	}
	// Under -race a program that exits with status 0 waits a second for its threads
	// (atexit_sleep_ms); the helper processes need not. GORACE is read at start, so this
	// changes only them.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	// run_command keeps a cache folder per workspace under the user's cache folder; the
	// tests' workspaces get theirs in a folder of their own, removed at the end.
	cache, err := os.MkdirTemp("", "luft-tools-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CACHE_HOME", cache)
	code := m.Run()
	os.RemoveAll(cache)
	os.Exit(code)
}

func helperMain(args []string) int {
	switch args[0] {
	case "print":
		fmt.Println(strings.Join(args[1:], " "))
	case "pwd":
		wd, _ := os.Getwd()
		fmt.Println(wd)
	case "exit":
		code, _ := strconv.Atoi(args[1])
		fmt.Fprintln(os.Stderr, "failing on purpose")
		return code
	case "flood":
		n, _ := strconv.Atoi(args[1])
		fmt.Print("START\n")
		for i := 0; n > 0; i++ {
			line := fmt.Sprintf("line %d\n", i)
			fmt.Print(line)
			n -= len(line)
		}
		fmt.Print("END\n")
	case "write": // write PATH: create or overwrite PATH with "x"
		if err := os.WriteFile(args[1], []byte("x"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("wrote", args[1])
	case "env": // the environment, one variable a line
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	case "hang":
		// The process under test for timeouts: it must be killed to end.
		time.Sleep(time.Hour)
	default:
		fmt.Fprintln(os.Stderr, "unknown helper command", args[0])
		return 2
	}
	return 0
}

// helper returns the command-line prefix that runs the test binary as the helper.
func helper(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot find the test binary to run as a helper: %v", err)
	}
	if strings.Contains(exe, "'") {
		t.Skipf("test binary path %q has a single quote; it cannot be quoted simply", exe)
	}
	return "'" + exe + "' " + helperArg
}

// workspaceFrom copies testdata/ws into a fresh temporary workspace and returns its path.
func workspaceFrom(t *testing.T) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.CopyFS(ws, os.DirFS("testdata/ws")); err != nil {
		t.Fatal(err)
	}
	return ws
}

func newSet(t *testing.T, cfg Config, extra ...Tool) *Set {
	t.Helper()
	s, err := New(cfg, extra...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// call runs the named tool of s with args marshalled to JSON (a string is sent as is).
func call(t *testing.T, s *Set, name string, args any) (string, error) {
	t.Helper()
	tool, ok := s.tools[name]
	if !ok {
		t.Fatalf("no tool %q", name)
	}
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	return tool.Call(context.Background(), json.RawMessage(raw))
}

func mustCall(t *testing.T, s *Set, name string, args any) string {
	t.Helper()
	out, err := call(t, s, name, args)
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	return out
}

func writeFileT(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func wantErr(t *testing.T, err error, substrs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", substrs)
	}
	for _, s := range substrs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}
