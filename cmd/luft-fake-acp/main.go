// Command luft-fake-acp serves the test kit's fake ACP coding agent (internal/testkit/
// acpfake) on stdin and stdout, the way a real agent such as claude-code-acp is run. The
// prompt text drives what it does; see the acpfake package doc.
//
// Environment: LUFT_FAKE_ACP_LOG (the ground-truth JSON-lines log to append to),
// LUFT_FAKE_ACP_STATE (a directory for sessions; enables session/load) and
// LUFT_FAKE_ACP_MODELS (comma-separated models offered, or "none").
//
// It exits 0 when the client closes stdin, 3 when a prompt said CRASH.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/luft-run/luft/internal/testkit/acpfake"
)

func main() {
	opts := acpfake.OptionsFromEnv(os.Getenv)
	opts.Stderr = os.Stderr
	err := acpfake.Serve(context.Background(), os.Stdin, os.Stdout, opts)
	switch {
	case errors.Is(err, acpfake.ErrCrash):
		os.Exit(3)
	case err != nil:
		fmt.Fprintln(os.Stderr, "luft-fake-acp:", err)
		os.Exit(2)
	}
}
