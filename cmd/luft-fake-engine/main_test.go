package main

import (
	"io"
	"strings"
	"testing"
)

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "sliding"},
		{"--listen", "0.0.0.0:0"},
		{"--no-such-flag"},
	} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("%s: want an error", strings.Join(args, " "))
		}
	}
}
