package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestReadFile(t *testing.T) {
	ws := workspaceFrom(t)
	writeFileT(t, filepath.Join(ws, "empty.txt"), "")
	writeFileT(t, filepath.Join(ws, "noeol.txt"), "one\ntwo")
	writeFileT(t, filepath.Join(ws, "bin.dat"), "abc\x00def")
	s := newSet(t, Config{Workspace: ws})
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"whole file", map[string]any{"path": "notes.txt"}, "alpha\nbeta\ngamma\ndelta\n"},
		{"nested", map[string]any{"path": "sub/deep.go"}, readFileT(t, filepath.Join(ws, "sub/deep.go"))},
		{"absolute inside the workspace", map[string]any{"path": filepath.Join(ws, "notes.txt")}, "alpha\nbeta\ngamma\ndelta\n"},
		{"offset", map[string]any{"path": "notes.txt", "offset": 3}, "gamma\ndelta\n"},
		{"offset and limit", map[string]any{"path": "notes.txt", "offset": 2, "limit": 2},
			"beta\ngamma\n[showing lines 2-3; the file goes on: read on with offset=4]"},
		{"limit reaching the end", map[string]any{"path": "notes.txt", "offset": 3, "limit": 2}, "gamma\ndelta\n"},
		{"offset 0 means the start", map[string]any{"path": "notes.txt", "offset": 0, "limit": 1},
			"alpha\n[showing lines 1-1; the file goes on: read on with offset=2]"},
		{"offset past the end", map[string]any{"path": "notes.txt", "offset": 9}, "[offset 9 is past the end: the file has 4 lines]"},
		{"empty file", map[string]any{"path": "empty.txt"}, "[empty file]"},
		{"no final newline", map[string]any{"path": "noeol.txt", "offset": 2}, "two"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCall(t, s, "read_file", tt.args); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	errTests := []struct {
		name string
		args map[string]any
		want []string
	}{
		{"binary", map[string]any{"path": "bin.dat"}, []string{`"bin.dat"`, "binary", "NUL"}},
		{"directory", map[string]any{"path": "sub"}, []string{`"sub" is a directory`, "list_dir"}},
		{"missing", map[string]any{"path": "nope.txt"}, []string{`"nope.txt" does not exist in the workspace ` + ws}},
		{"negative limit", map[string]any{"path": "notes.txt", "limit": -1}, []string{"must be positive"}},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, s, "read_file", tt.args)
			wantErr(t, err, tt.want...)
		})
	}
}

func TestReadFileTruncation(t *testing.T) {
	ws := t.TempDir()
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %03d\n", i) // 9 bytes a line
	}
	writeFileT(t, filepath.Join(ws, "long.txt"), b.String())
	writeFileT(t, filepath.Join(ws, "wide.txt"), strings.Repeat("é", 100)+"\nnext\n")
	s := newSet(t, Config{Workspace: ws})
	s.env.lim.readBytes = 100

	got := mustCall(t, s, "read_file", map[string]any{"path": "long.txt"})
	body, note, _ := strings.Cut(got, "[")
	if want := b.String()[:99]; body != want { // 11 whole lines fit in 100 bytes
		t.Errorf("body = %q, want the first 11 lines %q", body, want)
	}
	if want := "truncated: output is capped at 100 bytes; showing lines 1-11, read on with offset=12]"; note != want {
		t.Errorf("note = %q, want %q", note, want)
	}

	// Reading on from the offset the note gives continues where it stopped.
	got = mustCall(t, s, "read_file", map[string]any{"path": "long.txt", "offset": 12, "limit": 1})
	if !strings.HasPrefix(got, "line 012\n") {
		t.Errorf("read on = %q, want it to start at line 012", got)
	}

	// A line longer than the cap is cut on a rune boundary and the next offset skips it.
	got = mustCall(t, s, "read_file", map[string]any{"path": "wide.txt"})
	body, note, _ = strings.Cut(got, "\n[")
	if body != strings.Repeat("é", 50) {
		t.Errorf("cut line = %q, want 50 whole runes", body)
	}
	if !strings.Contains(note, "line 1 is longer than") || !strings.Contains(note, "offset=2") {
		t.Errorf("note = %q, want it to say line 1 was cut and offset=2 reads on", note)
	}
}

