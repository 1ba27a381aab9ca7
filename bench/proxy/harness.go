package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/scheduler"
)

// The key's limits and the names the agents and the proxy use.
const (
	tpm, rpm = 6000, 30
	model    = "gpt-fake"
	backend  = "fake" // the proxy's upstream name; its lane is fake/gpt-fake
)

// Shape is the workload's size: Agents own-loop agents on one key, each working through
// Steps user steps; a step is two model turns (the model calls a tool, then answers in
// text after the tool result).
type Shape struct {
	Agents, Steps int
}

// Full is the benchmark's shape: 16 agents × 6 turns.
var Full = Shape{Agents: 16, Steps: 3}

// env is where a measurement runs: the clock every party reads (the engine, the agents,
// the proxy and its scheduler), the network between them, and the provider model the
// engine plays (the zero value is classic).
type env struct {
	clock testkit.Clock
	net   network
	model testkit.Provider
	wire  string // the agents' wire (see wires.go); "" = chat completions
}

// network connects the parties: serve puts a handler at a base URL, client reaches it.
type network interface {
	serve(h http.Handler) (base string, stop func(), err error)
	transport() http.RoundTripper
}

// target is where the agents point their base_url: the engine itself, or luft's proxy in
// front of it. start returns the base URL (ending in /v1) given the engine's.
// engine may change the engine's configuration for this target; retries is how many
// times its agents retry a request, given the SDK setting.
type target interface {
	name() string
	engine(cfg *testkit.Config)
	retries(sdk int) int
	start(e env, engine string) (base string, stop func(), err error)
}

// direct is no proxy: the agents talk to the engine and retry its 429s themselves.
// With free, the engine does not charge a refused request to the request budget, which
// OpenAI does ("unsuccessful requests contribute to your per-minute limit"), and the
// agents retry until they get an answer: a kinder provider and a patient client, for a
// baseline that finishes. (Patient clients of a provider that charges refusals
// livelock: their retries, each charged, keep the request budget empty.)
type direct struct{ free bool }

func (d direct) name() string {
	if d.free {
		return "direct-free"
	}
	return "direct"
}
func (d direct) engine(cfg *testkit.Config) { cfg.Limits.NoChargeRejected = d.free }
func (d direct) retries(sdk int) int {
	if d.free {
		return math.MaxInt
	}
	return sdk
}
func (direct) start(_ env, engine string) (string, func(), error) {
	return engine, func() {}, nil
}

// viaProxy is luft's proxy over an Executor configured as `luft proxy serve` configures
// one for an OpenAI-compatible backend with no limits set: 8 slots, scouting, budgets
// learned from the upstream's headers.
type viaProxy struct{}

func (viaProxy) name() string               { return "proxy" }
func (viaProxy) engine(cfg *testkit.Config) {}
func (viaProxy) retries(sdk int) int        { return sdk }
func (viaProxy) start(e env, engine string) (string, func(), error) {
	clk := schedClock{e.clock}
	sched := scheduler.NewExecutor(scheduler.Config{Lanes: map[string]scheduler.LaneConfig{
		backend + "/*": {Slots: 8, Scout: true}}}, clk)
	family := proxy.FamilyOpenAI
	if e.wire == wireMessages {
		family = proxy.FamilyAnthropic
	}
	p, err := proxy.New(proxy.Options{Upstreams: []proxy.Upstream{{Name: backend, Family: family, BaseURL: engine, Model: model}},
		Default: backend, Scheduler: sched, Clock: clk, Transport: e.net.transport()})
	if err != nil {
		return "", nil, err
	}
	base, stop, err := e.net.serve(p)
	if err != nil {
		p.Close()
		return "", nil, err
	}
	return base + "/v1", func() { stop(); p.Close() }, nil
}

// schedClock is a test kit clock as the scheduler's Clock.
type schedClock struct{ c testkit.Clock }

