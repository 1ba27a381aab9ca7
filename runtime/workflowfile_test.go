//go:build unix

package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadWorkflowFileStaysInside(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "proj")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "ok.lua"), "function main() end")
	write(filepath.Join(dir, "sub", "inner.lua"), "inner")
	write(filepath.Join(root, "outside.lua"), "SECRET")
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	link("/etc/passwd", "passwd.lua")
	link("../outside.lua", "up.lua")
	link("..", "parent")
	link("sub/inner.lua", "alias.lua")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.lua"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "folder.lua"), 0o755); err != nil {
		t.Fatal(err)
	}
	big, err := os.Create(filepath.Join(dir, "big.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if err := big.Truncate(maxWorkflowFile + 1); err != nil {
		t.Fatal(err)
	}
	big.Close()

	for _, tc := range []struct {
		name, want, err string
	}{
		{name: "ok.lua", want: "function main() end"},
		{name: "alias.lua", want: "inner"}, // a symlink that stays inside is followed
		{name: "sub/inner.lua", want: "inner"},
		{name: "passwd.lua", err: "leads outside the calling script's folder"},
		{name: "up.lua", err: "leads outside the calling script's folder"},
		{name: "parent/outside.lua", err: "leads outside the calling script's folder"},
		{name: "fifo.lua", err: "not a regular file"},
		{name: "folder.lua", err: "not a regular file"},
		{name: "big.lua", err: "more than the limit of 16777216 bytes"},
		{name: "missing.lua", err: "no such file or directory"},
	} {
		b, err := readWorkflowFile(dir, tc.name)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %q, %v; want an error with %q", tc.name, b, err, tc.err)
			}
			if err != nil && (strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "root:")) {
				t.Errorf("%s: the error quotes the file: %v", tc.name, err)
			}
			continue
		}
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, b, err, tc.want)
		}
	}
	// A missing file stays recognisable, so a resumed run can fall back to its pinned copy.
	if _, err := readWorkflowFile(dir, "missing.lua"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v, want fs.ErrNotExist", err)
	}
}
