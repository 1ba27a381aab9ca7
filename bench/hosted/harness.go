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
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// The key's limits: 6,000 tokens (Anthropic: input tokens, and a quarter of that in
// output tokens) and 30 requests a minute.
const (
	tpm  = 6000
	rpm  = 30
	otpm = tpm / 4
)

// model is a provider model the engine plays.
type model struct {
	provider testkit.Provider
	limits   testkit.Limits
}

func (m model) name() string { return m.provider.String() }

// modelFor is the engine's limits for provider p: the same key (TPM 6,000, RPM 30) in
// every model. Classic is the engine this bench has always measured: continuous refill,
// the output billed when each request ends, 429s with retry-after and retry-after-ms.
func modelFor(p testkit.Provider) model {
	l := testkit.Limits{Provider: p, TPM: tpm, RPM: rpm}
	switch p {
	case testkit.ProviderClassic:
		l.Window, l.OutputAtEnd = testkit.Continuous, true
	case testkit.ProviderAnthropic:
		l.TPM, l.ITPM, l.OTPM = 0, tpm, otpm
	}
	return model{provider: p, limits: l}
}

// parseModels reads -model: a comma-separated list of provider models, or "all".
func parseModels(s string) ([]model, error) {
	if strings.TrimSpace(s) == "all" {
		var out []model
		for _, p := range testkit.Providers() {
			out = append(out, modelFor(p))
		}
		return out, nil
	}
	var out []model
	for _, n := range strings.Split(s, ",") {
		p, err := testkit.ParseProvider(n)
		if err != nil {
			return nil, fmt.Errorf("-model: %w (or all)", err)
		}
		out = append(out, modelFor(p))
	}
	return out, nil
}

// lengths are the engine's completion lengths for seed s.
func lengths(s uint64) testkit.Lengths {
	return testkit.Lengths{Median: 60, Sigma: 0.8, Max: 600, Seed: s}
}

func engineConfig(clock testkit.Clock, m model, seed uint64) testkit.Config {
	return testkit.Config{
		Clock: clock, Slots: 64, Lengths: lengths(seed),
		PrefillPerToken: 200 * time.Microsecond, DecodePerToken: 10 * time.Millisecond,
		Limits: m.limits,
	}
}

// workflow runs args.branches branches of args.calls sequential agent calls; the
// prompts come from args so every seed sends its own sizes.
const workflow = `function main()
  local branches = {}
  for b = 1, args.branches do branches[b] = b end
  local out = parallel(branches, function(b)
    local n = 0
    for i = 1, args.calls do
      local r = agent{prompt = args.prompts[(b - 1) * args.calls + i]}
      n = n + r.tokens
    end
    return n
  end)
  local total = 0
  for _, n in ipairs(out) do total = total + n end
  report({tokens = total})
end`

type workload struct {
	name            string
	branches, calls int
}

func (w workload) shape() string { return fmt.Sprintf("%d×%d", w.branches, w.calls) }

var workloads = []workload{{"a", 1, 12}, {"b", 4, 6}, {"c", 16, 6}}

// prompts are the workload's prompts for seed: ~1,300 tokens each, one per word of at
// most four letters.
func prompts(w workload, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 0x1f7))
	out := make([]string, w.branches*w.calls)
	for i := range out {
		words := 1200 + rng.IntN(201)
		var b strings.Builder
		fmt.Fprintf(&b, "task %d seed %d:", i, seed)
		for range words {
			b.WriteString(" data")
		}
		out[i] = b.String()
	}
	return out
}

