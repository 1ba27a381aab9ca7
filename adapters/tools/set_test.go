package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/luft-run/luft/adapters/tools/sandbox"
)

// fakeTool is an extra tool that counts its calls.
type fakeTool struct {
	name        string
	destructive bool
	calls       int
}

func (f *fakeTool) Spec() Spec {
	return Spec{Name: f.name, Description: "a fake", Parameters: object(map[string]any{}), Destructive: f.destructive}
}

func (f *fakeTool) Call(context.Context, json.RawMessage) (string, error) {
	f.calls++
	return "done", nil
}

var builtinNames = []string{"edit_file", "list_dir", "read_file", "run_command", "search_files", "write_file"}

func TestNewValidation(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.txt")
	writeFileT(t, file, "x")
	stateParent := t.TempDir() // a state dir kept outside the workspace
	tests := []struct {
		name  string
		cfg   Config
		extra []Tool
		want  []string
	}{
		{"missing workspace", Config{Workspace: filepath.Join(dir, "nope")}, nil, []string{"nope", "does not exist"}},
		{"workspace is a file", Config{Workspace: file}, nil, []string{"file.txt", "is not a directory"}},
		{"bad approval", Config{Workspace: dir, Approval: "maybe"}, nil, []string{`"maybe"`, "allow", "deny", "ask"}},
		{"negative timeout", Config{Workspace: dir, CommandTimeout: -1}, nil, []string{"negative"}},
		{"allow entry with shell syntax", Config{Workspace: dir, AllowCommands: []string{"go test; rm"}}, nil, []string{`"go test; rm"`, "shell syntax"}},
		{"empty allow entry", Config{Workspace: dir, AllowCommands: []string{"  "}}, nil, []string{"empty entry"}},
		{"extra clashes with a built-in", Config{Workspace: dir}, []Tool{&fakeTool{name: "read_file"}},
			[]string{`"read_file"`, "the built-in read_file", "extra tool 1 (*tools.fakeTool)"}},
		{"two extras share a name", Config{Workspace: dir}, []Tool{&fakeTool{name: "x"}, &fakeTool{name: "x"}},
			[]string{`"x"`, "extra tool 1", "extra tool 2"}},
		{"bad extra name", Config{Workspace: dir}, []Tool{&fakeTool{name: "has space"}}, []string{`"has space"`}},
		{"nil extra", Config{Workspace: dir}, []Tool{nil}, []string{"nil"}},
		{"destructive names no tool", Config{Workspace: dir, Destructive: []string{"rm_rf"}}, nil, []string{`"rm_rf"`, "read_file"}},
		{"env entry not a name", Config{Workspace: dir, Env: []string{"A=B"}}, nil, []string{`"A=B"`, "not an environment variable name"}},
		{"writable folder missing", Config{Workspace: dir, Writable: []string{"cache"}}, nil, []string{`"cache"`, "not an existing folder"}},
		{"writable is a file", Config{Workspace: dir, Writable: []string{file}}, nil, []string{"file.txt", "not an existing folder"}},
		{"writable holds the workspace", Config{Workspace: dir, Writable: []string{"/"}},
			nil, []string{`writable "/"`, "holds the workspace", "narrower folder"}},
		{"writable is the parent", Config{Workspace: dir, Writable: []string{".."}},
			nil, []string{`writable ".."`, "holds the workspace"}},
		{"writable holds the state dir", Config{Workspace: dir, Writable: []string{stateParent}, Protected: []string{filepath.Join(stateParent, "st")}},
			nil, []string{"st", "never change", "narrower folder"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg, tt.extra...)
			wantErr(t, err, tt.want...)
		})
	}
}

