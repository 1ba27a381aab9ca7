package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// needLandlock skips a test that proves a refusal when the kernel cannot refuse.
func needLandlock(t *testing.T) int {
	t.Helper()
	abi, err := Status()
	if err != nil {
		t.Skipf("no Landlock here, so nothing can be confined: %v", err)
	}
	return abi
}

// run runs sh -c script confined to write, in dir, and returns its combined output.
func run(t *testing.T, write []string, dir, script string, env ...string) (string, error) {
	t.Helper()
	return runP(t, Policy{Write: write}, dir, script, env...)
}

func TestConfinedWrites(t *testing.T) {
	abi := needLandlock(t)
	t.Logf("Landlock ABI %d", abi)
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws, outside, filepath.Join(ws, "a"), filepath.Join(ws, "b")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Inside the workspace everything works, moves between folders included.
	out, err := run(t, []string{ws}, ws, "echo x > a/f && mv a/f b/f && mkdir c && rm b/f && cat /dev/null > /dev/null && echo ok")
	if err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("work inside the workspace: %v\n%s", err, out)
	}

	// Outside it, every kind of write is refused, and reading still works.
	for _, script := range []string{
		"echo x > " + victim,
		"echo x >> " + victim,
		"echo x > " + filepath.Join(outside, "new"),
		"rm " + victim,
		"mkdir " + filepath.Join(outside, "d"),
		"ln -s /etc/passwd " + filepath.Join(outside, "l"),
		"mv " + victim + " " + filepath.Join(ws, "stolen"),
	} {
		out, err := run(t, []string{ws}, ws, script)
		if err == nil {
			t.Errorf("%s: succeeded outside the workspace:\n%s", script, out)
		}
	}
	if got, _ := os.ReadFile(victim); string(got) != "original" {
		t.Fatalf("the outside file changed: %q", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("the outside folder gained entries: %v", entries)
	}
	// Reading outside is refused too: only the system's folders and what the policy
	// names are readable.
	if out, err := run(t, []string{ws}, ws, "cat "+victim); err == nil || strings.Contains(out, "original") {
		t.Fatalf("reading outside: %v %q", err, out)
	}

	// A grandchild is confined too: the rules outlive exec.
	if out, err := run(t, []string{ws}, ws, "sh -c 'echo x > "+victim+"'"); err == nil {
		t.Fatalf("a grandchild wrote outside:\n%s", out)
	}

	// The environment reaches the program unchanged and the marker is gone from argv.
	out, err = run(t, []string{ws}, ws, `echo "$0 $GREETING"`, "GREETING=hello")
	if err != nil || strings.TrimSpace(out) != "sh hello" {
		t.Fatalf("environment and argv: %v %q", err, out)
	}
}

func TestConfinedSignals(t *testing.T) {
	if abi := needLandlock(t); abi < 6 {
		t.Skipf("Landlock ABI %d does not scope signals (ABI 6 does)", abi)
	}
	ws := t.TempDir()
	// The test process is outside the sandbox: a confined command cannot signal it.
	out, err := run(t, []string{ws}, ws, "kill -0 "+itoa(os.Getpid()))
	if err == nil {
		t.Fatalf("a confined command could signal its parent:\n%s", out)
	}
}

func TestChildErrors(t *testing.T) {
	needLandlock(t)
	ws := t.TempDir()
	// A writable folder that does not exist fails closed, with exit status 126.
	_, err := run(t, []string{filepath.Join(ws, "missing")}, ws, "true")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 126 {
		t.Fatalf("missing writable folder: %v, want exit 126", err)
	}
	// A program that is not there: exit 127, as a shell says, with the reason.
	cmd, err := Command(context.Background(), Policy{Write: []string{ws}}, filepath.Join(ws, "nope"), []string{"nope"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	Done(cmd)
	if !errors.As(err, &ee) || ee.ExitCode() != 127 || !strings.Contains(string(out), "cannot run") {
		t.Fatalf("missing program: %v %q", err, out)
	}
	// One that is not executable: exit 126.
	if err := os.WriteFile(filepath.Join(ws, "plain"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, err = Command(context.Background(), Policy{Write: []string{ws}}, filepath.Join(ws, "plain"), []string{"plain"})
	if err != nil {
		t.Fatal(err)
	}
	out, err = cmd.CombinedOutput()
	Done(cmd)
	if !errors.As(err, &ee) || ee.ExitCode() != 126 || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("not executable: %v %q", err, out)
	}
	if _, err := Command(context.Background(), Policy{Write: []string{"relative"}}, "/bin/true", []string{"true"}); err == nil {
		t.Fatal("a relative writable folder was accepted")
	}
	if _, err := Command(context.Background(), Policy{}, "/bin/true", nil); err == nil {
		t.Fatal("an empty argv was accepted")
	}
	var stderr bytes.Buffer
	if code := childMain("{not json", &stderr); code != 126 || !strings.Contains(stderr.String(), "malformed request") {
		t.Fatalf("malformed request: exit %d %q, want 126 and a message", code, stderr.String())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestConfinedStandardStreams: writing to the inherited output through its /dev and
// /proc names (as shells and test runners do) still works: a pipe is no file to refuse.
func TestConfinedStandardStreams(t *testing.T) {
	needLandlock(t)
	ws := t.TempDir()
	out, err := run(t, []string{ws}, ws, "echo a > /dev/stdout && echo b > /dev/stderr && echo c > /proc/self/fd/1")
	if err != nil || out != "a\nb\nc\n" {
		t.Fatalf("standard streams: %v %q", err, out)
	}
}

// TestConfinedEscapes: a confined command cannot write outside through a name it makes
// inside the workspace — a symbolic link, a hard link, "..", /proc/self/root — nor by
// moving the workspace's folder away and a link in its place.
func TestConfinedEscapes(t *testing.T) {
	needLandlock(t)
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	for _, d := range []string{ws, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{
		"ln -s " + victim + " l && echo x > l",
		"ln -s " + outside + " d && echo x > d/new",
		"ln " + victim + " hl && echo x > hl",
		"echo x > ../outside/victim",
		"cd .. && echo x > outside/victim",
		"echo x > /proc/self/root" + victim,
		"echo x > " + ws + "/../outside/new",
		"mkdir sub && mv sub ../outside/sub",
		"cd .. && mv ws ws2 && ln -s outside ws && echo x > ws/new",
	} {
		if out, err := run(t, []string{ws}, ws, script); err == nil {
			t.Errorf("%s: succeeded:\n%s", script, out)
		}
	}
	if got, _ := os.ReadFile(victim); string(got) != "original" {
		t.Fatalf("the outside file changed: %q", got)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("the outside folder gained entries: %v", entries)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 2 {
		t.Fatalf("the workspace's parent changed: %v", entries)
	}
}