func TestListDir(t *testing.T) {
	ws := workspaceFrom(t)
	if err := os.Mkdir(filepath.Join(ws, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSet(t, Config{Workspace: ws})
	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"default is the workspace", map[string]any{}, "empty/\nmain.go\nnotes.txt\nsub/"},
		{"dot", map[string]any{"path": "."}, "empty/\nmain.go\nnotes.txt\nsub/"},
		{"subdirectory", map[string]any{"path": "sub"}, "deep.go\nreadme.md"},
		{"trailing slash", map[string]any{"path": "sub/"}, "deep.go\nreadme.md"},
		{"empty directory", map[string]any{"path": "empty"}, "(empty directory)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCall(t, s, "list_dir", tt.args); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	_, err := call(t, s, "list_dir", map[string]any{"path": "notes.txt"})
	wantErr(t, err, `"notes.txt" is a file`, "read_file")
	_, err = call(t, s, "list_dir", map[string]any{"path": "nope"})
	wantErr(t, err, `"nope" does not exist`)

	s.env.lim.listEntries = 2
	if got, want := mustCall(t, s, "list_dir", nil), "empty/\nmain.go\n[2 more entries not shown]"; got != want {
		t.Errorf("capped: got %q, want %q", got, want)
	}
}

func TestWriteFile(t *testing.T) {
	ws := workspaceFrom(t)
	s := newSet(t, Config{Workspace: ws})

	got := mustCall(t, s, "write_file", map[string]any{"path": "a/b/c.txt", "content": "hi\n"})
	if want := "wrote 3 bytes to a/b/c.txt (created)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if c := readFileT(t, filepath.Join(ws, "a/b/c.txt")); c != "hi\n" {
		t.Errorf("content = %q", c)
	}
	got = mustCall(t, s, "write_file", map[string]any{"path": "notes.txt", "content": ""})
	if want := "wrote 0 bytes to notes.txt (replaced)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if c := readFileT(t, filepath.Join(ws, "notes.txt")); c != "" {
		t.Errorf("content = %q, want empty", c)
	}

	errTests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"content missing", map[string]any{"path": "x.txt"}, `"content" argument is required`},
		{"directory", map[string]any{"path": "sub", "content": "x"}, `"sub" is a directory`},
		{"workspace itself", map[string]any{"path": ".", "content": "x"}, "workspace directory itself"},
		{"parent is a file", map[string]any{"path": "notes.txt/x", "content": "x"}, `write_file: "notes.txt/x"`},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, s, "write_file", tt.args)
			wantErr(t, err, tt.want)
		})
	}
}

func TestEditFile(t *testing.T) {
	const text = "one two\ntwo three\nfour\n"
	tests := []struct {
		name    string
		args    map[string]any
		want    string // the result, or the error's text
		wantErr bool
		after   string
	}{
		{name: "one match", args: map[string]any{"old_string": "four", "new_string": "FOUR"},
			want: "replaced 1 occurrence in f.txt", after: "one two\ntwo three\nFOUR\n"},
		{name: "delete", args: map[string]any{"old_string": "four\n", "new_string": ""},
			want: "replaced 1 occurrence in f.txt", after: "one two\ntwo three\n"},
		{name: "no match", args: map[string]any{"old_string": "five", "new_string": "5"},
			want: `old_string was not found in "f.txt"`, wantErr: true, after: text},
		{name: "whitespace must match", args: map[string]any{"old_string": "one  two", "new_string": "x"},
			want: "was not found", wantErr: true, after: text},
		{name: "many matches", args: map[string]any{"old_string": "two", "new_string": "2"},
			want: `old_string occurs 2 times in "f.txt"; include more surrounding text`, wantErr: true, after: text},
		{name: "many matches, replace_all", args: map[string]any{"old_string": "two", "new_string": "2", "replace_all": true},
			want: "replaced 2 occurrences in f.txt", after: "one 2\n2 three\nfour\n"},
		{name: "unique thanks to context", args: map[string]any{"old_string": "one two", "new_string": "one 2"},
			want: "replaced 1 occurrence in f.txt", after: "one 2\ntwo three\nfour\n"},
		{name: "empty old_string", args: map[string]any{"old_string": "", "new_string": "x"},
			want: "old_string is empty", wantErr: true, after: text},
		{name: "same strings", args: map[string]any{"old_string": "four", "new_string": "four"},
			want: "the same", wantErr: true, after: text},
		{name: "new_string missing", args: map[string]any{"old_string": "four"},
			want: `"new_string" argument is required`, wantErr: true, after: text},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			path := filepath.Join(ws, "f.txt")
			writeFileT(t, path, text)
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
			s := newSet(t, Config{Workspace: ws})
			tt.args["path"] = "f.txt"
			got, err := call(t, s, "edit_file", tt.args)
			if tt.wantErr {
				wantErr(t, err, tt.want)
			} else if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
			if c := readFileT(t, path); c != tt.after {
				t.Errorf("file = %q, want %q", c, tt.after)
			}
			if fi, err := os.Stat(path); err == nil && runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
				t.Errorf("mode = %v, want 0600 kept", fi.Mode().Perm())
			}
		})
	}

	s := newSet(t, Config{Workspace: workspaceFrom(t)})
	_, err := call(t, s, "edit_file", map[string]any{"path": "nope.txt", "old_string": "a", "new_string": "b"})
	wantErr(t, err, `"nope.txt" does not exist`)
}

