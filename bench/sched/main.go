// Command sched runs the admission-scheduler benchmarks of issue 4 (W1–W4) on a virtual
// clock: agent runs against luft's fake engine (internal/testkit), with luft's decision
// core in front of it beside the baselines (a FIFO gate, no scheduler with client-side
// retries like the OpenAI SDKs, round-robin routing), metrics from the engine's
// ground-truth log. It prints one side-by-side table per workload with the ratios the
// issue's targets are phrased in, and can write every figure as JSON.
//
//	go run ./bench/sched [-w W1,W2,W3,W4] [-json out.json] [-fast]
//
// Everything is deterministic except the decision cost, the wall time of each call into
// the decision core on this machine, held to its target as the median of 5 runs.
//
// W1 and W2's headline figures are luft as shipped, not this command's: the same
// workloads run through Lua workflows, runtime.Service and the Executor, with the
// product's keys, on the virtual clock of a testing/synctest bubble, which only a test
// can open. Their tables and targets (the median of 5 runs, with the spread, and the
// issue's targets luft does not meet yet marked NOT MET) print with
//
//	go test -run ThroughRuntime -v ./bench/sched/...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/bench/sched/internal/schedbench"
)

func main() {
	ws := flag.String("w", "W1,W2,W3,W4", "workloads to run, comma-separated")
	out := flag.String("json", "", "write every figure to this JSON file")
	fast := flag.Bool("fast", false, "run the fast variants (the ones the tests assert)")
	flag.Parse()

	size := schedbench.Full
	if *fast {
		size = schedbench.Fast
	}
	var names []string
	for _, n := range strings.Split(*ws, ",") {
		n = strings.ToUpper(strings.TrimSpace(n))
		switch n {
		case "W1", "W2", "W3", "W4":
			names = append(names, n)
		case "":
		default:
			fmt.Fprintf(os.Stderr, "unknown workload %q (want W1, W2, W3, W4)\n", n)
			os.Exit(2)
		}
	}
	machine.Print(os.Stdout)
	var reports []*schedbench.Report
	failed := 0
	for _, n := range names {
		r := schedbench.RunAll([]string{n}, size)[0]
		r.Print(os.Stdout)
		for _, c := range r.Checks {
			if !c.Pass {
				failed++
			}
		}
		reports = append(reports, r)
	}
	fmt.Printf("%d target(s) not met\n", failed)
	if *out != "" {
		b, err := json.MarshalIndent(map[string]any{"size": size.String(), "reports": reports}, "", "  ")
		if err == nil {
			err = os.WriteFile(*out, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
