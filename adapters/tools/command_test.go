package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters/tools/sandbox"
)

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "go test ./...", want: []string{"go", "test", "./..."}},
		{in: "  go\ttest  ", want: []string{"go", "test"}},
		{in: "", want: nil},
		{in: `go test -run 'TestA|TestB'`, want: []string{"go", "test", "-run", "TestA|TestB"}},
		{in: `echo "a b" 'c d'`, want: []string{"echo", "a b", "c d"}},
		{in: `echo a\ b`, want: []string{"echo", "a b"}},
		{in: `echo "say \"hi\"" "back\\slash" "keep\n"`, want: []string{"echo", `say "hi"`, `back\slash`, `keep\n`}},
		{in: `echo 'it''s' ""`, want: []string{"echo", "its", ""}},
		{in: "echo '$HOME; `ls`'", want: []string{"echo", "$HOME; `ls`"}},
		{in: `go test -run Test.*`, want: []string{"go", "test", "-run", "Test.*"}},
		{in: "go test ./... ; rm -rf /", wantErr: `';' is shell syntax`},
		{in: "go test ./...;rm -rf /", wantErr: `';' is shell syntax`},
		{in: "go test | tee out", wantErr: `'|' is shell syntax`},
		{in: "go test && rm x", wantErr: `'&' is shell syntax`},
		{in: "go test &", wantErr: `'&' is shell syntax`},
		{in: "go test > out.txt", wantErr: `'>' is shell syntax`},
		{in: "go test < in.txt", wantErr: `'<' is shell syntax`},
		{in: "go test $(rm -rf /)", wantErr: `'$' is shell syntax`},
		{in: "go test $HOME", wantErr: `'$' is shell syntax`},
		{in: "go test `rm -rf /`", wantErr: "'`' is shell syntax"},
		{in: `go test "$(rm -rf /)"`, wantErr: `'$' inside double quotes`},
		{in: "go test (x)", wantErr: `'(' is shell syntax`},
		{in: "go test\nrm -rf /", wantErr: "newline"},
		{in: "go test 'a\nb'", wantErr: "newline"},
		{in: `go test 'open`, wantErr: "unterminated ' quote"},
		{in: `go test "open`, wantErr: `unterminated " quote`},
		{in: `go test \`, wantErr: "trailing backslash"},
	}
	for _, tt := range tests {
		got, err := splitWords(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("splitWords(%q) = %q, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestJoinWords(t *testing.T) {
	tests := [][]string{
		{"go", "test", "./..."},
		{"/path with space/prog", "it's", "", "a|b", `back\slash`, "$x"},
	}
	for _, words := range tests {
		line := joinWords(words)
		back, err := splitWords(line)
		if err != nil || !slices.Equal(back, words) {
			t.Errorf("splitWords(joinWords(%q)) = splitWords(%q) = %q, %v", words, line, back, err)
		}
	}
	if got := joinWords([]string{"go", "test", "a b"}); got != "go test 'a b'" {
		t.Errorf("joinWords = %q", got)
	}
}

func TestAllowed(t *testing.T) {
	allow := [][]string{{"go", "test"}, {"ls"}}
	tests := []struct {
		argv []string
		want bool
	}{
		{[]string{"go", "test"}, true},
		{[]string{"go", "test", "./..."}, true},
		{[]string{"ls", "-la"}, true},
		{[]string{"go", "testx"}, false},
		{[]string{"go", "vet", "./..."}, false},
		{[]string{"go"}, false},
		{[]string{"gotest"}, false},
		{[]string{"/usr/bin/go", "test"}, false},
		{[]string{"lsof"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := allowed(allow, tt.argv); got != tt.want {
			t.Errorf("allowed(%q) = %v, want %v", tt.argv, got, tt.want)
		}
	}
}

func TestRunCommand(t *testing.T) {
	h := helper(t)
	ws := t.TempDir()
	s := newSet(t, Config{Workspace: ws, AllowCommands: []string{h + " print", h + " pwd", h + " exit", h + " flood"}})
	exe, _ := splitWords(h)

	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"one command string", map[string]any{"command": h + " print hello 'big world'"}, "hello big world\n[exit 0]"},
		{"program and args", map[string]any{"command": exe[0], "args": []string{helperArg, "print", "a;b", "$(x)"}},
			"a;b $(x)\n[exit 0]"},
		{"leading words and args", map[string]any{"command": h + " print", "args": []string{"x"}}, "x\n[exit 0]"},
		{"non-zero exit is a result", map[string]any{"command": h + " exit 3"}, "failing on purpose\n[exit 3]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCall(t, s, "run_command", tt.args); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("runs in the workspace", func(t *testing.T) {
		got := mustCall(t, s, "run_command", map[string]any{"command": h + " pwd"})
		dir, _, _ := strings.Cut(got, "\n")
		real, _ := filepath.EvalSymlinks(ws)
		if dir != ws && dir != real {
			t.Errorf("working directory %q, want the workspace %q", dir, ws)
		}
	})

	t.Run("output is capped, start and end kept", func(t *testing.T) {
		s := newSet(t, Config{Workspace: ws, AllowCommands: []string{h + " flood"}})
		s.env.lim.outputBytes = 200
		got := mustCall(t, s, "run_command", map[string]any{"command": h + " flood 100000"})
		for _, want := range []string{"START\n", "bytes of output omitted", "END\n[exit 0]"} {
			if !strings.Contains(got, want) {
				t.Errorf("output lacks %q:\n%s", want, got)
			}
		}
		if len(got) > 300 {
			t.Errorf("output is %d bytes, want about the 200-byte cap", len(got))
		}
	})

	errTests := []struct {
		name string
		args map[string]any
		want []string
	}{
		{"not allowed", map[string]any{"command": h + " hang"}, []string{"is not allowed", "must start with one of", helperArg + " print; ", helperArg + " hang` is not"}},
		{"prefix-word trick", map[string]any{"command": h + " printx"}, []string{"is not allowed"}},
		{"allowed words split across command and args", map[string]any{"command": exe[0], "args": []string{helperArg, "printx"}}, []string{"is not allowed"}},
		{"metacharacter injection", map[string]any{"command": h + " print hi; rm -rf /"}, []string{"';' is shell syntax", "without a shell"}},
		{"pipe injection", map[string]any{"command": h + " print hi | sh"}, []string{"'|' is shell syntax"}},
		{"substitution injection", map[string]any{"command": h + " print $(id)"}, []string{"'$' is shell syntax"}},
		{"newline injection", map[string]any{"command": h + " print hi\nrm -rf /"}, []string{"newline"}},
		{"empty command", map[string]any{"command": "  "}, []string{`"command" argument is required`}},
		{"args not strings", map[string]any{"command": "ls", "args": []int{1}}, []string{"invalid arguments"}},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, s, "run_command", tt.args)
			wantErr(t, err, tt.want...)
		})
	}
}

