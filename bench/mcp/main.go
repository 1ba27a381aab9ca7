// Command mcp measures the MCP door as a client sees it: a daemon in this process (its
// real HTTP listener on loopback, the token and Host checks, the MCP server at /mcp, the
// runtime and scheduler) with the mock backend, and an mcp-go streamable HTTP client.
//
// Mode latency (the default), per iteration: workflow_execute of a one-agent workflow
// (the mock answers after -latency), then
//
//	a: workflow_status right after it: the time from sending workflow_execute to the
//	   first status showing the run running (target p99 ≤ 100 ms);
//	b: workflow_await sent while the run goes on: the time from the run's run_done event
//	   (its timestamp) to the await's answer arriving at the client (target p99 ≤ 50 ms).
//
// Each repeat runs -n iterations and takes p50 and p99 of each; the table shows every
// repeat, then the median and spread (min–max) over the repeats.
//
//	go run ./bench/mcp [-repeats 5] [-n 100] [-latency 100ms]
//
// Further modes register in modes. The sub-agent load (many sessions each spawning
// sub-agents) is bench/mcpload, which runs the daemon as its own process to read its memory.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/daemon"
	luftmcp "github.com/luft-run/luft/mcp"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// env is a daemon serving MCP on loopback HTTP, for a mode to measure.
type env struct {
	url   string
	token string
	svc   *runtime.Service
}

// modes are the measurements -mode selects.
var modes = map[string]func(ctx context.Context, e *env) error{
	"latency": latencyMode,
}

var (
	repeats = flag.Int("repeats", 5, "repeats (at least 5: the table shows their median and spread)")
	iters   = flag.Int("n", 100, "iterations per repeat")
	latency = flag.Duration("latency", 100*time.Millisecond, "the mock agent's answer time (a run lasts that long)")
)

func main() {
	mode := flag.String("mode", "latency", "what to measure: "+strings.Join(modeNames(), ", "))
	flag.Parse()
	run, ok := modes[*mode]
	if !ok {
		fail(fmt.Errorf("-mode %q: use one of %s", *mode, strings.Join(modeNames(), ", ")))
	}
	if *repeats < 5 || *iters < 1 {
		fail(fmt.Errorf("-repeats %d -n %d: want at least 5 repeats and 1 iteration", *repeats, *iters))
	}
	ctx := context.Background()
	e, stop, err := startDaemon(ctx)
	if err != nil {
		fail(err)
	}
	err = run(ctx, e)
	stop()
	if err != nil {
		fail(err)
	}
}

func modeNames() []string {
	var names []string
	for n := range modes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/mcp:", err)
	os.Exit(1)
}

// startDaemon runs a daemon over a fresh state dir with the mock backend, listening on
// loopback HTTP with the MCP door mounted.
func startDaemon(ctx context.Context) (*env, func(), error) {
	dir, err := os.MkdirTemp("", "luftmcp")
	if err != nil {
		return nil, nil, err
	}
	st, err := storage.Open(ctx, dir)
	if err != nil {
		return nil, nil, err
	}
	gate := daemon.NewGate()
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Caller: "daemon",
		Backends:  adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{LatencyMS: int(latency.Milliseconds())})),
		Scheduler: gate.Wrap(scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 64}}, nil))})
	if err != nil {
		return nil, nil, err
	}
	ready := make(chan daemon.Info, 1)
	d, err := daemon.New(daemon.Options{StateDir: dir, Service: svc, Store: st, Version: "bench", Listen: "127.0.0.1:0",
		Token: "bench-token", Gate: gate, Log: io.Discard, Ready: func(i daemon.Info) { ready <- i },
		Mounts: func(d *daemon.Daemon) []daemon.Mount {
			srv, err := luftmcp.New(luftmcp.Options{Service: svc, Host: d, Version: "bench", Resumes: true})
			if err != nil {
				fail(err)
			}
			return []daemon.Mount{srv.Mount()}
		}})
	if err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var info daemon.Info
	select {
	case info = <-ready:
	case err := <-done:
		return nil, nil, fmt.Errorf("daemon: %v", err)
	}
	stop := func() {
		d.Shutdown()
		<-done
		st.Close()
		os.RemoveAll(dir)
	}
	return &env{url: "http://" + info.Addr + "/mcp", token: "bench-token", svc: svc}, stop, nil
}

