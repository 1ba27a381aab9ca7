package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGuardRefusals: writes that would change what a later command or run does —
// version control's folders and luft's config anywhere in the workspace, files with a
// second hard link, links into those — are refused by write_file and edit_file alike,
// and the files stay as they were.
func TestGuardRefusals(t *testing.T) {
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	files := map[string]string{
		"ws/.git/config":           "[core]\n",
		"ws/sub/.git/HEAD":         "ref: refs/heads/main\n",
		"ws/.hg/hgrc":              "[hooks]\n",
		"ws/deep/luft.toml":        "[tools]\n",
		"ws/.luft/luft.db":         "db",
		"ws/notes.txt":             "notes",
		"outside/victim.txt":       "victim [tools]",
		"ws/vendor/.svn/entries":   "1",
		"ws/pkg/.GIT/config":       "[core]\n",
		"ws/linked-to-outside.txt": "",
	}
	for name, text := range files {
		if name != "ws/linked-to-outside.txt" {
			writeFileT(t, filepath.Join(base, name), text)
		}
	}
	if err := os.Link(filepath.Join(outside, "victim.txt"), filepath.Join(ws, "linked-to-outside.txt")); err != nil {
		t.Skip("no hard links here:", err)
	}
	if err := os.Link(filepath.Join(ws, ".luft", "luft.db"), filepath.Join(ws, "db-link")); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"gitdir": ".git", "hook": ".git/hooks/pre-commit", "cfg": "deep/luft.toml"} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Skip("no symbolic links here:", err)
		}
	}
	s := newSet(t, Config{Workspace: ws})

	tests := []struct {
		tool string
		args map[string]any
		want []string
	}{
		{"write_file", map[string]any{"path": ".git/config", "content": "[core]\n\tfsmonitor = touch pwned\n"}, []string{".git/config is .git: version control's own folder"}},
		{"write_file", map[string]any{"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}, []string{".git"}},
		{"write_file", map[string]any{"path": "sub/.git/HEAD", "content": "x"}, []string{".git"}},
		{"write_file", map[string]any{"path": ".hg/hgrc", "content": "x"}, []string{".hg"}},
		{"write_file", map[string]any{"path": "vendor/.svn/entries", "content": "x"}, []string{".svn"}},
		{"write_file", map[string]any{"path": "pkg/.GIT/config", "content": "x"}, []string{".git"}},
		{"write_file", map[string]any{"path": ".git", "content": "gitdir: /elsewhere\n"}, []string{".git"}},
		{"write_file", map[string]any{"path": "luft.toml", "content": "default_backend = \"evil\"\n"}, []string{"luft's own config or state"}},
		{"write_file", map[string]any{"path": "deep/luft.toml", "content": "x"}, []string{"luft's own config or state"}},
		{"write_file", map[string]any{"path": ".luft/luft.db", "content": "x"}, []string{"luft's own"}},
		{"write_file", map[string]any{"path": "gitdir/config", "content": "x"}, []string{"gitdir/config leads to .git/config"}},
		{"write_file", map[string]any{"path": "hook", "content": "#!/bin/sh\n"}, []string{"hook is a symbolic link to a file that does not exist"}},
		{"write_file", map[string]any{"path": "cfg", "content": "x"}, []string{"cfg leads to deep/luft.toml"}},
		{"write_file", map[string]any{"path": "linked-to-outside.txt", "content": "x"}, []string{"2 hard links", "not written"}},
		{"write_file", map[string]any{"path": "db-link", "content": "x"}, []string{"2 hard links"}},
		{"edit_file", map[string]any{"path": ".git/config", "old_string": "[core]", "new_string": "[core]\n\tfsmonitor = x"}, []string{".git"}},
		{"edit_file", map[string]any{"path": "linked-to-outside.txt", "old_string": "[tools]", "new_string": "[x]"}, []string{"2 hard links"}},
		{"edit_file", map[string]any{"path": "cfg", "old_string": "[tools]", "new_string": "[x]"}, []string{"luft's own"}},
	}
	for _, tt := range tests {
		_, err := call(t, s, tt.tool, tt.args)
		if err == nil {
			t.Errorf("%s %v: succeeded", tt.tool, tt.args)
			continue
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s %v: error %q lacks %q", tt.tool, tt.args, err, want)
			}
		}
	}
	for name, text := range files {
		if name == "ws/linked-to-outside.txt" {
			text = files["outside/victim.txt"]
		}
		if got := readFileT(t, filepath.Join(base, name)); got != text {
			t.Errorf("%s changed: %q", name, got)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git", "hooks")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".git/hooks was created (%v)", err)
	}

	// Reading them is fine, and ordinary files are written as before.
	if out := mustCall(t, s, "read_file", map[string]any{"path": "linked-to-outside.txt"}); out != "victim [tools]" {
		t.Errorf("reading a linked file: %q", out)
	}
	if out := mustCall(t, s, "read_file", map[string]any{"path": ".git/config"}); out != "[core]\n" {
		t.Errorf("reading .git/config: %q", out)
	}
	mustCall(t, s, "edit_file", map[string]any{"path": "notes.txt", "old_string": "notes", "new_string": "more notes"})
	if got := readFileT(t, filepath.Join(ws, "notes.txt")); got != "more notes" {
		t.Errorf("notes.txt = %q", got)
	}
	mustCall(t, s, "write_file", map[string]any{"path": "new/dir/file.txt", "content": "x"})
	mustCall(t, s, "write_file", map[string]any{"path": "gitignore-like/.gitignore", "content": "x"})
}

// TestGuardDanglingLink: a link to a missing file is not followed to create its target.
func TestGuardDanglingLink(t *testing.T) {
	ws := t.TempDir()
	if err := os.Symlink("made-by-link.txt", filepath.Join(ws, "dangling")); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	s := newSet(t, Config{Workspace: ws})
	_, err := call(t, s, "write_file", map[string]any{"path": "dangling", "content": "x"})
	wantErr(t, err, "symbolic link to a file that does not exist")
	if _, err := os.Stat(filepath.Join(ws, "made-by-link.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link's target was created (%v)", err)
	}
}

// TestGuardOpenedPath: what is checked after opening is the file opened, so a link that
// appears between the name check and the open is still caught.
func TestGuardOpenedPath(t *testing.T) {
	ws := t.TempDir()
	writeFileT(t, filepath.Join(ws, ".git", "config"), "[core]\n")
	writeFileT(t, filepath.Join(ws, "plain.txt"), "x")
	g := NewGuard(ws, nil)
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// Swap plain.txt for a link to .git/config after Check would have passed.
	if err := g.Check("plain.txt"); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(ws, "plain.txt"))
	if err := os.Symlink(".git/config", filepath.Join(ws, "plain.txt")); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	f, err := root.OpenFile("plain.txt", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	real, ok := openedPath(f)
	if !ok {
		t.Skip("this system cannot tell an open file's path")
	}
	if err := g.checkReal(real, "plain.txt"); !errors.Is(err, ErrProtected) {
		t.Fatalf("the opened file %s was not refused: %v", real, err)
	}
}

// TestGuardWriteFileMakesNoFolders: a refused write leaves no folder behind it.
func TestGuardWriteFileMakesNoFolders(t *testing.T) {
	ws := t.TempDir()
	writeFileT(t, filepath.Join(ws, ".git", "config"), "[core]\n")
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	g := NewGuard(ws, nil)
	if _, err := g.WriteFile(root, ".git/hooks/new/pre-commit", []byte("x")); !errors.Is(err, ErrProtected) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf(".git/hooks was made (%v)", err)
	}
	if existed, err := g.WriteFile(root, "a/b/c.txt", []byte("x")); err != nil || existed {
		t.Fatalf("an ordinary new file: existed %t, %v", existed, err)
	}
}