type result struct {
	Model    string `json:"model"`
	Client   string `json:"client"` // luft or direct
	Workload string `json:"workload"`
	Seed     uint64 `json:"seed"`
	Calls    int    `json:"calls"`
	// Failed is, for luft, agent calls that ended without an answer (the workflow goes
	// on); for direct, branches whose call gave up after the SDK's retries (their later
	// calls never sent).
	Failed     int    `json:"failed,omitempty"`
	FirstError string `json:"first_error,omitempty"`
	// ByDimension counts the 429s by the budget that refused them (the engine's
	// Record.LimitedBy: requests, tokens, input_tokens, output_tokens), "/s" added when
	// the bucket had room but its one-second window did not.
	ByDimension  map[string]int `json:"rate_limited_by,omitempty"`
	Requests     int            `json:"requests"`
	RateLimited  int            `json:"rate_limited"`
	Extra        int            `json:"extra_requests"`
	Tokens       int            `json:"tokens"`
	Seconds      float64        `json:"seconds"`       // modelled time
	Floor        float64        `json:"floor_seconds"` // testkit.NetFloor of the engine's log
	Ratio        float64        `json:"ratio"`         // Seconds ÷ Floor
	WallSeconds  float64        `json:"wall_seconds"`
	Status       string         `json:"status,omitempty"`
	RateLimitEvs int            `json:"rate_limit_waits,omitempty"`
}

// env is where a measurement runs: the clock every party reads and the network between
// them (loopback on a scaled clock, or memory in a synctest bubble).
type env struct {
	clock testkit.Clock
	net   network
}

type network interface {
	serve(h http.Handler) (base string, stop func(), err error)
	transport() http.RoundTripper
}

// schedClock is a test kit clock as the scheduler's Clock.
type schedClock struct{ c testkit.Clock }

func (s schedClock) Now() time.Time { return s.c.Now() }
func (s schedClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	return s.c.AfterFunc(d, f)
}

// measure runs workload w of seed against model m with the given client: "luft" (the
// runtime and scheduler in front of the openai backend) or "direct" (each branch calls
// the engine itself, retrying as the OpenAI SDKs do, at most retries times a call).
func measure(e env, m model, w workload, seed uint64, client string, retries int) (result, error) {
	eng := testkit.NewEngine(engineConfig(e.clock, m, seed))
	base, stop, err := e.net.serve(testkit.NewServer(eng).Handler())
	if err != nil {
		return result{}, err
	}
	defer stop()
	r := result{Model: m.name(), Client: client, Workload: w.name, Seed: seed, Calls: w.branches * w.calls}
	wall := time.Now()
	start := e.clock.Now()
	var end time.Time
	switch client {
	case "luft":
		end, err = runLuft(e, base+"/v1", w, seed, &r)
	case "direct":
		end, err = runDirect(e, base+"/v1", w, seed, retries, &r)
	default:
		err = fmt.Errorf("unknown client %q", client)
	}
	if err != nil {
		return r, err
	}
	r.WallSeconds = time.Since(wall).Seconds()
	log := eng.Log()
	if *verbose {
		trace(log, start)
	}
	answered := 0
	for _, rec := range log {
		r.Requests++
		switch rec.Status {
		case http.StatusTooManyRequests:
			r.RateLimited++
			if r.ByDimension == nil {
				r.ByDimension = map[string]int{}
			}
			dim := rec.LimitedBy
			if rec.Quantum {
				dim += "/s"
			}
			r.ByDimension[dim]++
		case http.StatusOK:
			answered++
		}
		r.Tokens += rec.ChargedTokens
	}
	r.Extra = r.Requests - answered
	if client == "luft" && r.Status != string(runtime.StatusCompleted) {
		r.Failed = max(r.Failed, r.Calls-answered)
	}
	r.Seconds = end.Sub(start).Seconds()
	r.Floor = testkit.NetFloor(m.limits, log).Seconds()
	if r.Floor > 0 {
		r.Ratio = r.Seconds / r.Floor
	}
	return r, nil
}