// connect opens one MCP session to the daemon.
func (e *env) connect(ctx context.Context, name string) (*client.Client, error) {
	c, err := client.NewStreamableHttpClient(e.url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + e.token}))
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: name, Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return nil, err
	}
	return c, nil
}

// call calls a tool that must succeed and decodes its structured content into out.
func call(ctx context.Context, c *client.Client, name string, args map[string]any, out any) error {
	var req mcp.CallToolRequest
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if res.IsError {
		var b strings.Builder
		for _, ct := range res.Content {
			if tc, ok := ct.(mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return fmt.Errorf("%s: %s", name, b.String())
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

const oneAgent = `function main()
  local r = agent{ prompt = "bench" }
  report({ ok = r.ok })
end`

type runView struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
}

// latencyMode measures (a) execute → first status running and (b) run_done → await's
// answer, per repeat.
func latencyMode(ctx context.Context, e *env) error {
	c, err := e.connect(ctx, "bench")
	if err != nil {
		return err
	}
	defer c.Close()
	machine.Print(os.Stdout)
	fmt.Printf("luft MCP door: daemon on loopback HTTP, mock agent answering in %s, %d iterations per repeat\n\n", *latency, *iters)
	fmt.Printf("%-7s %12s %12s %12s %12s\n", "repeat", "a p50", "a p99", "b p50", "b p99")
	var aP50, aP99, bP50, bP99 []float64
	for rep := 1; rep <= *repeats; rep++ {
		var a, b []float64
		for range *iters {
			da, db, err := iteration(ctx, c, e)
			if err != nil {
				return err
			}
			a, b = append(a, da), append(b, db)
		}
		aP50, aP99 = append(aP50, pct(a, 50)), append(aP99, pct(a, 99))
		bP50, bP99 = append(bP50, pct(b, 50)), append(bP99, pct(b, 99))
		fmt.Printf("%-7d %10.2fms %10.2fms %10.2fms %10.2fms\n", rep, aP50[rep-1], aP99[rep-1], bP50[rep-1], bP99[rep-1])
	}
	fmt.Printf("\n%-40s %10s %19s %10s\n", "measure", "median", "spread (min–max)", "target")
	row := func(name string, v []float64, target string) {
		fmt.Printf("%-40s %8.2fms %8.2f–%.2fms %10s\n", name, median(v), slices.Min(v), slices.Max(v), target)
	}
	row("a: execute → status running, p50", aP50, "")
	row("a: execute → status running, p99", aP99, "≤ 100ms")
	row("b: run_done → await answered, p50", bP50, "")
	row("b: run_done → await answered, p99", bP99, "≤ 50ms")
	return nil
}

// iteration runs one workflow: a is execute → status running, b is run_done → await.
func iteration(ctx context.Context, c *client.Client, e *env) (a, b float64, err error) {
	start := time.Now()
	var ex runView
	if err := call(ctx, c, "workflow_execute", map[string]any{"script": oneAgent}, &ex); err != nil {
		return 0, 0, err
	}
	// The first status after execute: it shows the run running unless the run already
	// ended, which takes -latency, so such a sample is past the target anyway.
	var st runView
	if err := call(ctx, c, "workflow_status", map[string]any{"run_id": ex.RunID}, &st); err != nil {
		return 0, 0, err
	}
	a = ms(time.Since(start))
	if st.Status != "running" && st.Status != "completed" {
		return 0, 0, fmt.Errorf("run %s is %s", ex.RunID, st.Status)
	}
	var done runView
	if err := call(ctx, c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &done); err != nil {
		return 0, 0, err
	}
	answered := time.Now()
	if done.Status != "completed" {
		return 0, 0, fmt.Errorf("run %s ended %s", ex.RunID, done.Status)
	}
	evs, errc, err := e.svc.Events(ctx, ex.RunID, runtime.EventsOptions{Types: []string{"run_done"}})
	if err != nil {
		return 0, 0, err
	}
	var at time.Time
	for ev := range evs {
		at = ev.TS
	}
	if err := <-errc; err != nil || at.IsZero() {
		return 0, 0, fmt.Errorf("run %s: no run_done (%v)", ex.RunID, err)
	}
	return a, ms(answered.Sub(at)), nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the p-th percentile (nearest rank).
func pct(v []float64, p float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
