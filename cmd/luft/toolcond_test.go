package main

import (
	"strings"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
)

// [tool:NAME] is false for a missing tool (the script's skip line then names the install
// step), and an error under LUFT_TEST_REQUIRE_TOOLS, so CI cannot skip it quietly.
func TestToolCondition(t *testing.T) {
	for _, tc := range []struct {
		require, cond string
		want          bool
		err           string
	}{
		{cond: "tool:sh", want: true},
		{cond: "tool:luft-no-such-tool"},
		{cond: "tool:/no/such/file"},
		{require: "1", cond: "tool:sh", want: true},
		{require: "1", cond: "tool:luft-no-such-tool", err: "luft-no-such-tool is not installed"},
		{require: "1", cond: "tool:/no/such/file", err: "/no/such/file is missing"},
		{cond: "landlock", err: `unknown condition "landlock"`},
	} {
		t.Setenv(testkit.RequireToolsEnv, tc.require)
		got, err := toolCondition(tc.cond)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s=%s [%s] = %v, %v; want %v, error with %q", testkit.RequireToolsEnv, tc.require, tc.cond, got, err, tc.want, tc.err)
		}
	}
}
