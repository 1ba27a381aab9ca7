package main

import (
	"os"

	"github.com/luft-run/luft/adapters/tools/sandbox"
)

func main() {
	// luft holds API keys in its environment from its start: no other process of the
	// user (a command an agent runs, a coding agent's own tool) may read them from /proc.
	sandbox.Harden()
	os.Exit(execute(osEnv(), os.Args[1:]))
}