func TestNewDefaults(t *testing.T) {
	s := newSet(t, Config{})
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if s.Workspace() != wd {
		t.Errorf("Workspace() = %q, want the working directory %q", s.Workspace(), wd)
	}
	if s.approval != ApprovalAsk {
		t.Errorf("approval = %q, want %q", s.approval, ApprovalAsk)
	}
	if s.env.timeout != DefaultCommandTimeout {
		t.Errorf("timeout = %s, want %s", s.env.timeout, DefaultCommandTimeout)
	}
}

func TestNames(t *testing.T) {
	s := newSet(t, Config{Workspace: t.TempDir()}, &fakeTool{name: "zz_extra"}, &fakeTool{name: "aa_extra"})
	want := append([]string{"aa_extra"}, builtinNames...)
	want = append(want, "zz_extra")
	if got := s.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
}

func TestResolve(t *testing.T) {
	s := newSet(t, Config{Workspace: t.TempDir()})
	got, err := s.Resolve([]string{"write_file", "read_file", "write_file"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range got {
		names = append(names, tool.Spec().Name)
	}
	if want := []string{"write_file", "read_file"}; !slices.Equal(names, want) {
		t.Errorf("Resolve names = %v, want %v (request order, repeats once)", names, want)
	}
	if got, err := s.Resolve(nil); err != nil || len(got) != 0 {
		t.Errorf("Resolve(nil) = %v, %v; want nothing", got, err)
	}

	_, err = s.Resolve([]string{"read_file", "bash", "web"})
	wantErr(t, err, `unknown tools "bash", "web"`, "available: edit_file, list_dir, read_file, run_command, search_files, write_file")
}

// TestSpecs checks every built-in's schema has the shape function calling expects.
func TestSpecs(t *testing.T) {
	s := newSet(t, Config{Workspace: t.TempDir(), AllowCommands: []string{"go test"}})
	for _, name := range builtinNames {
		sp := s.tools[name].Spec()
		// File writes are destructive: under the default "ask" a person says yes first.
		wantDestructive := name == "write_file" || name == "edit_file"
		if sp.Name != name || sp.Description == "" || sp.Destructive != wantDestructive {
			t.Errorf("%s: spec %+v: want its name, a description, destructive = %v", name, sp, wantDestructive)
		}
		p := sp.Parameters
		if p["type"] != "object" || p["additionalProperties"] != false {
			t.Errorf("%s: parameters %v: want type object, additionalProperties false", name, p)
		}
		props, _ := p["properties"].(map[string]any)
		req, _ := p["required"].([]string)
		if props == nil || req == nil {
			t.Fatalf("%s: parameters lack properties or required: %v", name, p)
		}
		for _, r := range req {
			if _, ok := props[r]; !ok {
				t.Errorf("%s: required %q is not a property", name, r)
			}
		}
		if _, err := json.Marshal(p); err != nil {
			t.Errorf("%s: parameters do not marshal: %v", name, err)
		}
	}
}

func TestApproval(t *testing.T) {
	tests := []struct {
		policy   Approval
		wantRun  bool
		wantErr  string
		wantAsk  bool
		wantFile bool
	}{
		{policy: ApprovalAllow, wantRun: true, wantFile: true},
		{policy: ApprovalDeny, wantErr: "refused by policy"},
		{policy: ApprovalAsk, wantAsk: true},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			ws := t.TempDir()
			fake := &fakeTool{name: "launch", destructive: true}
			safe := &fakeTool{name: "peek"}
			// write_file and edit_file are destructive without being listed; list_dir is
			// because [tools] destructive lists it.
			s := newSet(t, Config{Workspace: ws, Approval: tt.policy, Destructive: []string{"list_dir"}}, fake, safe)
			tools, err := s.Resolve([]string{"launch", "write_file", "peek", "read_file", "edit_file", "list_dir"})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []bool{true, true, false, false, true, true} {
				if got := tools[i].Spec().Destructive; got != want {
					t.Errorf("%s: Spec().Destructive = %v, want %v", tools[i].Spec().Name, got, want)
				}
			}

			check := func(out string, err error) {
				t.Helper()
				var ae *ApprovalError
				switch {
				case tt.wantAsk:
					if !errors.As(err, &ae) {
						t.Fatalf("got %q, %v; want an *ApprovalError", out, err)
					}
				case tt.wantErr != "":
					wantErr(t, err, tt.wantErr)
					if errors.As(err, &ae) {
						t.Errorf("deny returned an *ApprovalError; it must be an ordinary tool error")
					}
				case err != nil:
					t.Fatalf("got error %v, want the tool to run", err)
				}
			}
			check(tools[0].Call(context.Background(), json.RawMessage(`{}`)))
			if ran := fake.calls == 1; ran != tt.wantRun {
				t.Errorf("destructive extra ran = %v, want %v", ran, tt.wantRun)
			}
			check(tools[1].Call(context.Background(), json.RawMessage(`{"path":"a.txt","content":"x"}`)))
			if _, err := os.Stat(filepath.Join(ws, "a.txt")); (err == nil) != tt.wantFile {
				t.Errorf("write_file (destructive by default) wrote the file = %v, want %v", err == nil, tt.wantFile)
			}
			if err := os.WriteFile(filepath.Join(ws, "b.txt"), []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			check(tools[4].Call(context.Background(), json.RawMessage(`{"path":"b.txt","old_string":"old","new_string":"new"}`)))
			if b, _ := os.ReadFile(filepath.Join(ws, "b.txt")); (string(b) == "new") != tt.wantFile {
				t.Errorf("edit_file (destructive by default) changed the file to %q, want changed = %v", b, tt.wantFile)
			}
			check(tools[5].Call(context.Background(), json.RawMessage(`{"path":"."}`)))

			// Tools that are not destructive run under every policy.
			if out, err := tools[2].Call(context.Background(), nil); err != nil || out != "done" {
				t.Errorf("non-destructive extra: %q, %v", out, err)
			}
			if _, err := tools[3].Call(context.Background(), json.RawMessage(`{"path":"."}`)); err == nil ||
				errors.As(err, new(*ApprovalError)) {
				t.Errorf("read_file of a directory: want its own tool error, got %v", err)
			}
		})
	}
}

func TestDecodeArgs(t *testing.T) {
	s := newSet(t, Config{Workspace: workspaceFrom(t)})
	tests := []struct {
		name, tool, args string
		want             []string
	}{
		{"unknown field", "read_file", `{"path":"notes.txt","lines":3}`, []string{"read_file: invalid arguments", `"lines"`, "{path, offset?, limit?}"}},
		{"wrong type", "list_dir", `{"path":3}`, []string{"list_dir: invalid arguments"}},
		{"not an object", "write_file", `"hello"`, []string{"write_file: invalid arguments"}},
		{"trailing data", "read_file", `{"path":"notes.txt"} {}`, []string{"extra data"}},
		{"missing required", "read_file", `{}`, []string{`"path" argument is required`}},
		{"null is empty", "search_files", `null`, []string{`"pattern" argument is required`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, s, tt.tool, tt.args)
			wantErr(t, err, tt.want...)
		})
	}
}

