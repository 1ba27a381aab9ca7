package schedbench

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// PolRuntime names luft as shipped: the workload's agent runs are agent calls of Lua
// workflows run by runtime.Service, every turn admitted by the Executor, with the keys
// the product uses (the workflow run, the call key, the conversation, the call's first
// admission).
const PolRuntime = "luft-runtime"

// RunThroughRuntime runs W1 or W2 through the runtime and the Executor with the fake
// engine in process, and measures it like Simulate. Each stream is one workflow run of
// its caller (one Service per caller, one Executor and one store for all): W1's batch
// stream is one run of `parallel` over its agents, its interactive stream another from
// 20 s; W2's plan, fan-out and summary are one run (agent, parallel, agent) and its
// interactive caller another from 10 s. The agent call with prompt "STREAM C J" plays
// the trace's run J of chain C of that stream, turn by turn, the engine answering and
// the tool pauses sleeping.
//
// It reads time from the time package (the runtime, the Executor and the engine all
// default to the wall clock), so it must run inside a testing/synctest bubble, where
// that clock is virtual: it then takes no wall time and every figure is deterministic
// but for goroutine scheduling at equal instants.
func RunThroughRuntime(w *Workload) (*Result, error) {
	origin := time.Now()
	ec := w.Engine
	ec.Clock = testkit.RealClock{}
	h := &Harness{W: w, Engine: testkit.NewEngine(ec), Pol: runtimePolicy{}, streams: map[string]*streamState{}, Origin: origin}
	b := &engineBackend{h: h, specs: map[string]*Run{}}
	for _, s := range w.Streams {
		st := &streamState{s: s, system: text(rngFor(w.Seed, "system:"+s.Name, 0, 0), s.SystemTokens)}
		st.systemPT = 1 + testkit.CountTokens(st.system)
		h.streams[s.Name] = st
	}

	dir, err := os.MkdirTemp("", "luft-schedbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	reps := max(1, w.Engine.Replicas)
	ex := scheduler.NewExecutor(scheduler.Config{Seed: w.Seed,
		Lanes: map[string]scheduler.LaneConfig{Lane: {Slots: w.Slots, Replicas: reps}}}, nil)

	type job struct {
		caller string
		start  time.Duration
		src    string
		n      int // agent calls in the run, for the branch window
	}
	var jobs []job
	switch w.Name {
	case "W1":
		for _, s := range w.Streams {
			jobs = append(jobs, job{caller: s.Caller, start: s.Start, n: s.Parallel,
				src: fanOut(s.Name, s.Parallel, s.Class)})
		}
	case "W2":
		subs := w.Streams[1].Parallel
		jobs = append(jobs, job{caller: "orchestrator", n: subs, src: `function main()
  agent{prompt = "plan 0 0", class = "batch"}
` + strings.TrimPrefix(strings.TrimSuffix(fanOut("sub", subs, agent.ClassBatch), "end\n"), "function main()\n") + `  agent{prompt = "final 0 0", class = "batch"}
end
`})
		in := w.Streams[3]
		jobs = append(jobs, job{caller: in.Caller, start: in.Start, n: 1, src: fanOut(in.Name, in.Parallel, in.Class)})
	default:
		return nil, fmt.Errorf("workload %s: only W1 and W2 run through the runtime", w.Name)
	}

	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b),
			Scheduler: ex, Caller: j.caller, CancelPoll: time.Hour})
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(j.start)
			r, err := svc.Start(context.Background(), runtime.Spec{Path: j.caller + ".lua", Source: []byte(j.src),
				Concurrency: max(1, j.n/32+1)})
			if err != nil {
				errs[i] = err
				return
			}
			if res := r.Wait(); res.Status != runtime.StatusCompleted {
				errs[i] = fmt.Errorf("%s's run %s: %v", j.caller, res.Status, res.Err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for _, r := range h.Runs {
		if r.End.IsZero() {
			h.Stuck = true
		}
	}
	res := Measure(h)
	res.Policy = PolRuntime
	return res, nil
}

// fanOut is a workflow body running one agent call per chain of a stream at once.
func fanOut(stream string, n int, class agent.Class) string {
	return fmt.Sprintf(`function main()
  local items = {}
  for c = 1, %d do items[c] = c - 1 end
  parallel(items, function(c) agent{prompt = "%s " .. c .. " 0", class = %q} end)
end
`, n, stream, string(class))
}

// runtimePolicy names the runtime's results; the Executor stands in for a Policy.
type runtimePolicy struct{}

func (runtimePolicy) Name() string                { return PolRuntime }
func (runtimePolicy) Start(*Harness)              {}
func (runtimePolicy) Submit(*Turn)                {}
func (runtimePolicy) Done(*Turn, *testkit.Result) {}
func (runtimePolicy) Wake() time.Time             { return time.Time{} }
func (runtimePolicy) Tick()                       {}

// engineBackend is an adapters.Backend that plays trace runs against the engine in
// process: the agent call "STREAM C J" is run J of chain C of the stream, its turns sent
// through the call's TurnFunc (so the Executor admits each, on the replica it chose),
// its tool pauses slept.
type engineBackend struct {
	h     *Harness
	mu    sync.Mutex
	specs map[string]*Run
}

func (b *engineBackend) ID() string           { return "fake" }
func (b *engineBackend) DefaultModel() string { return Model }

// engineErr is a non-200 answer of the engine, by the scheduler's HTTP convention.
type engineErr struct{ r *testkit.Result }

func (e *engineErr) Error() string {
	msg := ""
	if e.r.Error != nil {
		msg = e.r.Error.Error.Message
	}
	return fmt.Sprintf("engine answered HTTP %d: %s", e.r.Status, msg)
}
func (e *engineErr) StatusCode() int     { return e.r.Status }
func (e *engineErr) Header() http.Header { return e.r.Header }

// newRun builds the trace run an agent call plays.
func (b *engineBackend) newRun(prompt string, class agent.Class) (*Run, error) {
	var name string
	var c, j int
	if _, err := fmt.Sscanf(prompt, "%s %d %d", &name, &c, &j); err != nil {
		return nil, fmt.Errorf("agent prompt %q: want \"STREAM CHAIN RUN\"", prompt)
	}
	st := b.h.streams[name]
	if st == nil {
		return nil, fmt.Errorf("agent prompt %q: no stream %s", prompt, name)
	}
	s := st.s
	spec := s.Gen(rngFor(b.h.W.Seed, s.Name, uint64(c), uint64(j)), c, j)
	if spec.System == "" {
		spec.System = st.system
	}
	run := &Run{ID: fmt.Sprintf("%s-%d-%d", s.Name, c, j), Stream: s, Caller: s.Caller, Class: class, Spec: spec,
		Start: time.Now(), chain: c, sharedPT: st.systemPT}
	run.Msgs = []testkit.Message{{Role: "system", Content: testkit.Content(spec.System)},
		{Role: "user", Content: testkit.Content(spec.Task)}}
	b.mu.Lock()
	b.h.Runs = append(b.h.Runs, run)
	b.mu.Unlock()
	return run, nil
}

func (b *engineBackend) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	run, err := b.newRun(req.Prompt, req.Class)
	if err != nil {
		return agent.Result{Status: agent.StatusError, Error: err.Error()}, err
	}
	var total agent.Usage
	var text string
	for i, ts := range run.Spec.Turns {
		out := ts.Output
		creq := &testkit.ChatRequest{Model: Model, Messages: slices.Clone(run.Msgs), MaxTokens: &out}
		bytes := 0
		for _, m := range run.Msgs {
			bytes += len(m.Content)
		}
		b.mu.Lock()
		t := &Turn{Seq: len(b.h.Turns) + 1, Run: run, Index: i, Req: creq, Est: bytes/4 + out, Output: out,
			Submitted: time.Now(), Replica: -1}
		b.h.Turns = append(b.h.Turns, t)
		run.Turns = append(run.Turns, t)
		b.mu.Unlock()
		var last *testkit.Result
		err := call.Do(ctx, adapters.TurnCost{Input: bytes / 4, MaxOutput: out}, func(sctx context.Context) adapters.TurnReport {
			replica := adapters.RouteOf(sctx).Replica
			r, err := b.h.Engine.Do(sctx, creq, testkit.WithRun(run.ID), testkit.WithCaller(run.Caller),
				testkit.WithClass(string(run.Class)), testkit.OnReplica(replica))
			if err != nil {
				return adapters.TurnReport{Err: err}
			}
			b.mu.Lock()
			t.Replica = replica
			t.Attempts = append(t.Attempts, r.Record)
			if b.h.FirstResponse.IsZero() || r.Record.Finish.Before(b.h.FirstResponse) {
				b.h.FirstResponse = r.Record.Finish
			}
			b.mu.Unlock()
			last = r
			if r.Status != http.StatusOK {
				return adapters.TurnReport{Header: r.Header, Err: &engineErr{r}}
			}
			u := r.Response.Usage
			usage := agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
			if u.PromptTokensDetails != nil {
				usage.Cached = u.PromptTokensDetails.CachedTokens
			}
			return adapters.TurnReport{Usage: usage, Header: r.Header}
		})
		if err != nil {
			run.Failed = true
			run.End = time.Now()
			return agent.Result{Status: agent.StatusError, Error: err.Error(), Usage: total}, err
		}
		rec := last.Record
		t.Final = &rec
		u := last.Response.Usage
		total = total.Add(agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens})
		text = string(last.Response.Choices[0].Message.Content)
		run.Msgs = append(run.Msgs, testkit.Message{Role: "assistant", Content: testkit.Content(text)})
		if i == len(run.Spec.Turns)-1 {
			break
		}
		time.Sleep(ts.Pause) // the tool runs
		run.Msgs = append(run.Msgs, testkit.Message{Role: "user", Content: testkit.Content(
			text2(b.h.W.Seed, run.ID, i, ts.ToolTokens))})
	}
	run.End = time.Now()
	return agent.Result{Status: agent.StatusOK, Text: text, Output: text, Usage: total}, nil
}

