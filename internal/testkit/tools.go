package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireToolsEnv names the variable that turns a missing outside tool from a skip into a
// failure. `go test ./...` with Go alone passes, skipping every test that needs a program
// Go does not bring (node clients, chromium, shellcheck, zsh, ...); .ci/run sets
// LUFT_TEST_REQUIRE_TOOLS=1 after installing them all, so in CI none of those tests can
// quietly not run.
const RequireToolsEnv = "LUFT_TEST_REQUIRE_TOOLS"

// ToolsRequired reports whether RequireToolsEnv is set to anything but "" or "0".
func ToolsRequired() bool {
	v := os.Getenv(RequireToolsEnv)
	return v != "" && v != "0"
}

// FindTool looks for what: a program on PATH when it is a bare name, else a file (an
// absolute path, or one relative to the test's directory). It returns the program's path
// or the file's absolute path, or an error saying what is missing and how to install it.
func FindTool(what, install string) (string, error) {
	if filepath.Base(what) == what {
		p, err := exec.LookPath(what)
		if err != nil {
			return "", fmt.Errorf("%s is not installed (%s)", what, install)
		}
		return p, nil
	}
	p, err := filepath.Abs(what)
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		return "", fmt.Errorf("%s is missing (%s)", what, install)
	}
	return p, nil
}

// MissingTool is the message a test that lacks an outside tool ends with: a skip, or under
// LUFT_TEST_REQUIRE_TOOLS a failure; both name the install step.
func MissingTool(err error) (msg string, fail bool) {
	if ToolsRequired() {
		return fmt.Sprintf("%v; %s=1 makes this a failure (.ci/run installs every tool)", err, RequireToolsEnv), true
	}
	return fmt.Sprintf("%v; skipped (set %s=1 to make this a failure, as .ci/run does)", err, RequireToolsEnv), false
}

// NeedTool returns what's path (see FindTool) for a test that cannot run without it. When it
// is missing the test is skipped at once, naming install (e.g. "apt-get install shellcheck"),
// or fails under LUFT_TEST_REQUIRE_TOOLS. Call it before any costly setup, so a missing tool
// costs nothing.
func NeedTool(t testing.TB, what, install string) string {
	t.Helper()
	p, err := FindTool(what, install)
	if err != nil {
		if msg, fail := MissingTool(err); fail {
			t.Fatal(msg)
		} else {
			t.Skip(msg)
		}
		return ""
	}
	return p
}