// TestGuardPathVariants: a protected or outside file named another way — through "..",
// "./", an absolute path, other letter case, a linked folder — is refused like its plain
// name, and nothing is written or made outside the workspace.
func TestGuardPathVariants(t *testing.T) {
	base := t.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	writeFileT(t, filepath.Join(ws, ".git", "config"), "[core]\n")
	writeFileT(t, filepath.Join(ws, ".luft", "luft.db"), "db")
	writeFileT(t, filepath.Join(ws, "sub", "keep.txt"), "k")
	writeFileT(t, filepath.Join(outside, "victim.txt"), "victim")
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	s := newSet(t, Config{Workspace: ws})
	for _, path := range []string{
		"sub/../.git/config", "./.git/config", ".git/./config", "../ws/.git/config",
		filepath.Join(ws, ".git", "config"), ".Git/config", ".GIT/hooks/pre-commit",
		"LUFT.TOML", "sub/Luft.Toml", ".Luft/luft.db", "sub/../.LUFT/luft.db",
		"../outside/victim.txt", "sub/../../outside/victim.txt", filepath.Join(outside, "victim.txt"),
		"out/victim.txt", "out/new.txt", "out/../ws/.git/config", "/etc/luft-guard-test",
	} {
		_, err := call(t, s, "write_file", map[string]any{"path": path, "content": "pwned"})
		if err == nil || !strings.Contains(err.Error(), "may not change") && !strings.Contains(err.Error(), "outside the workspace") {
			t.Errorf("write_file %q: %v, want a refusal", path, err)
		}
	}
	for name, text := range map[string]string{"ws/.git/config": "[core]\n", "ws/.luft/luft.db": "db", "outside/victim.txt": "victim"} {
		if got := readFileT(t, filepath.Join(base, name)); got != text {
			t.Errorf("%s changed: %q", name, got)
		}
	}
	for _, p := range []string{filepath.Join(outside, "new.txt"), filepath.Join(ws, ".git", "hooks"), filepath.Join(ws, "LUFT.TOML"), "/etc/luft-guard-test"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was made (%v)", p, err)
		}
	}
}

// A path longer than PATH_MAX is refused by the guard and by the file tools' path check
// before anything resolves it part by part.
func TestHugePathsRefused(t *testing.T) {
	ws := t.TempDir()
	huge := strings.Repeat("d/", 512<<10) + "f"
	if err := NewGuard(ws, nil).Check(huge); err == nil || !strings.Contains(err.Error(), "more than the 4096") {
		t.Fatalf("Guard.Check: %v", err)
	}
	w := workspace{dir: ws, real: ws}
	if _, err := w.rel("write_file", huge); err == nil || !strings.Contains(err.Error(), "write_file: the path is") {
		t.Fatalf("rel: %v", err)
	}
}