func (s schedClock) Now() time.Time { return s.c.Now() }
func (s schedClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	return s.c.AfterFunc(d, f)
}

// Result is one measurement: one target, one seed.
type Result struct {
	Wire        string  `json:"wire,omitempty"`
	Target      string  `json:"target"`
	Seed        uint64  `json:"seed"`
	Turns       int     `json:"turns"`        // the agents' turns that got an answer
	FailedRuns  int     `json:"failed_runs"`  // agents that gave up (retries exhausted)
	Requests    int     `json:"requests"`     // requests the engine saw
	RateLimited int     `json:"rate_limited"` // of them answered 429 (the engine's log)
	SeenByAgent int     `json:"seen_429"`     // 429s the agents themselves got
	Tokens      int     `json:"tokens"`       // tokens the engine charged
	Seconds     float64 `json:"seconds"`      // first request until the last agent finished or gave up, modelled time
	Floor       float64 `json:"floor_seconds"`
	Ratio       float64 `json:"ratio"`
	WallSeconds float64 `json:"wall_seconds"`
}

// engineConfig is the fake engine as bench/hosted has it: a hosted API with
// effectively unlimited slots, TPM 6,000 and RPM 30 (limits), completions of lognormal
// length (no max_tokens is sent), a tool call scripted for every user step.
func engineConfig(clock testkit.Clock, p testkit.Provider, seed uint64) testkit.Config {
	return testkit.Config{
		Clock: clock, Slots: 64, Models: []string{model},
		Lengths:         testkit.Lengths{Median: 60, Sigma: 0.8, Max: 600, Seed: seed},
		PrefillPerToken: 200 * time.Microsecond, DecodePerToken: 10 * time.Millisecond,
		Limits: limits(p),
		ToolRules: []testkit.ToolRule{{Match: "step", Rounds: 1,
			Calls: []testkit.ScriptedCall{{Name: "lookup", Arguments: `{"query":"rates"}`}}}},
	}
}

// limits is the key in provider model p, the same in every model: TPM 6,000 (Anthropic:
// 6,000 input and 1,500 output tokens) and RPM 30. Classic, the engine this bench has
// always measured, refills continuously and bills each completion when it ends.
func limits(p testkit.Provider) testkit.Limits {
	l := testkit.Limits{Provider: p, TPM: tpm, RPM: rpm}
	switch p {
	case testkit.ProviderClassic:
		l.Window, l.OutputAtEnd = testkit.Continuous, true
	case testkit.ProviderAnthropic:
		l.TPM, l.ITPM, l.OTPM = 0, tpm, tpm/4
	}
	return l
}

// horizon bounds a measurement in modelled time: agents still at work then count as
// having given up.
const horizon = 2 * time.Hour

