package testkit

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// NodeDir is internal/testkit/node: the real JavaScript clients the tests drive luft with,
// pinned by its package-lock.json (`npm ci` there installs them; .ci/run does).
func NodeDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "node")
}

// NodeFile is a file of NodeDir's node_modules (e.g. ".bin/codex"). A test that needs it
// fails, naming the command that installs it, when node_modules is missing; under -short
// it is skipped instead.
func NodeFile(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(NodeDir(), "node_modules", filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		if testing.Short() {
			t.Skipf("%s is not installed (-short): run npm ci in %s", rel, NodeDir())
		}
		t.Fatalf("%s is not installed: run `npm ci` in %s (it needs node and npm; .ci/run does this)", rel, NodeDir())
	}
	return p
}
