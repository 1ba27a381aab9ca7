// Command fanout measures luft's own overhead: one parallel() fan-out of N mock agents
// with zero latency, through the real runtime (VM, scheduler gate, durable journal and
// events in SQLite). Each N runs in a fresh child process and state dir, so its peak RSS
// is its own.
//
// Each size runs -repeat times (at least 5 for a figure worth quoting); the table shows the
// median wall time with the spread (min–max) and the peak RSS over all runs.
//
//	go run ./bench/fanout [-n 1000,10000,100000] [-concurrency 8] [-repeat 5] [-dir /dev/shm]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

const script = `function main()
  local items = {}
  for i = 1, args.n do items[i] = i end
  local r = parallel(items, function(i) return agent{prompt = "item " .. i}.tokens end)
  local sum = 0
  for _, t in ipairs(r) do sum = sum + t end
  report({calls = #r, tokens = sum})
end`

func main() {
	ns := flag.String("n", "1000,10000,100000", "fan-out sizes")
	conc := flag.Int("concurrency", 8, "scheduler slots")
	repeat := flag.Int("repeat", 5, "runs per size (the median wall time and the spread are shown)")
	child := flag.Int("child", 0, "internal: run one fan-out of this size and print its wall time")
	cpuprofile := flag.String("cpuprofile", "", "with -child: write a CPU profile of the fan-out to this file")
	dir := flag.String("dir", "", "parent folder of the state dirs (default: the system temp dir)")
	flag.Parse()
	if *child > 0 {
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer pprof.StopCPUProfile()
		}
		d, err := fanout(*child, *conc, *dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(d.Nanoseconds())
		return
	}
	machine.Print(os.Stdout)
	fmt.Printf("luft fan-out: one parallel() of N mock agents, zero latency, %d scheduler slots per lane, durable journal and events in SQLite, median of %d runs\n\n", *conc, *repeat)
	fmt.Printf("%10s  %12s  %21s  %14s  %12s\n", "N", "median wall", "spread (min–max)", "calls/s", "peak RSS")
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -n:", err)
			os.Exit(2)
		}
		var walls []time.Duration
		rss := int64(0)
		for range max(*repeat, 1) {
			d, r, err := runChild(n, *conc, *dir)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			walls = append(walls, d)
			rss = max(rss, r)
		}
		slices.Sort(walls)
		med := walls[len(walls)/2]
		if len(walls)%2 == 0 {
			med = (walls[len(walls)/2-1] + walls[len(walls)/2]) / 2
		}
		spread := fmt.Sprintf("%s–%s", walls[0].Round(time.Millisecond), walls[len(walls)-1].Round(time.Millisecond))
		fmt.Printf("%10d  %12s  %21s  %14.0f  %9.1f MB\n", n, med.Round(time.Millisecond), spread, float64(n)/med.Seconds(), float64(rss)/1024)
	}
}

// runChild runs one fan-out in a new process and returns its wall time and peak RSS (KiB).
func runChild(n, conc int, dir string) (time.Duration, int64, error) {
	cmd := exec.Command(os.Args[0], "-child", strconv.Itoa(n), "-concurrency", strconv.Itoa(conc), "-dir", dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("fan-out of %d: %w", n, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("fan-out of %d: bad child output %q", n, out)
	}
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss
	}
	return time.Duration(ns), rss, nil
}

func fanout(n, conc int, stateDir string) (time.Duration, error) {
	dir, err := os.MkdirTemp(stateDir, "luft-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	eng, err := runtime.New(runtime.Options{
		Store:     st,
		Backends:  adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{})),
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: conc}}, nil),
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	run, err := eng.Start(context.Background(), runtime.Spec{
		Path: "fanout.lua", Source: []byte(script), Args: map[string]any{"n": float64(n)},
		Concurrency: conc, Limits: lua.Limits{MaxAgentCalls: n},
	})
	if err != nil {
		return 0, err
	}
	res := run.Wait()
	d := time.Since(start)
	if res.Status != runtime.StatusCompleted {
		return 0, fmt.Errorf("fan-out of %d: %s: %v", n, res.Status, res.Err)
	}
	if res.Agents.OK != n {
		return 0, fmt.Errorf("fan-out of %d: %d calls succeeded", n, res.Agents.OK)
	}
	return d, nil
}
