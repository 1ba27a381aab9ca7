// Command resume measures how fast a run resumes: the replay of a journal of N completed
// agent calls through the real runtime (VM, journal lookups, cached agent_done events
// written to SQLite), and the time to load that journal alone.
//
// For each N it first builds a state dir holding one resumable run: a parallel() of N mock
// agents with zero latency, then one more call on a "gate" backend that waits until the
// run is cancelled. Once that call has started (so all N calls are journaled as completed)
// the run is cancelled. Each measurement then works on a fresh copy of that state dir,
// opened by a new store and Service, and times Resume until the run completes: N calls
// replay from the journal, the gate call runs again (now answering at once) and the run
// completes.
//
// Beside it, the naive baseline: re-executing the same N calls instead of replaying them,
// a fresh run of the same workflow on the mock answering after -latency (a few hundred
// milliseconds, as a hosted model does) with the same -concurrency, timed once per N
// (it is sleep-bound: it cannot finish before ⌈N ÷ concurrency⌉ × latency, printed as
// its floor). The target, resume→done ≤ 1 s for up to 10,000 calls, is one only the
// replay meets: on the zero-latency mock re-executing 10,000 calls meets it too, so the
// baseline runs at a realistic latency. The command exits 1 when luft misses the target
// or the baseline meets it.
//
//	go run ./bench/resume [-n 1000,10000] [-repeat 5] [-latency 250ms] [-concurrency 8] [-dir /dev/shm]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/event"
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
  local last = agent{name = "gate", backend = "gate", prompt = "the call the first attempt is cancelled in"}
  report({calls = #r + 1, tokens = sum, last = last.output})
end`

// gate is a backend that blocks until its call's context ends, or, once opened, answers
// at once.
type gate struct{ open atomic.Bool }

func (g *gate) ID() string { return "gate" }

func (g *gate) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	var res agent.Result
	err := call.Do(ctx, adapters.TurnCost{Input: adapters.EstimateTokens(req.Prompt)}, func(ctx context.Context) adapters.TurnReport {
		if !g.open.Load() {
			<-ctx.Done()
			return adapters.TurnReport{Err: ctx.Err()}
		}
		res = agent.Result{Status: agent.StatusOK, Output: "gate open", Text: "gate open", Attempts: 1, Backend: "gate", Model: "gate-1"}
		return adapters.TurnReport{}
	})
	return res, err
}

type measurement struct {
	open, journal, resume, setup time.Duration // setup: Resume() until it returned
	events                       int           // events the resumed attempt stored
}

func main() {
	ns := flag.String("n", "1000,10000", "journal sizes (completed agent calls)")
	conc := flag.Int("concurrency", 8, "scheduler slots (luft's default concurrency), for the resume and the re-execution")
	repeat := flag.Int("repeat", 5, "resumes per size, each of a fresh copy of the state (the median and spread are shown)")
	lat := flag.Duration("latency", 250*time.Millisecond, "the mock's answer time when the baseline re-executes the calls (0: no baseline)")
	dir := flag.String("dir", "", "parent folder of the state dirs (default: the system temp dir)")
	flag.Parse()

	machine.Print(os.Stdout)
	fmt.Printf("luft resume: replay a journal of N completed mock agent calls (+1 live call) through the real runtime, SQLite state, %d scheduler slots, median of %d\n\n", *conc, *repeat)
	fmt.Printf("%8s  %10s  %12s  %14s  %12s  %14s  %21s  %8s  %8s  %14s  %10s  %s\n", "N", "build", "open store", "load journal", "Resume()",
		"resume→done", "spread (min–max)", "calls/s", "events", "re-execute", "its floor", "target "+target.String())
	ok := true
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintln(os.Stderr, "bad -n:", s)
			os.Exit(2)
		}
		met, err := bench(n, *conc, *repeat, *dir, *lat)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ok = ok && met
	}
	fmt.Println("\nopen store: storage.Open of the copied state dir; load journal: Store.Journal of the run (its own copy);")
	fmt.Println("Resume(): the call alone (run lookup, pinned files, journal load, row update); resume→done: Resume() until the run completed;")
	fmt.Println("calls/s: replayed calls per second of resume→done; events: events the resumed attempt stored.")
	fmt.Printf("re-execute: the baseline, a fresh run of the same N calls on the mock answering in %s, %d at once; its floor: ⌈N ÷ %d⌉ × %s.\n", *lat, *conc, *conc, *lat)
	fmt.Printf("target: resume→done ≤ %s for N ≤ %d, met by luft (the median) and missed by the baseline.\n", target, targetN)
	machine.PrintLoad(os.Stdout)
	if !ok {
		os.Exit(1)
	}
}

// The target: a run whose journal holds up to targetN completed calls resumes to its end
// within target.
const (
	target  = time.Second
	targetN = 10_000
)

func bench(n, conc, repeat int, parent string, lat time.Duration) (bool, error) {
	base, err := os.MkdirTemp(parent, "luft-resume-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(base)
	t0 := time.Now()
	runID, err := build(filepath.Join(base, "base"), n, conc)
	if err != nil {
		return false, fmt.Errorf("build a journal of %d calls: %w", n, err)
	}
	built := time.Since(t0)
	var ms []measurement
	for i := range repeat {
		m, err := measure(base, i, runID, n, conc)
		if err != nil {
			return false, fmt.Errorf("resume a journal of %d calls: %w", n, err)
		}
		ms = append(ms, m)
	}
	med := func(f func(measurement) time.Duration) time.Duration {
		ds := make([]time.Duration, len(ms))
		for i, m := range ms {
			ds[i] = f(m)
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	resume := med(func(m measurement) time.Duration { return m.resume })
	lo, hi := ms[0].resume, ms[0].resume
	for _, m := range ms {
		lo, hi = min(lo, m.resume), max(hi, m.resume)
	}
	reexec, floor, verdict := "-", "-", "-"
	met := true
	if n <= targetN {
		met = resume <= target
		verdict = "luft " + pass(met)
	}
	if lat > 0 {
		d, err := reexecute(filepath.Join(base, "reexec"), n, conc, lat)
		if err != nil {
			return false, fmt.Errorf("re-execute %d calls: %w", n, err)
		}
		reexec = d.Round(time.Millisecond).String()
		floor = (time.Duration((n+conc-1)/conc) * lat).String()
		if n <= targetN {
			verdict += ", re-execute " + pass(d <= target)
			met = met && d > target // a target the baseline meets tells nothing
		}
	}
	fmt.Printf("%8d  %10s  %12s  %14s  %12s  %14s  %21s  %8.0f  %8d  %14s  %10s  %s\n", n, built.Round(time.Millisecond),
		med(func(m measurement) time.Duration { return m.open }).Round(10*time.Microsecond),
		med(func(m measurement) time.Duration { return m.journal }).Round(10*time.Microsecond),
		med(func(m measurement) time.Duration { return m.setup }).Round(10*time.Microsecond),
		resume.Round(time.Millisecond), lo.Round(time.Millisecond).String()+"–"+hi.Round(time.Millisecond).String(),
		float64(n)/resume.Seconds(), ms[0].events, reexec, floor, verdict)
	return met, nil
}

func pass(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// reexecute times the baseline: a fresh run of the workflow in dir whose n calls run on
// the mock answering after lat, conc at once, the gate open.
func reexecute(dir string, n, conc int, lat time.Duration) (time.Duration, error) {
	ctx := context.Background()
	st, err := storage.Open(ctx, dir)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	g := &gate{}
	g.open.Store(true)
	svc, err := runtime.New(runtime.Options{
		Store:     st,
		StateDir:  dir,
		Backends:  adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{LatencyMS: int(lat.Milliseconds())}), g),
		Scheduler: scheduler.NewGate(conc),
	})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	run, err := svc.Start(ctx, runtime.Spec{
		Path: "resume.lua", Source: []byte(script), Args: map[string]any{"n": float64(n)},
		Concurrency: conc, Limits: lua.Limits{MaxAgentCalls: n + 1},
	})
	if err != nil {
		return 0, err
	}
	res := run.Wait()
	d := time.Since(t0)
	if res.Status != runtime.StatusCompleted || res.Agents.OK != n+1 {
		return 0, fmt.Errorf("the run ended %s with %d calls answered, want completed and %d: %v", res.Status, res.Agents.OK, n+1, res.Err)
	}
	return d, nil
}

func service(st storage.Store, dir string, conc int, g *gate) (*runtime.Service, error) {
	return runtime.New(runtime.Options{
		Store:     st,
		StateDir:  dir,
		Backends:  adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{}), g),
		Scheduler: scheduler.NewGate(conc),
	})
}

// build leaves in dir a cancelled run whose journal holds n completed agent calls.
func build(dir string, n, conc int) (string, error) {
	ctx := context.Background()
	st, err := storage.Open(ctx, dir)
	if err != nil {
		return "", err
	}
	defer st.Close()
	svc, err := service(st, dir, conc, &gate{})
	if err != nil {
		return "", err
	}
	run, err := svc.Start(ctx, runtime.Spec{
		Path: "resume.lua", Source: []byte(script), Args: map[string]any{"n": float64(n)},
		Concurrency: conc, Limits: lua.Limits{MaxAgentCalls: n + 1},
	})
	if err != nil {
		return "", err
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	gated := false
	for ev := range run.Subscribe(sctx, 0) {
		if ev.Type == event.AgentStarted && ev.Data["name"] == "gate" {
			gated = true
			run.Cancel()
			break
		}
	}
	res := run.Wait()
	if !gated || res.Status != runtime.StatusCancelled {
		return "", fmt.Errorf("the first attempt ended %s (%v) before its last call", res.Status, res.Err)
	}
	entries, err := st.Journal(ctx, run.ID)
	if err != nil {
		return "", err
	}
	done := 0
	for _, e := range entries {
		if e.Kind == lua.KindAgent && e.Status == storage.EntryCompleted {
			done++
		}
	}
	if done != n {
		return "", fmt.Errorf("the journal holds %d completed agent calls, want %d", done, n)
	}
	return run.ID, nil
}

// measure resumes a fresh copy of the built state dir, after timing a journal load on
// another copy.
func measure(base string, i int, runID string, n, conc int) (measurement, error) {
	ctx := context.Background()
	var m measurement

	// The journal alone.
	jdir := filepath.Join(base, fmt.Sprintf("journal-%d", i))
	if err := os.CopyFS(jdir, os.DirFS(filepath.Join(base, "base"))); err != nil {
		return m, err
	}
	goruntime.GC()
	t0 := time.Now()
	st, err := storage.Open(ctx, jdir)
	if err != nil {
		return m, err
	}
	m.open = time.Since(t0)
	t0 = time.Now()
	entries, err := st.Journal(ctx, runID)
	m.journal = time.Since(t0)
	st.Close()
	if err != nil {
		return m, err
	}
	if len(entries) < n {
		return m, fmt.Errorf("the journal has %d entries, want at least %d", len(entries), n)
	}
	os.RemoveAll(jdir)

	// Resume until the run completes.
	rdir := filepath.Join(base, fmt.Sprintf("resume-%d", i))
	if err := os.CopyFS(rdir, os.DirFS(filepath.Join(base, "base"))); err != nil {
		return m, err
	}
	defer os.RemoveAll(rdir)
	st, err = storage.Open(ctx, rdir)
	if err != nil {
		return m, err
	}
	defer st.Close()
	g := &gate{}
	g.open.Store(true)
	svc, err := service(st, rdir, conc, g)
	if err != nil {
		return m, err
	}
	before, err := st.Events(ctx, runID, 0, 0)
	if err != nil {
		return m, err
	}
	goruntime.GC()
	t0 = time.Now()
	run, err := svc.Resume(ctx, runtime.ResumeSpec{Run: runID})
	m.setup = time.Since(t0)
	if err != nil {
		return m, err
	}
	res := run.Wait()
	m.resume = time.Since(t0)
	if res.Status != runtime.StatusCompleted {
		return m, fmt.Errorf("the resumed run ended %s: %v", res.Status, res.Err)
	}
	if res.Agents.Cached != n || res.Agents.OK != 1 {
		return m, fmt.Errorf("the resumed run replayed %d calls and ran %d, want %d and 1", res.Agents.Cached, res.Agents.OK, n)
	}
	after, err := st.Events(ctx, runID, int64(len(before)), 0)
	if err != nil {
		return m, err
	}
	m.events = len(after)
	return m, nil
}