// TestWarnings: a kernel that cannot confine commands is reported once, and only when
// commands are allowed; commands are then refused unless [tools] unconfined says
// otherwise, and the model is not promised a confinement that is not there.
func TestWarnings(t *testing.T) {
	ws := t.TempDir()
	real, realStatus := sandboxCheck, sandboxStatus
	t.Cleanup(func() { sandboxCheck, sandboxStatus = real, realStatus })
	sandboxStatus = func() (int, error) { return 0, errors.New("this kernel offers no Landlock") }
	sandboxCheck = func(p sandbox.Policy) error {
		if p.Unconfined {
			return nil
		}
		return fmt.Errorf("%w: this kernel offers no Landlock; set [tools] unconfined = true", sandbox.ErrCannotConfine)
	}
	s := newSet(t, Config{Workspace: ws, AllowCommands: []string{"echo"}})
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "will be refused") || !strings.Contains(w[0], "no Landlock") {
		t.Errorf("warnings without Landlock: %q", w)
	}
	if d := s.tools["run_command"].Spec().Description; strings.Contains(d, "refused by the kernel") {
		t.Errorf("the description promises confinement: %s", d)
	}
	_, err := call(t, s, "run_command", `{"command": "echo hi"}`)
	wantErr(t, err, "was not run", "unconfined = true")

	u := newSet(t, Config{Workspace: ws, AllowCommands: []string{"echo"}, Unconfined: true})
	if w := u.Warnings(); len(w) != 1 || !strings.Contains(w[0], "unconfined = true lets them run") {
		t.Errorf("warnings when unconfined: %q", w)
	}
	if w := newSet(t, Config{Workspace: ws}).Warnings(); len(w) != 0 {
		t.Errorf("warnings with no commands allowed: %q", w)
	}
	sandboxCheck, sandboxStatus = func(sandbox.Policy) error { return nil }, func() (int, error) { return 7, nil }
	if w := newSet(t, Config{Workspace: ws, AllowCommands: []string{"go test"}}).Warnings(); len(w) != 0 {
		t.Errorf("warnings with Landlock: %q", w)
	}
}