// text2 is the tool result the harness appends after turn i of run id.
func text2(seed uint64, id string, i, tokens int) string {
	return text(rngFor(seed, "tool:"+id, uint64(i), 0), tokens)
}

// RuntimeRuns is how many times a workload runs through the runtime: goroutines that
// act at the same virtual instant may go in any order, so the figures vary a little from
// run to run, and the median of these runs is what is reported and held to the targets,
// with the spread beside it.
const RuntimeRuns = 5

// MedianOf is rs[0] with every figure a target reads replaced by its median over rs, and
// notes giving each such figure's median and spread.
func MedianOf(rs []*Result) (*Result, []string) {
	m := *rs[0]
	m.Latency = maps.Clone(rs[0].Latency)
	type fig struct {
		name string
		get  func(*Result) float64
		set  func(*Result, float64)
	}
	figs := []fig{
		{"interactive turn p99 (s)", func(r *Result) float64 { return r.Latency["interactive"].P99 },
			func(r *Result, v float64) { d := r.Latency["interactive"]; d.P99 = v; r.Latency["interactive"] = d }},
		{"interactive turn p50 (s)", func(r *Result) float64 { return r.Latency["interactive"].P50 },
			func(r *Result, v float64) { d := r.Latency["interactive"]; d.P50 = v; r.Latency["interactive"] = d }},
		{"longest interactive run (s)", func(r *Result) float64 { return r.InteractiveJCT }, func(r *Result, v float64) { r.InteractiveJCT = v }},
		{"batch makespan (s)", func(r *Result) float64 { return r.BatchMakespan }, func(r *Result, v float64) { r.BatchMakespan = v }},
		{"makespan (s)", func(r *Result) float64 { return r.Makespan }, func(r *Result, v float64) { r.Makespan = v }},
		{"prefix-cache hit ratio", func(r *Result) float64 { return r.CacheHit }, func(r *Result, v float64) { r.CacheHit = v }},
		{"oracle hit ratio", func(r *Result) float64 { return r.OracleHit }, func(r *Result, v float64) { r.OracleHit = v }},
	}
	var notes []string
	for _, f := range figs {
		var v []float64
		for _, r := range rs {
			v = append(v, f.get(r))
		}
		slices.Sort(v)
		med := v[len(v)/2]
		if len(v)%2 == 0 {
			med = (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		f.set(&m, med)
		notes = append(notes, fmt.Sprintf("%s %.3f [%.3f–%.3f]", f.name, med, v[0], v[len(v)-1]))
	}
	for _, r := range rs[1:] {
		m.RunsFailed = max(m.RunsFailed, r.RunsFailed)
		m.Unfinished = max(m.Unfinished, r.Unfinished)
		m.Stuck = m.Stuck || r.Stuck
	}
	return &m, []string{fmt.Sprintf("%s: the median of %d runs through the runtime, with the spread: %s", PolRuntime, len(rs),
		strings.Join(notes, "; "))}
}
