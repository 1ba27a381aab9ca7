package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -c/--confirm on a terminal: the script is shown and the answer decides.
func TestConfirmAsks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.lua")
	if err := os.WriteFile(path, []byte("function main() end"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		answer string
		yes    bool
		ok     bool
	}{
		{answer: "y\n", ok: true},
		{answer: "YES\n", ok: true},
		{answer: "n\n"},
		{answer: "\n"},
		{answer: ""}, // end of input
		{yes: true, ok: true},
	}
	for _, tc := range cases {
		var errb strings.Builder
		e := &env{stderr: &errb, stdinTTY: strings.NewReader(tc.answer)}
		err := confirm(e, &runFlags{workflow: path, yes: tc.yes})
		if (err == nil) != tc.ok {
			t.Errorf("answer %q yes=%t: err %v", tc.answer, tc.yes, err)
		}
		if !tc.ok && (exitCode(err) != exitUsage || !strings.Contains(err.Error(), "not confirmed: "+path+" was not run")) {
			t.Errorf("answer %q: %v (exit %d)", tc.answer, err, exitCode(err))
		}
		if !strings.Contains(errb.String(), "function main() end\n") || !strings.Contains(errb.String(), "Run this workflow? [y/N]") {
			t.Errorf("answer %q: the script and the question were not shown:\n%s", tc.answer, errb.String())
		}
	}
}
