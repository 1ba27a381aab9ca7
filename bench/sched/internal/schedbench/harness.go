// Package schedbench is the agent harness and workload set behind `go run ./bench/sched`
// (issue 4, item 4): agent runs driven against luft's fake engine (internal/testkit) on a
// virtual clock, with the admission policy in front of the engine swapped between luft's
// decision core and the baselines, and metrics taken from the engine's ground-truth log.
//
// Determinism. Everything runs on one goroutine: the driver loop alternates virtual-clock
// steps (engine prefill/decode timers, tool pauses, client backoffs) and scheduler actions
// (Submit, Complete, Tick at the core's NextWake). Engine callbacks and timers never act
// directly: they post closures that the loop runs in order once the clock step returns, so
// no scheduler call is ever nested in another. Every random draw comes from a PCG seeded by
// (workload seed, stream, chain, run), so each policy replays the same trace. The only wall
// time read anywhere is around the decision core's calls (decision cost).
package schedbench

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// T0 is the virtual start of every simulation.
var T0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Model is the model id every request names; Lane is the luft lane it maps to.
const (
	Model = "m"
	Lane  = "fake/m"
)

// TurnSpec is one model turn of a run, fixed by the trace.
type TurnSpec struct {
	Output     int           // max_tokens: the engine generates exactly this many
	ToolTokens int           // tokens of the tool result appended after this turn (not after the last)
	Pause      time.Duration // tool pause after this turn (not after the last)
}

// RunSpec is one agent run: a shared system prompt, a unique task, then turns.
type RunSpec struct {
	System string // shared by the runs of a stream: a cacheable prefix
	Task   string // unique to the run
	Turns  []TurnSpec
}

// Stream generates a family of runs of one caller and class.
//
//   - Parallel chains each run Runs runs back to back (Runs = 0: as long as For allows),
//     the next run of a chain starting when the previous one ends: a closed loop that
//     keeps the caller backlogged.
//   - With Every > 0 the stream is open-loop instead: every Every, Parallel runs start at
//     once (bursts), Runs bursts or as long as For allows.
//   - For > 0 bounds the time after the stream's start at which new runs may start.
//   - After names a stream whose completion starts this one (Start is then counted from
//     that moment).
type Stream struct {
	Name         string
	Caller       string
	Class        agent.Class
	Start        time.Duration
	After        string
	Parallel     int
	Runs         int
	For          time.Duration
	Every        time.Duration
	SystemTokens int // the shared system prompt of every run of the stream
	// Gen builds run number j of chain (or burst member) c; rng is seeded by
	// (workload, stream, c, j). It fills Task and Turns; System defaults to the stream's.
	Gen func(rng *rand.Rand, c, j int) RunSpec
}

// Workload is one benchmark scenario.
type Workload struct {
	Name    string
	Engine  testkit.Config // Clock is set by the harness
	Slots   int            // luft lane slots per replica (0 = unlimited)
	GateCap int            // FIFO/RR gate slots
	Seed    uint64
	Streams []*Stream
	Horizon time.Duration // safety stop on virtual time
}

// Run is a live run.
type Run struct {
	ID       string
	Stream   *Stream
	Caller   string
	Class    agent.Class
	Spec     RunSpec
	Start    time.Time
	End      time.Time
	Failed   bool
	Msgs     []testkit.Message
	Turns    []*Turn
	chain    int
	sharedPT int       // prompt tokens of the shared system message (role marker included)
	admitted time.Time // when luft first admitted a turn of the run
}

// Turn is one model turn of a run as it goes through the policy and the engine.
type Turn struct {
	Seq       int // harness-wide, from 1
	Run       *Run
	Index     int
	Req       *testkit.ChatRequest
	Est       int // estimate handed to the scheduler: bytes/4 + max_tokens, as the runtime does
	Output    int
	Submitted time.Time
	Attempts  []testkit.Record
	Final     *testkit.Record // the successful attempt
	Failed    string          // why the turn was given up
	Replica   int             // replica of the last attempt, -1 when routed by the engine
	Oracle    int             // cached prompt tokens with an unbounded, shared cache (metrics)
}

// Continuation reports whether the turn follows an earlier turn of its run.
func (t *Turn) Continuation() bool { return t.Index > 0 }

// Policy is what stands between the agents and the engine.
type Policy interface {
	Name() string
	Start(h *Harness)
	// Submit: the agent wants to run t now.
	Submit(t *Turn)
	// Done: the engine answered one attempt of t (the harness already logged it).
	Done(t *Turn, r *testkit.Result)
	// Wake is when the policy next needs Tick; zero = not before the next event.
	Wake() time.Time
	Tick()
}

// Harness drives one workload under one policy.
type Harness struct {
	W      *Workload
	Clock  *testkit.VirtualClock
	Engine *testkit.Engine
	Pol    Policy

	pending []func()
	Runs    []*Run
	Turns   []*Turn
	streams map[string]*streamState

	FirstResponse time.Time // when the first answer of any kind reached a client
	Stuck         bool      // the loop ended with runs unfinished
	// Origin is when the simulation started, for makespans; zero = T0.
	Origin time.Time
}