// measure runs the agents of seed against tgt in e, their SDK set to retry a failed
// request sdkRetries times, and reads the engine's log.
func measure(ctx context.Context, e env, tgt target, shape Shape, seed uint64, sdkRetries int) (Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	over := e.clock.AfterFunc(horizon, func() { cancel(errHorizon) })
	defer over.Stop()
	cfg := engineConfig(e.clock, e.model, seed)
	tgt.engine(&cfg)
	eng := testkit.NewEngine(cfg)
	srv := testkit.NewServer(eng)
	engineBase, stopEngine, err := e.net.serve(srv.Handler())
	if err != nil {
		return Result{}, err
	}
	defer stopEngine()
	base, stop, err := tgt.start(e, engineBase+"/v1")
	if err != nil {
		return Result{}, err
	}
	defer stop()

	client := &http.Client{Transport: e.net.transport()}
	wall := time.Now()
	start := e.clock.Now()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		last   time.Time
		seen   int
		turns  int
		failed int
		errs   []error
	)
	for i := range shape.Agents {
		a := newAgent(i, seed, shape.Steps, base, client, e.clock, tgt.retries(sdkRetries))
		a.wire = e.wire
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := a.run(ctx)
			mu.Lock()
			defer mu.Unlock()
			seen += a.seen429
			turns += a.turns
			if a.end.After(last) {
				last = a.end
			}
			if err != nil {
				failed++
				if !errors.Is(err, errGaveUp) && !errors.Is(context.Cause(ctx), errHorizon) {
					errs = append(errs, err)
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return Result{}, errs[0]
	}
	r := Result{Target: tgt.name(), Seed: seed, Turns: turns, FailedRuns: failed, SeenByAgent: seen,
		WallSeconds: time.Since(wall).Seconds()}
	if trace != nil {
		for _, rec := range eng.Log() {
			fmt.Fprintf(trace, "  %-6s t=%7.2fs  status %d %-8s retry-after %6.2fs  prompt %5d  output %4d  took %.2fs\n",
				tgt.name(), rec.Arrival.Sub(start).Seconds(), rec.Status, rec.Error, rec.RetryAfter.Seconds(),
				rec.PromptTokens, rec.OutputTokens, rec.Finish.Sub(rec.Arrival).Seconds())
		}
	}
	log := eng.Log()
	for _, rec := range log {
		r.Requests++
		if rec.Status == http.StatusTooManyRequests {
			r.RateLimited++
			continue
		}
		r.Tokens += rec.ChargedTokens
	}
	r.Seconds = last.Sub(start).Seconds()
	// The net floor is the time the key's budgets force on the tokens and requests
	// answered, beyond the buckets' initial fill, at their refill rates: no client can
	// finish sooner, however it schedules.
	r.Floor = testkit.NetFloor(cfg.Limits, log).Seconds()
	if r.Floor > 0 {
		r.Ratio = r.Seconds / r.Floor
	}
	return r, nil
}

// trace, when set, receives every request the engine saw.
var trace io.Writer

// errHorizon ends a measurement that reached the horizon.
var errHorizon = errors.New("the measurement reached its horizon")

// errGaveUp is an agent whose request failed after every retry the SDK policy allows.
var errGaveUp = errors.New("gave up after the SDK's retries")

// agent is one own-loop agent: it keeps its conversation, calls the model, runs the tool
// the model asks for (a pause, then a result), and retries failed calls the way the
// OpenAI SDKs do. Everything it sends is drawn from (seed, agent), so every target sees
// the same conversations.
type agent struct {
	id      int
	wire    string
	base    string
	client  *http.Client
	clock   testkit.Clock
	rng     *rand.Rand
	retries int
	msgs    []testkit.Message
	steps   []string
	results []string
	pauses  []time.Duration

	turns, seen429 int
	end            time.Time
}

func newAgent(id int, seed uint64, steps int, base string, client *http.Client, clock testkit.Clock, retries int) *agent {
	rng := rand.New(rand.NewPCG(seed, uint64(id)+1))
	words := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString([...]string{" data", " rate", " plan", " tool", " row"}[(i*7+id)%5])
		}
		return b.String()
	}
	a := &agent{id: id, base: base, client: client, clock: clock, retries: retries,
		rng: rand.New(rand.NewPCG(seed, uint64(id)+1001))}
	a.msgs = []testkit.Message{{Role: "system", Content: testkit.Content(fmt.Sprintf(
		"You are agent %d. Work through the user's steps; call lookup for data.%s", id, words(60)))}}
	for s := range steps {
		a.steps = append(a.steps, fmt.Sprintf("step %d of task %d (seed %d):%s", s+1, id, seed, words(100+rng.IntN(101))))
		a.results = append(a.results, fmt.Sprintf("lookup result %d.%d:%s", id, s+1, words(60+rng.IntN(121))))
		a.pauses = append(a.pauses, time.Duration((0.2+0.8*rng.Float64())*float64(time.Second)))
	}
	return a
}

var tools = []testkit.Tool{{Type: "function", Function: testkit.FunctionDef{Name: "lookup",
	Description: "look up data", Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)}}}