// TestConfinement drives every file tool at paths that lead out of the workspace, by
// spelling and by symbolic links, and checks each is refused and nothing outside changes.
func TestConfinement(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	out := filepath.Join(base, "out")
	secret := filepath.Join(out, "secret.txt")
	writeFileT(t, secret, "secret TODO\n")
	writeFileT(t, filepath.Join(ws, "a", "inside.txt"), "inside\n")
	links := map[string]string{
		"link-abs":  secret,                                   // absolute link to a file outside
		"link-rel":  filepath.Join("..", "out", "secret.txt"), // relative link climbing out
		"link-dir":  out,                                      // a directory outside
		"a/link-up": filepath.Join("..", "..", "out"),         // a nested link climbing out
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Skipf("cannot create symbolic links here: %v", err)
		}
	}
	s := newSet(t, Config{Workspace: ws})

	tests := []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "../out/secret.txt"}},
		{"read_file", map[string]any{"path": "a/../../out/secret.txt"}},
		{"read_file", map[string]any{"path": secret}},
		{"read_file", map[string]any{"path": "link-abs"}},
		{"read_file", map[string]any{"path": "link-rel"}},
		{"read_file", map[string]any{"path": "link-dir/secret.txt"}},
		{"read_file", map[string]any{"path": "a/link-up/secret.txt"}},
		{"list_dir", map[string]any{"path": ".."}},
		{"list_dir", map[string]any{"path": out}},
		{"list_dir", map[string]any{"path": "link-dir"}},
		{"list_dir", map[string]any{"path": "a/link-up"}},
		{"search_files", map[string]any{"pattern": "secret", "path": "../out"}},
		{"search_files", map[string]any{"pattern": "secret", "path": "link-dir"}},
		{"search_files", map[string]any{"pattern": "secret", "path": "link-abs"}},
		{"write_file", map[string]any{"path": "../out/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": "a/../../out/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": filepath.Join(out, "new.txt"), "content": "x"}},
		{"write_file", map[string]any{"path": "link-abs", "content": "overwritten"}},
		{"write_file", map[string]any{"path": "link-rel", "content": "overwritten"}},
		{"write_file", map[string]any{"path": "link-dir/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": "link-dir/deeper/new.txt", "content": "x"}},
		{"edit_file", map[string]any{"path": "link-abs", "old_string": "secret", "new_string": "public"}},
		{"edit_file", map[string]any{"path": "../out/secret.txt", "old_string": "secret", "new_string": "public"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.tool, tt.args["path"]), func(t *testing.T) {
			got, err := call(t, s, tt.tool, tt.args)
			if err == nil {
				t.Fatalf("got %q, want a refusal", got)
			}
			wantErr(t, err, tt.tool+": path", "is outside the workspace "+ws)
		})
	}

	if c := readFileT(t, secret); c != "secret TODO\n" {
		t.Errorf("the file outside changed: %q", c)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the directory outside has %d entries, want only secret.txt", len(entries))
	}

	// Inside the workspace the links are shown for what they are, never followed out.
	if got, want := mustCall(t, s, "list_dir", nil),
		"a/\nlink-abs (symbolic link leading outside the workspace)\n"+
			"link-dir (symbolic link leading outside the workspace)\n"+
			"link-rel (symbolic link leading outside the workspace)"; got != want {
		t.Errorf("list_dir = %q, want %q", got, want)
	}
	if got, want := mustCall(t, s, "search_files", map[string]any{"pattern": "secret|inside"}), "a/inside.txt:1: inside"; got != want {
		t.Errorf("search_files = %q, want only the file inside (links are not followed)", got)
	}
	// ".." that stays inside is fine.
	if got := mustCall(t, s, "read_file", map[string]any{"path": "a/../a/inside.txt"}); got != "inside\n" {
		t.Errorf("read_file a/../a/inside.txt = %q", got)
	}
}

