//go:build unix

package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The start lock is held from LockStart until its release, and a missing state dir is an
// error that names the file.
func TestLockStart(t *testing.T) {
	dir := t.TempDir()
	release, err := LockStart(dir)
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.Open(filepath.Join(dir, StartLockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if held, err := lockFile(other); err != nil || !held {
		t.Fatalf("while LockStart holds it, another lock: held %v, %v", held, err)
	}
	release()
	if held, err := lockFile(other); err != nil || held {
		t.Fatalf("after the release, another lock: held %v, %v", held, err)
	}
	if _, err := LockStart(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), StartLockFile) {
		t.Errorf("a missing state dir: %v", err)
	}
}
