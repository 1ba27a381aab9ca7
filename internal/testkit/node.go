package testkit

import (
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
// is skipped, naming the command that installs it, when node_modules is missing (see
// NeedTool: under LUFT_TEST_REQUIRE_TOOLS it fails instead).
func NodeFile(t testing.TB, rel string) string {
	t.Helper()
	return NeedTool(t, filepath.Join(NodeDir(), "node_modules", filepath.FromSlash(rel)),
		"run `npm ci` in "+NodeDir()+"; it needs node and npm: apt-get install nodejs npm")
}

// Node is the node program the JavaScript clients run on (see NeedTool).
func Node(t testing.TB) string {
	t.Helper()
	return NeedTool(t, "node", "apt-get install nodejs")
}