// TestSymlinkInside checks links that stay inside the workspace work as the files they
// point at.
func TestSymlinkInside(t *testing.T) {
	ws := workspaceFrom(t)
	if err := os.Symlink("notes.txt", filepath.Join(ws, "alias.txt")); err != nil {
		t.Skipf("cannot create symbolic links here: %v", err)
	}
	if err := os.Symlink("sub", filepath.Join(ws, "subalias")); err != nil {
		t.Fatal(err)
	}
	s := newSet(t, Config{Workspace: ws})
	if got := mustCall(t, s, "read_file", map[string]any{"path": "alias.txt", "limit": 1}); !strings.HasPrefix(got, "alpha\n") {
		t.Errorf("read through an inside link = %q", got)
	}
	if got, want := mustCall(t, s, "list_dir", nil), "alias.txt\nmain.go\nnotes.txt\nsub/\nsubalias/"; got != want {
		t.Errorf("list_dir = %q, want %q", got, want)
	}
	if got := mustCall(t, s, "list_dir", map[string]any{"path": "subalias"}); got != "deep.go\nreadme.md" {
		t.Errorf("list_dir subalias = %q", got)
	}
	mustCall(t, s, "write_file", map[string]any{"path": "subalias/new.txt", "content": "x"})
	if c := readFileT(t, filepath.Join(ws, "sub", "new.txt")); c != "x" {
		t.Errorf("write through an inside directory link: %q", c)
	}
}

// luft's own config and state dir are off limits to write_file and edit_file even inside
// the workspace, also through a symbolic link; reading them is not a change.
func TestProtectedPaths(t *testing.T) {
	ws := t.TempDir()
	for name, text := range map[string]string{"luft.toml": "[tools]\n", ".luft/luft.db": "db", "notes.txt": "a"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(".luft", filepath.Join(ws, "state")); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	s := newSet(t, Config{Workspace: ws, Protected: []string{filepath.Join(ws, ".luft"), filepath.Join(ws, "luft.toml")}})
	for _, tc := range []struct {
		tool string
		args any
	}{
		{"write_file", map[string]any{"path": "luft.toml", "content": "[tools]\napproval = \"allow\"\n"}},
		{"write_file", map[string]any{"path": ".luft/luft.db", "content": "x"}},
		{"write_file", map[string]any{"path": "state/new.txt", "content": "x"}},
		{"write_file", map[string]any{"path": filepath.Join(ws, "luft.toml"), "content": "x"}},
		{"edit_file", map[string]any{"path": "luft.toml", "old_string": "[tools]", "new_string": "[x]"}},
	} {
		if _, err := call(t, s, tc.tool, tc.args); err == nil || !strings.Contains(err.Error(), "luft's own config or state") {
			t.Errorf("%s %v: err = %v", tc.tool, tc.args, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "luft.toml")); string(b) != "[tools]\n" {
		t.Fatalf("luft.toml changed: %q", b)
	}
	if _, err := call(t, s, "write_file", map[string]any{"path": "notes.txt", "content": "b"}); err != nil {
		t.Fatalf("an ordinary file: %v", err)
	}
	if out, err := call(t, s, "read_file", map[string]any{"path": "luft.toml"}); err != nil || !strings.Contains(out, "[tools]") {
		t.Fatalf("reading the config: %q %v", out, err)
	}
}