func (h *Harness) origin() time.Time {
	if h.Origin.IsZero() {
		return T0
	}
	return h.Origin
}

type streamState struct {
	s            *Stream
	active       int
	closed       bool // no further run will start
	startAt      time.Time
	system       string
	systemPT     int // prompt tokens of the shared system message
	chainRuns    map[int]int
	closedChains int
	complete     func()
}

// NewHarness builds the engine and the streams for w under pol.
func NewHarness(w *Workload, pol Policy) *Harness {
	clock := testkit.NewVirtualClock(T0)
	ec := w.Engine
	ec.Clock = clock
	h := &Harness{W: w, Clock: clock, Engine: testkit.NewEngine(ec), Pol: pol,
		streams: map[string]*streamState{}}
	return h
}

// Now is the virtual time.
func (h *Harness) Now() time.Time { return h.Clock.Now() }

// post queues fn to run in the driver loop, after the current clock step.
func (h *Harness) post(fn func()) { h.pending = append(h.pending, fn) }

// After runs fn in the driver loop d from now.
func (h *Harness) After(d time.Duration, fn func()) {
	h.Clock.AfterFunc(d, func() { h.post(fn) })
}

func (h *Harness) drain() {
	for len(h.pending) > 0 {
		fn := h.pending[0]
		h.pending[0] = nil
		h.pending = h.pending[1:]
		fn()
	}
}

// Send hands one attempt of t to the engine, on replica (or routed by the engine when
// replica < 0).
func (h *Harness) Send(t *Turn, replica int) {
	t.Replica = replica
	opts := []testkit.CallOption{testkit.WithRun(t.Run.ID), testkit.WithCaller(t.Run.Caller),
		testkit.WithClass(string(t.Run.Class))}
	if replica >= 0 {
		opts = append(opts, testkit.OnReplica(replica))
	}
	h.Engine.Submit(t.Req, func(r *testkit.Result) {
		h.post(func() {
			if h.FirstResponse.IsZero() || r.Record.Finish.Before(h.FirstResponse) {
				h.FirstResponse = r.Record.Finish
			}
			t.Attempts = append(t.Attempts, r.Record)
			h.Pol.Done(t, r)
		})
	}, opts...)
}

// Finish records t's successful attempt and moves its run on: a tool pause, then the
// next turn; or the end of the run.
func (h *Harness) Finish(t *Turn, r *testkit.Result) {
	rec := r.Record
	t.Final = &rec
	run := t.Run
	content := ""
	if r.Response != nil && len(r.Response.Choices) > 0 {
		content = string(r.Response.Choices[0].Message.Content)
	}
	run.Msgs = append(run.Msgs, testkit.Message{Role: "assistant", Content: testkit.Content(content)})
	if t.Index == len(run.Spec.Turns)-1 {
		h.endRun(run)
		return
	}
	ts := run.Spec.Turns[t.Index]
	h.After(ts.Pause, func() {
		run.Msgs = append(run.Msgs, testkit.Message{Role: "user", Content: testkit.Content(
			text(rngFor(h.W.Seed, "tool:"+run.ID, uint64(t.Index), 0), ts.ToolTokens))})
		h.submitTurn(run, t.Index+1)
	})
}

// Fail gives t up: its run ends as failed.
func (h *Harness) Fail(t *Turn, why string) {
	t.Failed = why
	t.Run.Failed = true
	h.endRun(t.Run)
}

func (h *Harness) endRun(run *Run) {
	run.End = h.Now()
	st := h.streams[run.Stream.Name]
	st.active--
	if !st.closed && run.Stream.Every == 0 {
		h.startRun(st, run.chain)
	}
	h.checkComplete(st)
}

func (h *Harness) checkComplete(st *streamState) {
	if st.closed && st.active == 0 && st.complete != nil {
		f := st.complete
		st.complete = nil
		f()
	}
}

func (h *Harness) submitTurn(run *Run, i int) {
	ts := run.Spec.Turns[i]
	out := ts.Output
	req := &testkit.ChatRequest{Model: Model, Messages: slices.Clone(run.Msgs), MaxTokens: &out}
	bytes := 0
	for _, m := range run.Msgs {
		bytes += len(m.Content)
	}
	t := &Turn{Seq: len(h.Turns) + 1, Run: run, Index: i, Req: req, Est: bytes/4 + out, Output: out,
		Submitted: h.Now(), Replica: -1}
	h.Turns = append(h.Turns, t)
	run.Turns = append(run.Turns, t)
	h.Pol.Submit(t)
}

// open reports whether the stream may still start runs at now.
func (st *streamState) open(now time.Time) bool {
	return st.s.For <= 0 || now.Before(st.startAt.Add(st.s.For))
}

