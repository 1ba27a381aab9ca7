package tools

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSearchFiles(t *testing.T) {
	ws := workspaceFrom(t)
	writeFileT(t, filepath.Join(ws, ".git", "config"), "TODO in git\n")
	writeFileT(t, filepath.Join(ws, "blob.bin"), "TODO\x00binary\n")
	writeFileT(t, filepath.Join(ws, "cmd", "luft", "main.go"), "package main\n// TODO: cmd\n")
	writeFileT(t, filepath.Join(ws, "crlf.txt"), "TODO windows\r\n")
	s := newSet(t, Config{Workspace: ws})

	tests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"whole workspace", map[string]any{"pattern": "TODO"},
			"cmd/luft/main.go:2: // TODO: cmd\ncrlf.txt:1: TODO windows\nmain.go:5: // TODO: greet by name\n" +
				"sub/deep.go:3: // TODO: deep thought\nsub/readme.md:3: TODO in markdown"},
		{"glob by name", map[string]any{"pattern": "TODO", "glob": "*.md"}, "sub/readme.md:3: TODO in markdown"},
		{"glob with **", map[string]any{"pattern": "TODO", "glob": "cmd/**/*.go"}, "cmd/luft/main.go:2: // TODO: cmd"},
		{"glob ** at the start", map[string]any{"pattern": "TODO", "glob": "**/deep.go"}, "sub/deep.go:3: // TODO: deep thought"},
		{"under a path", map[string]any{"pattern": "TODO", "path": "sub"},
			"sub/deep.go:3: // TODO: deep thought\nsub/readme.md:3: TODO in markdown"},
		{"a single file", map[string]any{"pattern": "a", "path": "notes.txt"},
			"notes.txt:1: alpha\nnotes.txt:2: beta\nnotes.txt:3: gamma\nnotes.txt:4: delta"},
		{"regexp", map[string]any{"pattern": `^(be|de)\w+$`, "path": "notes.txt"}, "notes.txt:2: beta\nnotes.txt:4: delta"},
		{"case-insensitive flag", map[string]any{"pattern": "(?i)answer"}, "sub/deep.go:4: const Answer = 42"},
		{"no matches", map[string]any{"pattern": "zebra"}, `no matches for "zebra" in the workspace`},
		{"no matches with glob", map[string]any{"pattern": "zebra", "path": "sub", "glob": "*.go"},
			`no matches for "zebra" in sub (files matching "*.go")`},
		{"explicit .git is searched", map[string]any{"pattern": "TODO", "path": ".git"}, ".git/config:1: TODO in git"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCall(t, s, "search_files", tt.args); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}

	errTests := []struct {
		name string
		args map[string]any
		want string
	}{
		{"bad regexp", map[string]any{"pattern": "func("}, `pattern "func(" is not a valid regular expression`},
		{"bad glob", map[string]any{"pattern": "x", "glob": "[a"}, `glob "[a" is malformed`},
		{"missing path", map[string]any{"pattern": "x", "path": "nope"}, `"nope" does not exist`},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := call(t, s, "search_files", tt.args)
			wantErr(t, err, tt.want)
		})
	}
}

func TestSearchFilesCaps(t *testing.T) {
	ws := t.TempDir()
	writeFileT(t, filepath.Join(ws, "many.txt"), strings.Repeat("hit\n", 10))
	writeFileT(t, filepath.Join(ws, "wide.txt"), "hit "+strings.Repeat("x", 100)+"\n")
	s := newSet(t, Config{Workspace: ws})

	s.env.lim.matches = 3
	got := mustCall(t, s, "search_files", map[string]any{"pattern": "hit", "path": "many.txt"})
	if want := "many.txt:1: hit\nmany.txt:2: hit\nmany.txt:3: hit\n[stopped after 3 matches"; !strings.HasPrefix(got, want) {
		t.Errorf("capped matches:\n%s\nwant it to start\n%s", got, want)
	}
	// Exactly as many matches as the cap is not "stopped".
	s.env.lim.matches = 10
	if got := mustCall(t, s, "search_files", map[string]any{"pattern": "hit", "path": "many.txt"}); strings.Contains(got, "stopped") {
		t.Errorf("10 matches under a cap of 10 say they stopped:\n%s", got)
	}

	s.env.lim.matchLine = 10
	if got, want := mustCall(t, s, "search_files", map[string]any{"pattern": "hit", "path": "wide.txt"}), "wide.txt:1: hit xxxxxx …"; got != want {
		t.Errorf("long line: got %q, want %q", got, want)
	}

	s.env.lim.searchOutput = 40
	got = mustCall(t, s, "search_files", map[string]any{"pattern": "hit", "path": "many.txt"})
	if want := "many.txt:1: hit\nmany.txt:2: hit\n[stopped after 2 matches: the output cap of 40 bytes"; !strings.HasPrefix(got, want) {
		t.Errorf("output cap:\n%s\nwant it to start\n%s", got, want)
	}

	s.env.lim.searchFile = 10
	if got := mustCall(t, s, "search_files", map[string]any{"pattern": "hit"}); !strings.HasPrefix(got, "no matches") {
		t.Errorf("files over the size cap were searched: %q", got)
	}
}

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		glob, path string
		want       bool
	}{
		{"*.go", "a/b/c.go", true},
		{"*.go", "a/b/c.txt", false},
		{"a/*.go", "a/c.go", true},
		{"a/*.go", "a/b/c.go", false},
		{"a/**/*.go", "a/c.go", true},
		{"a/**/*.go", "a/b/c/d.go", true},
		{"**/*.go", "x.go", true},
		{"**", "a/b", true},
		{"a/**", "b/c", false},
	}
	for _, tt := range tests {
		if got := matchGlob(tt.glob, tt.path, filepath.Base(tt.path)); got != tt.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tt.glob, tt.path, got, tt.want)
		}
	}
}