func TestRunCommandRefusals(t *testing.T) {
	ws := t.TempDir()

	s := newSet(t, Config{Workspace: ws})
	_, err := call(t, s, "run_command", map[string]any{"command": "ls"})
	wantErr(t, err, "no commands are allowed", "allow_commands")

	s = newSet(t, Config{Workspace: ws, AllowCommands: []string{"luft-no-such-program-7f3a"}})
	_, err = call(t, s, "run_command", map[string]any{"command": "luft-no-such-program-7f3a --help"})
	wantErr(t, err, `program "luft-no-such-program-7f3a" was not found on PATH`)

	s = newSet(t, Config{Workspace: ws, AllowCommands: []string{"./build.sh"}})
	_, err = call(t, s, "run_command", map[string]any{"command": "./build.sh"})
	wantErr(t, err, `program "./build.sh" does not exist`, "taken from the workspace")
	// A script the model wrote is found in the workspace, wherever luft was started.
	writeFileT(t, filepath.Join(ws, "build.sh"), "#!/bin/sh\necho built\n")
	if err := os.Chmod(filepath.Join(ws, "build.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out := mustCall(t, s, "run_command", map[string]any{"command": "./build.sh"}); out != "built\n[exit 0]" {
		t.Errorf("./build.sh: %q", out)
	}
}

func TestRunCommandTimeout(t *testing.T) {
	h := helper(t)
	s := newSet(t, Config{Workspace: t.TempDir(), AllowCommands: []string{h + " hang"}, CommandTimeout: 50 * time.Millisecond})
	// The helper would hang for an hour; the call returns only because the timeout kills it.
	got := mustCall(t, s, "run_command", map[string]any{"command": h + " hang"})
	if want := "[timed out after 50ms: the process was killed]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRunCommandTimeoutSleep(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep program on PATH; TestRunCommandTimeout covers the timeout with the test binary")
	}
	s := newSet(t, Config{Workspace: t.TempDir(), AllowCommands: []string{"sleep"}, CommandTimeout: 50 * time.Millisecond})
	got := mustCall(t, s, "run_command", map[string]any{"command": "sleep 60"})
	if !strings.HasSuffix(got, "[timed out after 50ms: the process was killed]") {
		t.Errorf("got %q, want a timeout", got)
	}
}