func (a *agent) run(ctx context.Context) error {
	for s := range a.steps {
		a.msgs = append(a.msgs, testkit.Message{Role: "user", Content: testkit.Content(a.steps[s])})
		for {
			msg, err := a.call(ctx)
			if err != nil {
				a.end = a.clock.Now()
				return fmt.Errorf("agent %d step %d: %w", a.id, s+1, err)
			}
			a.turns++
			a.end = a.clock.Now()
			a.msgs = append(a.msgs, msg)
			if len(msg.ToolCalls) == 0 {
				break
			}
			if err := a.sleep(ctx, a.pauses[s]); err != nil {
				return err
			}
			for _, tc := range msg.ToolCalls {
				a.msgs = append(a.msgs, testkit.Message{Role: "tool", ToolCallID: tc.ID, Content: testkit.Content(a.results[s])})
			}
		}
	}
	return nil
}

// call sends one chat completions request, retrying as the OpenAI SDKs do: on 408, 409,
// 429, 5xx or no response, wait retry-after-ms, else retry-after, when it is at most
// 2 minutes (a longer one is not retried), else 0.5 s × 2ⁿ up to 8 s less up to 25 %
// jitter; at most a.retries retries.
func (a *agent) call(ctx context.Context) (testkit.Message, error) {
	body, err := encode(a.wire, a.msgs, tools)
	if err != nil {
		return testkit.Message{}, err
	}
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+endpoint(a.wire), bytes.NewReader(body))
		if err != nil {
			return testkit.Message{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		if a.wire == wireMessages {
			req.Header.Set("x-api-key", "sk-bench")
			req.Header.Set("anthropic-version", "2023-06-01")
		} else {
			req.Header.Set("Authorization", "Bearer sk-bench")
		}
		resp, err := a.client.Do(req)
		var status int
		var header http.Header
		if err == nil {
			status, header = resp.StatusCode, resp.Header
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr != nil {
				err = rerr
			} else if status == http.StatusOK {
				return decode(a.wire, b)
			} else if !retryable(status) {
				return testkit.Message{}, fmt.Errorf("HTTP %d: %.300s", status, b)
			}
		}
		if ctx.Err() != nil {
			return testkit.Message{}, ctx.Err()
		}
		if status == http.StatusTooManyRequests {
			a.seen429++
		}
		wait, retry := a.backoff(attempt, header)
		if attempt >= a.retries || !retry {
			return testkit.Message{}, fmt.Errorf("%w (last: HTTP %d, %v)", errGaveUp, status, err)
		}
		if err := a.sleep(ctx, wait); err != nil {
			return testkit.Message{}, err
		}
	}
}

func retryable(status int) bool {
	return status == 408 || status == 409 || status == 429 || status >= 500
}

// backoff is the SDKs' wait before retry n+1, and whether to retry at all.
func (a *agent) backoff(n int, h http.Header) (time.Duration, bool) {
	const most = 2 * time.Minute
	server := time.Duration(-1)
	if v, err := strconv.ParseFloat(h.Get("retry-after-ms"), 64); err == nil && v > 0 {
		server = time.Duration(v * float64(time.Millisecond))
	} else if v, err := strconv.ParseFloat(h.Get("retry-after"), 64); err == nil && v > 0 {
		server = time.Duration(v * float64(time.Second))
	}
	switch {
	case server > most:
		return 0, false
	case server > 0:
		return server, true
	}
	d := min(0.5*math.Pow(2, float64(n)), 8)
	return time.Duration(d * (1 - 0.25*a.rng.Float64()) * float64(time.Second)), true
}

func (a *agent) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-a.clock.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loopback is the real network on 127.0.0.1, for the scaled wall clock.
type loopback struct{ tr *http.Transport }

func newLoopback() *loopback {
	return &loopback{tr: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute,
		DisableCompression: true}}
}

func (l *loopback) transport() http.RoundTripper { return l.tr }

func (l *loopback) serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}
