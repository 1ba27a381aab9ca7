// Command scaleout measures luft's scale-out on PostgreSQL with real `luft daemon`
// processes (built once from ./cmd/luft) on one database and one shared, rate-limited key
// of the fake engine (429 when its bucket is empty):
//
//   - throughput with 1, 2 and 3 nodes on a budget-bound workload: the key's request
//     limit is the bottleneck, so the ideal is the same throughput at every node count,
//     with no 429; each row gives completed runs/s, agent turns/s, the 429s and the
//     daemons' CPU, as the median and spread (min–max) of -repeat repetitions, each on a
//     fresh database and a fresh key;
//   - memory per node: each daemon's RSS (VmRSS of /proc/PID/status) at idle and its
//     largest during the workload (sampled every 100 ms), and its peak (VmHWM) at the end;
//   - takeover latency: two nodes, runs mid-flight on one, SIGKILL it and time from the
//     kill to the other node's claim (the run rows' node and attempt, read from the
//     database), -kills times, alternating the victim.
//
// It needs a PostgreSQL server: LUFT_TEST_POSTGRES (a postgres:// URL; `eval "$(.ci/postgres
// start)"` starts a throwaway one). Run it from the module's root:
//
//	go run ./bench/scaleout [-nodes 1,2,3] [-repeat 5] [-runs 6] [-rounds 10] [-width 4]
//	    [-limit 40] [-period 2s] [-kills 5] [-lease 3s] [-heartbeat 200ms]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/node"
)

// workflow is each run: rounds of width agents at once.
const workflow = `function main()
  local n = 0
  for r = 1, %d do
    local items = {}
    for i = 1, %d do items[i] = i end
    local got = parallel(items, function(i) return agent{prompt = "round " .. r .. " item " .. i}.ok end)
    n = n + #got
  end
  report({turns = n})
end`

// longWorkflow is the takeover's run: many turns one after another, so it is mid-flight
// when its node is killed (the bench cancels it once it has been taken over).
const longWorkflow = `function main()
  for i = 1, 100000 do agent{prompt = "step " .. i} end
end`

// config is one invocation's settings.
type config struct {
	luft             string
	nodes            []int
	repeat           int
	runs             int // per repetition, spread evenly over the nodes
	rounds, width    int
	limit            int // requests per period of the shared key
	period           time.Duration
	kills            int
	lease, heartbeat time.Duration
	cpuRuns          int // the CPU-bound table's runs, in multiples of runs (0: skip it)
	skipTakeover     bool
}

