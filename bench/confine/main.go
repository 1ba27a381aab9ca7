// Command confine measures what confinement costs one run_command call: the time to
// start and finish `true` directly, through the sandbox with nothing to hide, and through
// the sandbox hiding luft's state dir and config inside the workspace (the default
// layout), as the median and spread of rounds of calls.
//
//	go run ./bench/confine [-rounds 7] [-calls 50]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/luft-run/luft/adapters/tools/sandbox"
	"github.com/luft-run/luft/bench/internal/machine"
)

func main() {
	rounds := flag.Int("rounds", 7, "rounds of calls; the table shows their median and spread")
	calls := flag.Int("calls", 50, "calls per round")
	flag.Parse()
	if err := run(*rounds, *calls); err != nil {
		fmt.Fprintln(os.Stderr, "confine:", err)
		os.Exit(1)
	}
}

func run(rounds, calls int) error {
	prog, err := exec.LookPath("true")
	if err != nil {
		return err
	}
	ws, err := os.MkdirTemp("", "luft-bench-confine-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	state := filepath.Join(ws, ".luft")
	cfg := filepath.Join(ws, "luft.toml")
	if err := os.Mkdir(state, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		return err
	}
	abi, lerr := sandbox.Status()
	machine.Print(os.Stdout)
	fmt.Printf("Landlock ABI %d (%v), user namespaces: %v, euid %d, %d calls × %d rounds\n\n", abi, lerr, sandbox.Namespaces(), os.Geteuid(), calls, rounds)
	variants := []struct {
		name string
		cmd  func() (*exec.Cmd, error)
	}{
		{"direct exec (no confinement)", func() (*exec.Cmd, error) { return exec.Command(prog), nil }},
		{"confined, nothing to hide", func() (*exec.Cmd, error) {
			return sandbox.Command(context.Background(), sandbox.Policy{Write: []string{ws}}, prog, []string{"true"})
		}},
		{"confined, state dir + config hidden", func() (*exec.Cmd, error) {
			return sandbox.Command(context.Background(), sandbox.Policy{Write: []string{ws}, Hide: []string{state, cfg}}, prog, []string{"true"})
		}},
	}
	fmt.Printf("| %-36s | %12s | %20s |\n|%s|%s|%s|\n", "per call", "median", "spread (min–max)", "-----", "-----", "-----")
	for _, v := range variants {
		var perCall []time.Duration
		for range rounds {
			start := time.Now()
			for range calls {
				cmd, err := v.cmd()
				if err != nil {
					return err
				}
				cmd.Env = []string{"PATH=/usr/bin:/bin"}
				out, err := cmd.CombinedOutput()
				sandbox.Done(cmd)
				if err != nil {
					return fmt.Errorf("%s: %v: %s", v.name, err, out)
				}
			}
			perCall = append(perCall, time.Since(start)/time.Duration(calls))
		}
		slices.Sort(perCall)
		fmt.Printf("| %-36s | %12s | %20s |\n", v.name, perCall[len(perCall)/2].Round(time.Microsecond),
			fmt.Sprintf("%s–%s", perCall[0].Round(time.Microsecond), perCall[len(perCall)-1].Round(time.Microsecond)))
	}
	return nil
}