// [tools] writable entries become the real folders they name, whatever way they are
// written: relative with "..", through a symbolic link, under ~; a name with a NUL or a
// long list of entries ends in a clear error or a plain list, never a panic.
func TestWritableDirsHostile(t *testing.T) {
	base := t.TempDir()
	ws, cache := filepath.Join(base, "ws"), filepath.Join(base, "cache")
	for _, d := range []string{ws, cache, filepath.Join(base, "home", "c")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(cache, filepath.Join(ws, "cache-link")); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	t.Setenv("HOME", filepath.Join(base, "home"))
	real := ResolveExisting(base)
	w := workspace{dir: ws, real: ResolveExisting(ws)}
	got, err := writableDirs(w, []string{"../cache", "cache-link", "~/c", "./../ws/../cache/"})
	want := []string{filepath.Join(real, "cache"), filepath.Join(real, "cache"), filepath.Join(real, "home", "c"), filepath.Join(real, "cache")}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("writableDirs = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"cache\x00/etc", "../nope", "~nobody/x"} {
		if _, err := writableDirs(w, []string{bad}); err == nil || !strings.Contains(err.Error(), "not an existing folder") {
			t.Errorf("writable %q: %v, want a refusal", bad, err)
		}
	}
	many := slices.Repeat([]string{"../cache"}, 10_000)
	if got, err := writableDirs(w, append(many, "../nope")); err == nil || got != nil {
		t.Fatalf("a missing folder at the end of 10,001 entries: %d dirs, %v", len(got), err)
	}
}

// A protected path given relative to the working folder (the default state dir is
// ".luft") is refused inside a writable folder as an absolute one is.
func TestWritableHoldsARelativeStateDir(t *testing.T) {
	root := t.TempDir()
	ws, st := filepath.Join(root, "ws"), filepath.Join(root, "st")
	for _, d := range []string{ws, st} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(root)
	_, err := New(Config{Workspace: ws, Writable: []string{"../st"}, Protected: []string{"st"}})
	wantErr(t, err, `writable "../st"`, "never change", "narrower folder")
}

// A writable folder beside the workspace is fine, even with the state dir inside the
// workspace (commands may write the workspace whole already).
func TestWritableBesideTheWorkspace(t *testing.T) {
	root := t.TempDir()
	ws, cache := filepath.Join(root, "ws"), filepath.Join(root, "cache")
	for _, d := range []string{ws, cache} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(Config{Workspace: ws, Writable: []string{"../cache", "."}, Protected: []string{filepath.Join(ws, ".luft"), filepath.Join(ws, "luft.toml")}}); err != nil {
		t.Fatal(err)
	}
}