func main() {
	var cfg config
	nodes := flag.String("nodes", "1,2,3", "node counts")
	flag.IntVar(&cfg.repeat, "repeat", 5, "repetitions per node count (median and spread shown)")
	flag.IntVar(&cfg.runs, "runs", 6, "runs per repetition, spread evenly over the nodes")
	flag.IntVar(&cfg.rounds, "rounds", 10, "rounds per run")
	flag.IntVar(&cfg.width, "width", 4, "agents at once per round")
	flag.IntVar(&cfg.limit, "limit", 40, "requests the shared key admits per -period")
	flag.DurationVar(&cfg.period, "period", 2*time.Second, "the shared key's period")
	flag.IntVar(&cfg.cpuRuns, "cpu-runs", 2, "runs of the CPU-bound table, in multiples of -runs (0: skip it)")
	flag.IntVar(&cfg.kills, "kills", 5, "SIGKILLs for the takeover latency (0: skip)")
	flag.DurationVar(&cfg.lease, "lease", 3*time.Second, "[node] lease")
	flag.DurationVar(&cfg.heartbeat, "heartbeat", 200*time.Millisecond, "[node] heartbeat")
	flag.StringVar(&cfg.luft, "luft", "", "a luft binary to use (default: build ./cmd/luft)")
	flag.Parse()
	for _, s := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bad -nodes %q: want node counts like 1,2,3\n", *nodes)
			os.Exit(2)
		}
		cfg.nodes = append(cfg.nodes, n)
	}
	if ok, msg := pgtest.Available(); !ok {
		fmt.Fprintln(os.Stderr, "scaleout needs a PostgreSQL server:", msg)
		os.Exit(2)
	}
	if cfg.luft == "" {
		dir, err := os.MkdirTemp("", "luft-scaleout-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
		cfg.luft = filepath.Join(dir, "luft")
		if err := build(cfg.luft, "./cmd/luft"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	cfg.skipTakeover = cfg.kills == 0
	if err := bench(os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// build builds the luft command (package pkg, ./cmd/luft from the module's root) into out.
func build(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s (run the bench from the module's root): %w", pkg, err)
	}
	return nil
}

// bench measures and prints every part cfg asks for.
func bench(w io.Writer, cfg config) error {
	machine.Print(w)
	wl := budgetBound(cfg)
	intro := fmt.Sprintf("budget-bound: N real luft daemons on one PostgreSQL, one shared key of the fake engine (%d requests per %s, continuous, 429 when empty; ~40 ms a request).\n"+
		"The key's limit is the bottleneck: the ideal is the same throughput at every N (%.0f turns/s once the first burst of %d is spent) with no 429.\n"+
		"On one %d-core machine it is CPU-bound as well: all N daemons, PostgreSQL, the engine and this bench share its cores with whoever else uses it (the CPU columns say whose).",
		wl.limit, wl.period, float64(wl.limit)/wl.period.Seconds(), wl.limit, machine.Read().Cores)
	if err := throughputTable(w, cfg, wl, intro); err != nil {
		return err
	}
	if cfg.cpuRuns > 0 {
		wl := cpuBound(cfg)
		intro := "Unthrottled: the same on a key that admits far more than the nodes send (1,000,000 requests per second), so the key is not the bound:\n" +
			"each node's own slots (8 turns at once per backend by default) and the machine's CPU are, and the daemons, PostgreSQL, the engine and this bench share it."
		if err := throughputTable(w, cfg, wl, intro); err != nil {
			return err
		}
	}
	if !cfg.skipTakeover {
		if err := takeoverTable(w, cfg); err != nil {
			return err
		}
	}
	machine.PrintLoad(w)
	return nil
}

// rep is one repetition's figures at one node count.
type rep struct {
	wall      time.Duration
	requests  int
	rejected  int
	cpu       time.Duration // the daemons' CPU time during the workload
	busy      float64       // the machine's busy cores during it
	server    float64       // PostgreSQL's cores during it (-1: unknown)
	self      float64       // this process's (the engine's and the bench's) cores
	idle, run []int64       // RSS per node (KiB): at idle, largest during the workload
	hwm       []int64       // VmHWM per node at the end
}

// workload is one throughput table's key and runs.
type workload struct {
	limit  int // requests of the shared key per period
	period time.Duration
	runs   int // per repetition
}

// budgetBound is the table whose bottleneck is the key's limit; cpuBound has a key that
// admits far more than this machine can send, so the machine's CPU is the bottleneck.
func budgetBound(cfg config) workload {
	return workload{limit: cfg.limit, period: cfg.period, runs: cfg.runs}
}

func cpuBound(cfg config) workload {
	return workload{limit: 1_000_000, period: time.Second, runs: cfg.runs * cfg.cpuRuns}
}

func throughputTable(w io.Writer, cfg config, wl workload, intro string) error {
	turns := wl.runs * cfg.rounds * cfg.width
	fmt.Fprintf(w, "\n%s\n", intro)
	fmt.Fprintf(w, "%d runs × %d rounds × %d agents at once = %d turns per repetition, runs spread evenly over the nodes; median (min–max) of %d repetitions, each on a fresh database and key.\n",
		wl.runs, cfg.rounds, cfg.width, turns, cfg.repeat)
	fmt.Fprintf(w, "CPU, in cores of %d (CPU time over the wall time): the daemons' (/proc/PID/stat), the PostgreSQL server's (its processes, when .ci/postgres started it), this process's\n"+
		"(the fake engine and the bench), and the whole machine's busy time (/proc/stat, other users' included).\n\n", machine.Read().Cores)
	fmt.Fprintf(w, "%5s  %20s  %22s  %7s  %14s  %18s  %18s  %18s  %18s\n", "nodes", "runs/s", "turns/s", "429s", "requests", "daemons' CPU", "PostgreSQL CPU", "engine+bench CPU", "machine busy")
	var mems []string
	for _, n := range cfg.nodes {
		var reps []rep
		for range max(cfg.repeat, 1) {
			r, err := throughputRep(cfg, wl, n)
			if err != nil {
				return fmt.Errorf("%d nodes: %w", n, err)
			}
			reps = append(reps, r)
		}
		var runsPS, turnsPS, rej, reqs, cpu, busy, server, self []float64
		var idle, during, hwm []float64
		for _, r := range reps {
			runsPS = append(runsPS, float64(wl.runs)/r.wall.Seconds())
			turnsPS = append(turnsPS, float64(turns)/r.wall.Seconds())
			rej = append(rej, float64(r.rejected))
			reqs = append(reqs, float64(r.requests))
			cpu = append(cpu, r.cpu.Seconds()/r.wall.Seconds())
			busy = append(busy, r.busy)
			self = append(self, r.self)
			if r.server >= 0 {
				server = append(server, r.server)
			}
			for i := range r.idle {
				idle = append(idle, float64(r.idle[i])/1024)
				during = append(during, float64(r.run[i])/1024)
				hwm = append(hwm, float64(r.hwm[i])/1024)
			}
		}
		fmt.Fprintf(w, "%5d  %20s  %22s  %7s  %14s  %18s  %18s  %18s  %18s\n", n, stat(runsPS, "%.2f"), stat(turnsPS, "%.1f"), stat(rej, "%.0f"), stat(reqs, "%.0f"),
			stat(cpu, "%.2f"), stat(server, "%.2f"), stat(self, "%.2f"), stat(busy, "%.2f"))
		mems = append(mems, fmt.Sprintf("%5d  %20s  %20s  %20s", n, stat(idle, "%.1f"), stat(during, "%.1f"), stat(hwm, "%.1f")))
	}
	fmt.Fprintf(w, "\nmemory per node (MB; median (min–max) over every node of every repetition): RSS at idle (started, before the workload), largest RSS sampled every 100 ms during it, VmHWM at its end\n\n")
	fmt.Fprintf(w, "%5s  %20s  %20s  %20s\n", "nodes", "RSS idle", "RSS during", "peak (VmHWM)")
	for _, m := range mems {
		fmt.Fprintln(w, m)
	}
	return nil
}

// throughputRep runs one repetition with n nodes on a fresh database and key.
func throughputRep(cfg config, wl workload, n int) (rep, error) {
	k, err := newKey(wl.limit, wl.period)
	if err != nil {
		return rep{}, err
	}
	defer k.close()
	c, err := newCluster(cfg.luft, n, k, cfg.lease, cfg.heartbeat, fmt.Sprintf(workflow, cfg.rounds, cfg.width))
	if err != nil {
		return rep{}, err
	}
	defer c.close()
	var pids []int
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			return rep{}, err
		}
		pids = append(pids, nd.pid)
	}
	var r rep
	cpu0 := time.Duration(0)
	for _, pid := range pids {
		m, err := readMem(pid)
		if err != nil {
			return rep{}, err
		}
		r.idle = append(r.idle, m.rss)
		t, err := cpuTime(pid)
		if err != nil {
			return rep{}, err
		}
		cpu0 += t
	}
	s := sample(pids, 100*time.Millisecond)
	start := time.Now()
	busy0, err := machineBusy()
	if err != nil {
		s.end()
		return rep{}, err
	}
	server0 := serverCPU()
	self0, err := cpuTime(os.Getpid())
	if err != nil {
		s.end()
		return rep{}, err
	}
	ids := make([]string, wl.runs)
	errs := make(chan error, n)
	for i, nd := range c.nodes {
		go func() {
			for j := i; j < wl.runs; j += n {
				id, err := c.submit(nd)
				if err != nil {
					errs <- err
					return
				}
				ids[j] = id
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			s.end()
			return rep{}, err
		}
	}
	turns := cfg.rounds * cfg.width
	err = c.waitDone(ids, fmt.Sprintf(`"turns":%d`, turns), 5*time.Minute)
	r.wall = time.Since(start)
	peak := s.end()
	if err != nil {
		return rep{}, err
	}
	busy1, err := machineBusy()
	if err != nil {
		return rep{}, err
	}
	r.busy = (busy1 - busy0).Seconds() / r.wall.Seconds()
	r.server = -1
	if d, ok := serverCPUSince(server0); ok {
		r.server = d.Seconds() / r.wall.Seconds()
	}
	self1, err := cpuTime(os.Getpid())
	if err != nil {
		return rep{}, err
	}
	r.self = (self1 - self0).Seconds() / r.wall.Seconds()
	for _, pid := range pids {
		m, err := readMem(pid)
		if err != nil {
			return rep{}, err
		}
		r.run = append(r.run, max(peak[pid], m.rss))
		r.hwm = append(r.hwm, m.hwm)
		t, err := cpuTime(pid)
		if err != nil {
			return rep{}, err
		}
		r.cpu += t
	}
	r.cpu -= cpu0
	r.requests, r.rejected = k.counts()
	return r, nil
}

func takeoverTable(w io.Writer, cfg config) error {
	took, rejected, err := takeovers(cfg)
	if err != nil {
		return err
	}
	ms := make([]float64, len(took))
	for i, d := range took {
		ms[i] = d.Seconds()
	}
	fmt.Fprintf(w, "\ntakeover: 2 nodes on one PostgreSQL and the same key, [node] lease %s, heartbeat %s; 2 runs mid-flight on one node, SIGKILL it, time from the kill\n", cfg.lease, cfg.heartbeat)
	fmt.Fprintf(w, "to the other node's claim (the run's row names it, at a later attempt), read from the database every 20 ms; %d kills alternating the victim\n\n", len(took)/2)
	fmt.Fprintf(w, "%8s  %26s  %9s\n", "samples", "kill → claim (s)", "429s")
	fmt.Fprintf(w, "%8d  %26s  %9d\n", len(took), stat(ms, "%.2f"), rejected)
	return nil
}

// takeovers measures cfg.kills takeovers of 2 runs each and returns every run's kill →
// claim latency and the key's 429s over the whole part.
func takeovers(cfg config) ([]time.Duration, int, error) {
	k, err := newKey(cfg.limit, cfg.period)
	if err != nil {
		return nil, 0, err
	}
	defer k.close()
	c, err := newCluster(cfg.luft, 2, k, cfg.lease, cfg.heartbeat, longWorkflow)
	if err != nil {
		return nil, 0, err
	}
	defer c.close()
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			return nil, 0, err
		}
	}
	ids, err := nodeIDs(c)
	if err != nil {
		return nil, 0, err
	}
	var took []time.Duration
	victim := 0
	for range cfg.kills {
		other := 1 - victim
		d, err := takeover(c, c.nodes[victim], c.nodes[other], ids[other])
		if err != nil {
			return nil, 0, err
		}
		took = append(took, d...)
		if err := c.start(c.nodes[victim]); err != nil {
			return nil, 0, err
		}
		victim = other
	}
	_, rejected := k.counts()
	return took, rejected, nil
}

// takeover starts 2 runs on victim, waits until each has finished 3 calls, SIGKILLs
// victim and returns how long after the kill other (node id otherID) claimed each;
// it then cancels them.
func takeover(c *cluster, victim, other *member, otherID string) ([]time.Duration, error) {
	var runs []string
	for range 2 {
		id, err := c.submit(victim)
		if err != nil {
			return nil, err
		}
		runs = append(runs, id)
	}
	before := map[string]int{}
	for _, id := range runs {
		if err := poll(30*time.Second, "run "+id+" to finish 3 calls", func() (bool, error) {
			n, err := c.finished(id)
			return n >= 3, err
		}); err != nil {
			return nil, err
		}
		r, err := c.st.GetRun(context.Background(), id)
		if err != nil {
			return nil, err
		}
		before[id] = r.Attempt
	}
	killed, err := c.kill(victim)
	if err != nil {
		return nil, err
	}
	var took []time.Duration
	for _, id := range runs {
		if err := poll(time.Minute, "node "+otherID+" to take run "+id+" over", func() (bool, error) {
			r, err := c.st.GetRun(context.Background(), id)
			return err == nil && r.Node == otherID && r.Attempt > before[id], err
		}); err != nil {
			return nil, err
		}
		took = append(took, time.Since(killed))
	}
	for _, id := range runs {
		if _, err := c.luftOn(other, "cancel", id); err != nil {
			return nil, err
		}
	}
	return took, c.waitEnded(runs, time.Minute)
}

// nodeIDs is each node's id, as the daemons wrote it in their state dirs.
func nodeIDs(c *cluster) ([]string, error) {
	var ids []string
	for _, nd := range c.nodes {
		id, err := node.ID(nd.state)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}
