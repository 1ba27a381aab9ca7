package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder is a testing.TB that notes how a test ended instead of ending the real one.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Skip(args ...any)          { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatal(args ...any)         { r.failed = fmt.Sprint(args...) }
func (r *recorder) Skipf(f string, a ...any)  { r.skipped = fmt.Sprintf(f, a...) }
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...) }

// A missing tool skips the test naming the install step; LUFT_TEST_REQUIRE_TOOLS makes it
// a failure; a present one (program or file) is returned by path.
func TestNeedTool(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "grammar.wasm")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "luft-test-tool")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	for _, tc := range []struct {
		require, what, install string
		want, skip, fail       string
	}{
		{what: "luft-test-tool", want: prog},
		{what: file, want: file},
		{what: "luft-no-such-tool", install: "apt-get install luft-no-such-tool",
			skip: "luft-no-such-tool is not installed (apt-get install luft-no-such-tool); skipped (set LUFT_TEST_REQUIRE_TOOLS=1"},
		{what: filepath.Join(dir, "node_modules", "x"), install: "run `npm ci` in " + dir,
			skip: "node_modules/x is missing (run `npm ci` in " + dir + "); skipped"},
		{require: "0", what: "luft-no-such-tool", install: "apt-get install x", skip: "is not installed (apt-get install x); skipped"},
		{require: "1", what: "luft-no-such-tool", install: "apt-get install x",
			fail: "luft-no-such-tool is not installed (apt-get install x); LUFT_TEST_REQUIRE_TOOLS=1 makes this a failure"},
		{require: "1", what: "luft-test-tool", want: prog},
	} {
		t.Run(tc.what+"/"+tc.require, func(t *testing.T) {
			t.Setenv(RequireToolsEnv, tc.require)
			r := &recorder{TB: t}
			got := NeedTool(r, tc.what, tc.install)
			if got != tc.want || !contains(r.skipped, tc.skip) || !contains(r.failed, tc.fail) {
				t.Errorf("NeedTool(%q) = %q, skipped %q, failed %q; want %q, skip with %q, fail with %q",
					tc.what, got, r.skipped, r.failed, tc.want, tc.skip, tc.fail)
			}
		})
	}
}

// contains is strings.Contains, but an empty want asks for an empty s.
func contains(s, want string) bool {
	if want == "" {
		return s == ""
	}
	return strings.Contains(s, want)
}