func runLuft(e env, base string, w workload, seed uint64, r *result) (time.Time, error) {
	dir, err := os.MkdirTemp("", "luft-hosted-")
	if err != nil {
		return time.Time{}, err
	}
	defer os.RemoveAll(dir)
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		return time.Time{}, err
	}
	defer st.Close()
	backend, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: "hosted", BaseURL: base, APIKey: "k", Model: "luft-fake",
		HTTPClient: &http.Client{Transport: e.net.transport()}})
	if err != nil {
		return time.Time{}, err
	}
	clk := schedClock{e.clock}
	ex := scheduler.NewExecutor(scheduler.Config{Lanes: map[string]scheduler.LaneConfig{"hosted/*": {Scout: true}}}, clk)
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("hosted", backend),
		Scheduler: ex, Clock: clk, Caller: "bench"})
	if err != nil {
		return time.Time{}, err
	}
	ps := prompts(w, seed)
	args := make([]any, len(ps))
	for i, p := range ps {
		args[i] = p
	}
	run, err := svc.Start(context.Background(), runtime.Spec{Path: "hosted.lua", Source: []byte(workflow),
		Args:        map[string]any{"branches": float64(w.branches), "calls": float64(w.calls), "prompts": args},
		Concurrency: w.branches})
	if err != nil {
		return time.Time{}, err
	}
	for ev := range run.Subscribe(context.Background(), 0) {
		switch ev.Type {
		case "rate_limit":
			r.RateLimitEvs++
		case "agent_done":
			// A call that failed (the workflow goes on without its answer).
			if st, _ := ev.Data["status"].(string); st != "ok" {
				r.Failed++
				if r.FirstError == "" {
					r.FirstError = fmt.Sprintf("%s: %v", st, ev.Data["error"])
				}
			}
		}
	}
	res := run.Wait()
	end := e.clock.Now()
	r.Status = string(res.Status)
	if res.Status != runtime.StatusCompleted {
		// A run luft suspended or failed is a figure, not the bench's error: its calls
		// without an answer count as failed (measure), and the reason is kept.
		r.FirstError = fmt.Sprintf("run %s: %v", res.Status, res.Err)
	}
	return end, nil
}

// errGaveUp is a call that failed after every retry the SDK policy allows.
var errGaveUp = errors.New("gave up after the SDK's retries")

// runDirect is the naive baseline: each branch sends its calls one after another
// straight to the engine, no max_tokens, retrying a failed call the way the OpenAI SDKs
// do (retry-after-ms, else retry-after when at most 2 minutes, else 0.5 s × 2ⁿ up to
// 8 s less up to 25 % jitter). A branch whose call gives up stops.
func runDirect(e env, base string, w workload, seed uint64, retries int, r *result) (time.Time, error) {
	ps := prompts(w, seed)
	client := &http.Client{Transport: e.net.transport()}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		last time.Time
		errs []error
	)
	for b := range w.branches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(b)+77))
			var err error
			for i := range w.calls {
				if err = directCall(e.clock, client, base, ps[b*w.calls+i], retries, rng); err != nil {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if now := e.clock.Now(); now.After(last) {
				last = now
			}
			if errors.Is(err, errGaveUp) {
				r.Failed++
			} else if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return last, errs[0]
	}
	return last, nil
}

func directCall(clock testkit.Clock, client *http.Client, base, prompt string, retries int, rng *rand.Rand) error {
	body, err := json.Marshal(testkit.ChatRequest{Model: "luft-fake", Messages: []testkit.Message{{Role: "user", Content: testkit.Content(prompt)}}})
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		resp, err := client.Post(base+"/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500:
			return fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, b)
		}
		wait, retry := sdkBackoff(attempt, resp.Header, rng)
		if attempt >= retries || !retry {
			return fmt.Errorf("%w (last: HTTP %d)", errGaveUp, resp.StatusCode)
		}
		<-clock.After(wait)
	}
}

// sdkBackoff is the OpenAI SDKs' wait before retry n+1, and whether to retry at all.
func sdkBackoff(n int, h http.Header, rng *rand.Rand) (time.Duration, bool) {
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
	return time.Duration(d * (1 - 0.25*rng.Float64()) * float64(time.Second)), true
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
	return "http://" + ln.Addr().String(), func() { srv.Close(); l.tr.CloseIdleConnections() }, nil
}