func TestRunCommandCancelled(t *testing.T) {
	h := helper(t)
	s := newSet(t, Config{Workspace: t.TempDir(), AllowCommands: []string{h + " hang"}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.tools["run_command"].Call(ctx, json.RawMessage(fmt.Sprintf(`{"command":%q}`, h+" hang")))
	wantErr(t, err, "context canceled")
}

func TestRunCommandSpecListsAllowed(t *testing.T) {
	s := newSet(t, Config{Workspace: t.TempDir(), AllowCommands: []string{"go test", "ls"}})
	if d := s.tools["run_command"].Spec().Description; !strings.Contains(d, "Allowed: go test; ls.") {
		t.Errorf("description does not list the allowed commands: %s", d)
	}
}

func TestCapWriter(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"under the cap", []string{"ab", "cd"}, "abcd"},
		{"exactly the cap", []string{"abcdef"}, "abcdef"},
		{"over, one write", []string{"abcdefgh"}, "abc\n[… 2 bytes of output omitted …]\nfgh"},
		{"over, many writes", []string{"ab", "cd", "ef", "gh", "ij"}, "abc\n[… 4 bytes of output omitted …]\nhij"},
		{"far over", []string{strings.Repeat("x", 50) + "end"}, "xxx\n[… 47 bytes of output omitted …]\nend"},
	}
	for _, tt := range tests {
		w := &capWriter{headMax: 3, tailMax: 3}
		for _, s := range tt.writes {
			if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
				t.Fatalf("%s: Write = %d, %v", tt.name, n, err)
			}
		}
		if got := w.String(); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestRunCommandConfined proves what a command may change: the workspace and its
// private $TMPDIR, nothing outside (when the kernel has Landlock), and that its
// environment carries no credentials.
func TestRunCommandConfined(t *testing.T) {
	h := helper(t)
	base := t.TempDir()
	ws, outside, cache := filepath.Join(base, "ws"), filepath.Join(base, "outside"), filepath.Join(base, "cache")
	for _, d := range []string{ws, outside, cache} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	victim := filepath.Join(outside, "victim")
	writeFileT(t, victim, "original")
	t.Setenv("LUFT_TEST_API_KEY", "sk-test-secret")
	t.Setenv("GOPATH_LIKE", "kept")
	s := newSet(t, Config{Workspace: ws, AllowCommands: []string{h + " write", h + " env"},
		Env: []string{"GOPATH_*"}, Writable: []string{cache}})

	out := mustCall(t, s, "run_command", map[string]any{"command": h + " env"})
	if strings.Contains(out, "sk-test-secret") || strings.Contains(out, "LUFT_TEST_API_KEY") {
		t.Errorf("the command saw a credential:\n%s", out)
	}
	if !strings.Contains(out, "GOPATH_LIKE=kept") || !strings.Contains(out, "PATH=") {
		t.Errorf("the command lacks PATH or a variable [tools] env names:\n%s", out)
	}
	tmp := ""
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "TMPDIR="); ok {
			tmp = v
		}
	}
	if tmp == "" || tmp == os.TempDir() {
		t.Fatalf("TMPDIR = %q, want a private folder", tmp)
	}
	// $XDG_CACHE_HOME is the workspace's own cache folder, the same from call to call.
	cacheHome := ""
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "XDG_CACHE_HOME="); ok {
			cacheHome = v
		}
	}
	if !strings.HasPrefix(cacheHome, filepath.Join(os.Getenv("XDG_CACHE_HOME"), "luft", "commands")+"/") {
		t.Fatalf("XDG_CACHE_HOME = %q, want the workspace's folder under the user's cache", cacheHome)
	}
	if again := mustCall(t, s, "run_command", map[string]any{"command": h + " env"}); !strings.Contains(again, "XDG_CACHE_HOME="+cacheHome+"\n") {
		t.Errorf("the cache folder changed between calls:\n%s", again)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the private temporary folder %s outlived the command (%v)", tmp, err)
	}

	// Inside the workspace and the writable folders, writes work.
	for _, p := range []string{filepath.Join(ws, "made"), filepath.Join(cache, "entry"), filepath.Join(cacheHome, "entry")} {
		if got := mustCall(t, s, "run_command", map[string]any{"command": h + " write", "args": []string{p}}); !strings.HasSuffix(got, "[exit 0]") {
			t.Errorf("write %s: %s", p, got)
		}
	}

	if _, err := sandbox.Status(); err != nil {
		t.Skipf("no Landlock here, so writes outside cannot be refused: %v", err)
	}
	got := mustCall(t, s, "run_command", map[string]any{"command": h + " write", "args": []string{victim}})
	if !strings.Contains(got, "permission denied") || !strings.HasSuffix(got, "[exit 1]") {
		t.Errorf("writing outside the workspace: %s", got)
	}
	if readFileT(t, victim) != "original" {
		t.Fatal("a command changed a file outside the workspace")
	}
	if !strings.Contains(s.tools["run_command"].Spec().Description, "refused by the kernel") {
		t.Error("run_command's description does not say writes outside are refused")
	}
}

// TestRunCommandFlood: a command that prints without end (the red team's "10 GB") is
// stopped once it has printed far more than could be shown, long before its timeout,
// and the model is told why; luft keeps only the capped head and tail.
func TestRunCommandFlood(t *testing.T) {
	if _, err := exec.LookPath("yes"); err != nil {
		t.Skip("no yes program on PATH")
	}
	s := newSet(t, Config{Workspace: t.TempDir(), AllowCommands: []string{"yes"}, CommandTimeout: time.Hour})
	s.env.lim.outputStop = 4 << 20
	got := mustCall(t, s, "run_command", map[string]any{"command": "yes flood"})
	if !strings.Contains(got, "[stopped after printing more than "+size(4<<20)) || len(got) > 2*s.env.lim.outputBytes {
		t.Fatalf("got %d bytes ending %q, want the capped output and the stop", len(got), got[max(0, len(got)-200):])
	}
}
