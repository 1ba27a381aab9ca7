// Command mcpload measures the MCP door's sub-agent tools under load: a real luft daemon
// (the binary, `luft daemon start --listen 127.0.0.1:0`, on a fresh state dir each run,
// the embedded mock backend) and S concurrent MCP sessions over its streamable HTTP at
// /mcp, each spawning N sub-agents and awaiting them all (await, mode all). Every
// sub-agent is a hosted, journaled run of one agent call.
//
// Reported per variant (mock latency per agent call) over -runs runs: the wall time from
// the first session's connect to the last session's await answer, the slowest session's
// time, and the daemon's peak resident memory (VmHWM) and its resident memory after the
// load (VmRSS), as the median and the spread (min–max). The daemon's scheduler has its
// default 8 slots per lane, so agents queue as they would for a user.
//
//	go run ./bench/mcpload [-sessions 50] [-spawns 10] [-runs 5] [-latency 0,100] [-luft path]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/daemon"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

type result struct {
	wall, slowest time.Duration
	peakKB, rssKB float64
}

func main() {
	sessions := flag.Int("sessions", 50, "concurrent MCP sessions")
	spawns := flag.Int("spawns", 10, "sub-agents each session spawns")
	runs := flag.Int("runs", 5, "runs per variant (median and spread)")
	latencies := flag.String("latency", "0,100", "mock latency per agent call in ms, one variant each")
	bin := flag.String("luft", "", "the luft binary (default: built from ./cmd/luft into a temp dir)")
	flag.Parse()
	if err := run(*sessions, *spawns, *runs, *latencies, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "mcpload:", err)
		os.Exit(1)
	}
}

func run(sessions, spawns, runs int, latencies, bin string) error {
	tmp, err := os.MkdirTemp("", "luft-mcpload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if bin == "" {
		bin = filepath.Join(tmp, "luft")
		build := exec.Command("go", "build", "-o", bin, "./cmd/luft")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build luft (run from the repository root, or pass -luft): %w", err)
		}
	}
	machine.Print(os.Stdout)
	fmt.Printf("luft MCP sub-agents: %d concurrent sessions × %d spawn + await(all) through the daemon's /mcp, mock backend, %d runs per variant\n\n",
		sessions, spawns, runs)
	fmt.Printf("%-12s %-22s %-22s %-22s %-22s\n", "mock latency", "wall", "slowest session", "daemon peak RSS", "daemon RSS after")
	for _, l := range strings.Split(latencies, ",") {
		ms, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || ms < 0 {
			return fmt.Errorf("-latency %q: give milliseconds, comma-separated", latencies)
		}
		var rs []result
		for i := range runs {
			r, err := once(bin, filepath.Join(tmp, fmt.Sprintf("l%d-r%d", ms, i)), sessions, spawns, ms)
			if err != nil {
				return fmt.Errorf("latency %d ms, run %d: %w", ms, i+1, err)
			}
			rs = append(rs, r)
		}
		col := func(f func(result) float64, unit string) string {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			return fmt.Sprintf("%.2f%s (%.2f–%.2f)", median(v), unit, slices.Min(v), slices.Max(v))
		}
		fmt.Printf("%-12s %-22s %-22s %-22s %-22s\n", fmt.Sprintf("%d ms", ms),
			col(func(r result) float64 { return r.wall.Seconds() }, " s"),
			col(func(r result) float64 { return r.slowest.Seconds() }, " s"),
			col(func(r result) float64 { return r.peakKB / 1024 }, " MiB"),
			col(func(r result) float64 { return r.rssKB / 1024 }, " MiB"))
	}
	return nil
}

// once starts a daemon on a fresh state dir under dir, runs the sessions against it,
// reads its memory and stops it.
func once(bin, dir string, sessions, spawns, latencyMS int) (result, error) {
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return result{}, err
	}
	luft := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, append([]string{"--state-dir", state}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "LUFT_MOCK_LATENCY_MS="+strconv.Itoa(latencyMS))
		return cmd.CombinedOutput()
	}
	if out, err := luft("daemon", "start", "--listen", "127.0.0.1:0"); err != nil {
		return result{}, fmt.Errorf("daemon start: %v\n%s", err, out)
	}
	defer luft("daemon", "stop")
	info, err := daemon.ReadInfo(state)
	if err != nil {
		return result{}, err
	}
	tok, err := os.ReadFile(filepath.Join(state, daemon.TokenFile))
	if err != nil {
		return result{}, err
	}
	url, auth := "http://"+info.Addr+"/mcp", "Bearer "+strings.TrimSpace(string(tok))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		slowest time.Duration
		errs    []error
	)
	start := time.Now()
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := session(ctx, url, auth, s, spawns); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("session %d: %w", s, err))
				mu.Unlock()
				return
			}
			mu.Lock()
			slowest = max(slowest, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if len(errs) > 0 {
		return result{}, errors.Join(errs...)
	}
	peak, rss, err := memory(info.PID)
	if err != nil {
		return result{}, err
	}
	return result{wall: wall, slowest: slowest, peakKB: peak, rssKB: rss}, nil
}

// session is one MCP client: it connects, spawns n sub-agents and awaits them all.
func session(ctx context.Context, url, auth string, id, n int) error {
	c, err := client.NewStreamableHttpClient(url, transport.WithHTTPHeaders(map[string]string{"Authorization": auth}))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		return err
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: fmt.Sprintf("mcpload-%d", id), Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return err
	}
	handles := make([]any, 0, n)
	for i := range n {
		res, err := call(ctx, c, "spawn", map[string]any{"prompt": fmt.Sprintf("session %d task %d: summarise", id, i)})
		if err != nil {
			return err
		}
		m, _ := res.StructuredContent.(map[string]any)
		handles = append(handles, m["handle"])
	}
	for {
		res, err := call(ctx, c, "await", map[string]any{"handles": handles, "timeout_s": 600})
		if err != nil {
			return err
		}
		m, _ := res.StructuredContent.(map[string]any)
		if done, _ := m["done"].(float64); int(done) == n {
			return nil
		}
	}
}

func call(ctx context.Context, c *client.Client, name string, args map[string]any) (*mcp.CallToolResult, error) {
	var req mcp.CallToolRequest
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if res.IsError {
		var b strings.Builder
		for _, ct := range res.Content {
			if tc, ok := ct.(mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return nil, fmt.Errorf("%s: %s", name, b.String())
	}
	return res, nil
}

// memory reads a process's peak and current resident memory in KiB.
func memory(pid int) (peak, rss float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("daemon memory (Linux /proc only): %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmHWM:":
			peak, _ = strconv.ParseFloat(f[1], 64)
		case "VmRSS:":
			rss, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	return peak, rss, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