// newRun starts run j of chain c.
func (h *Harness) newRun(st *streamState, c, j int, id string) {
	s := st.s
	st.active++
	spec := s.Gen(rngFor(h.W.Seed, s.Name, uint64(c), uint64(j)), c, j)
	run := &Run{ID: id, Stream: s, Caller: s.Caller, Class: s.Class, Spec: spec, Start: h.Now(), chain: c,
		sharedPT: st.systemPT}
	if spec.System == "" {
		run.Spec.System = st.system
	} else {
		run.sharedPT = 1 + testkit.CountTokens(spec.System)
	}
	spec = run.Spec
	run.Msgs = []testkit.Message{{Role: "system", Content: testkit.Content(spec.System)},
		{Role: "user", Content: testkit.Content(spec.Task)}}
	h.Runs = append(h.Runs, run)
	h.submitTurn(run, 0)
}

// startRun starts the next run of chain c of a closed-loop stream, or closes the chain.
func (h *Harness) startRun(st *streamState, c int) {
	s := st.s
	j := st.chainRuns[c]
	if (s.Runs > 0 && j >= s.Runs) || !st.open(h.Now()) {
		st.closedChains++
		if st.closedChains >= s.Parallel {
			st.closed = true
		}
		return
	}
	st.chainRuns[c]++
	h.newRun(st, c, j, fmt.Sprintf("%s-%d-%d", s.Name, c, j))
}

// begin starts a stream: its chains, or its bursts.
func (h *Harness) begin(st *streamState) {
	s := st.s
	st.startAt = h.Now()
	if s.Every > 0 {
		var burst func(k int)
		burst = func(k int) {
			if !st.open(h.Now()) || (s.Runs > 0 && k >= s.Runs) {
				st.closed = true
				h.checkComplete(st)
				return
			}
			for c := 0; c < s.Parallel; c++ {
				h.newRun(st, c, k, fmt.Sprintf("%s-%d-%d", s.Name, k, c))
			}
			h.After(s.Every, func() { burst(k + 1) })
		}
		burst(0)
		return
	}
	for c := 0; c < s.Parallel; c++ {
		h.startRun(st, c)
	}
	h.checkComplete(st)
}

// Run drives the simulation to its end and returns the harness for metrics.
func (h *Harness) Run() *Harness {
	h.Pol.Start(h)
	for _, s := range h.W.Streams {
		st := &streamState{s: s, chainRuns: map[int]int{},
			system: text(rngFor(h.W.Seed, "system:"+s.Name, 0, 0), s.SystemTokens)}
		st.systemPT = 1 + testkit.CountTokens(st.system)
		h.streams[s.Name] = st
	}
	for _, s := range h.W.Streams {
		st := h.streams[s.Name]
		if s.After == "" {
			h.After(s.Start, func() { h.begin(st) })
			continue
		}
		dep := h.streams[s.After]
		prev := dep.complete
		dep.complete = func() {
			if prev != nil {
				prev()
			}
			h.After(s.Start, func() { h.begin(st) })
		}
	}
	horizon := T0.Add(h.W.Horizon)
	var lastTick time.Time
	for {
		h.drain()
		now := h.Now()
		next, ok := h.Clock.Next()
		w := h.Pol.Wake()
		if !w.IsZero() && !w.After(now) && lastTick.Equal(now) {
			w = time.Time{} // ticked at this instant already; wait for the clock
		}
		if !w.IsZero() && (!ok || !w.After(next)) {
			if w.After(horizon) {
				break
			}
			if w.After(now) {
				h.Clock.AdvanceTo(w)
				h.drain()
			}
			lastTick = h.Now()
			h.Pol.Tick()
			continue
		}
		if !ok || next.After(horizon) {
			break
		}
		h.Clock.Step()
	}
	for _, r := range h.Runs {
		if r.End.IsZero() {
			h.Stuck = true
		}
	}
	for _, st := range h.streams {
		if !st.closed {
			h.Stuck = true
		}
	}
	return h
}

// rngFor is the deterministic source for one (seed, name, a, b).
func rngFor(seed uint64, name string, a, b uint64) *rand.Rand {
	f := fnv.New64a()
	f.Write([]byte(name))
	return rand.New(rand.NewPCG(seed^f.Sum64(), a*0x9e3779b97f4a7c15^b^0x5851f42d4c957f2d))
}

// text returns n tokens of random four-letter words (exactly n tokens under the engine's
// tokenizer; five bytes each with the space, so bytes/4 over-estimates by a quarter, a
// stable error the scheduler's estimator learns).
func text(rng *rand.Rand, n int) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	b.Grow(5 * n)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		for k := 0; k < 4; k++ {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	return b.String()
}

// LogNormal draws a lognormal duration with the given median and σ.
func LogNormal(rng *rand.Rand, median time.Duration, sigma float64) time.Duration {
	return time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
}

// Around draws an integer uniformly in [mean-spread, mean+spread].
func Around(rng *rand.Rand, mean, spread int) int {
	if spread <= 0 {
		return mean
	}
	return mean - spread + rng.IntN(2*spread+1)
}
