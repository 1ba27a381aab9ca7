package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/internal/testkit"
)

var (
	tableModels = flag.String("model", "all", "TestModelsTable: provider models, comma-separated, or all")
	tableSeeds  = flag.Int("seeds", 10, "TestModelsTable: seeds per workload")
	tableWorks  = flag.String("w", "a,b,c", "TestModelsTable: workloads")
	tableDirect = flag.Bool("direct", false, "TestModelsTable: also run the naive baseline beside luft")
	tableTrace  = flag.Bool("trace", false, "TestModelsTable: print every request the engine saw")
)

// inBubble is measure on the virtual clock of a testing/synctest bubble, HTTP in memory:
// the clock moves only when every goroutine waits, so the figures are the same on an idle
// machine and on a busy one.
func inBubble(t *testing.T) measureFunc {
	return func(_ env, m model, w workload, seed uint64, client string, retries int) (result, error) {
		var r result
		var err error
		synctest.Test(t, func(t *testing.T) {
			r, err = measure(env{clock: testkit.RealClock{}, net: newMemNet()}, m, w, seed, client, retries)
		})
		return r, err
	}
}

// The table of issue 22, as a test that fails when luft misses a target: every
// provider model × workload × seed on a virtual clock, each run through luft held to
// its model's targets (targets: 0 × 429, silent at most 3 while it learns; no failed
// call; time ≤ 1.05 × the net floor, classic ≤ 1.03× and ≤ 2 extra requests). The
// models × workloads run in parallel, each over its seeds; the summary table is logged.
//
//	go test ./bench/hosted -run TestModelsTable -v [-args -model all -seeds 10 -direct]
func TestModelsTable(t *testing.T) {
	if testing.Short() {
		t.Skip("minutes of modelled traffic per model")
	}
	*verbose = *tableTrace
	seeds := *tableSeeds
	if raceEnabled && seeds > 1 {
		t.Logf("race detector on: 1 seed per cell instead of %d (the suite runs the whole table without it)", seeds)
		seeds = 1
	}
	o, err := newOptions(*tableModels, *tableWorks, seeds, *tableDirect, 8)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		all []result
	)
	t.Run("group", func(t *testing.T) {
		for _, m := range o.models {
			for _, wl := range o.works {
				cell := m.name() + "/" + wl.shape()
				t.Run(cell, func(t *testing.T) {
					t.Parallel()
					one := o
					one.models, one.works = []model{m}, []workload{wl}
					if wl.branches >= 16 {
						// A 16×6 run is ~20 modelled minutes and 6× the turns of 4×6: half
						// the seeds keep the whole table under a minute on a shared
						// 2-core machine (-seeds 20 runs 10 of them).
						one.seeds = max(1, (o.seeds+1)/2)
					}
					var buf bytes.Buffer
					rs, err := runTable(&buf, one, func() env { return env{} }, inBubble(t))
					if err != nil {
						t.Fatal(err)
					}
					var misses []string
					for _, r := range rs {
						if r.Client != "luft" {
							continue
						}
						if a, b, c := met(r); !a || !b || !c {
							m429, mx, mr := targets(r.Model)
							misses = append(misses, fmt.Sprintf("%s %s seed %d: %d × 429 (target ≤ %d), %d extra (target ≤ %d, -1 none), %d failed (%s), time %.3f × the net floor (target ≤ %.2f)",
								r.Model, wl.shape(), r.Seed, r.RateLimited, m429, r.Extra, mx, r.Failed, r.FirstError, r.Ratio, mr))
						}
					}
					why, known := missed[cell]
					switch {
					case len(misses) > 0 && !known:
						for _, m := range misses {
							t.Error(m)
						}
					case len(misses) > 0:
						t.Logf("known miss (%s):\n%s", why, strings.Join(misses, "\n"))
					case known:
						// Logged, not failed: a cell at the line may flip from run to
						// run (goroutines interleave differently in the bubble).
						t.Logf("%s meets every target in %d seeds now: take it off missed once it does so steadily", cell, one.seeds)
					}
					if t.Failed() {
						t.Log("\n" + buf.String())
					}
					mu.Lock()
					all = append(all, rs...)
					mu.Unlock()
				})
			}
		}
	})
	var buf bytes.Buffer
	machine.Print(&buf)
	summarise(&buf, o, all)
	t.Log("\n" + buf.String())
}

// missed are the model × workload cells where luft does not yet meet its targets in
// every seed, and what it misses. TestModelsTable fails when any other cell misses a
// target, and says when one of these meets them all (take it off the list then).
var missed = map[string]string{
	// Without a 429 a provider that refuses a request whose completion would not fit
	// (strict) cannot be told from one that bills the completion when it ends
	// (classic), so a reported budget must hold the expected completion up front. That
	// costs a sequential run the unused part of its last turn's reserve, a few seconds
	// (1.02–1.06× on 1×12), and the reserve, a high quantile of a heavy tail, is still
	// beaten now and then (strict: 1 × 429 in some seeds).
	"classic/1×12": "time ≤ 1.03× the floor: up to 1.054×",
	"classic/4×6":  "time ≤ 1.03× the floor: up to 1.033×",
	"strict/1×12":  "1 × 429 in a seed; time up to 1.054×",
	"strict/4×6":   "1 × 429 in some seeds",
	"strict/16×6":  "1 × 429 in some seeds",
	// The same reserve on Anthropic's output budget and the rounded counts' slack.
	"anthropic/1×12": "time ≤ 1.05×: up to 1.059× in one seed",
	// Before 8 completions the margin on a prompt is 54 % of it, so the first windows
	// take one turn fewer than fit (3 of 4), which costs a whole window on 1×12; the
	// 16×6 429s are completions that overran the window they started in.
	"fixed-window/1×12": "time 1.52× the floor: a window short",
	"fixed-window/4×6":  "time 1.21× (up to 1.41×), and up to 3 × 429 in a seed",
	"fixed-window/16×6": "time 1.23–1.46×, and up to 2 × 429 in a seed",
	// The budget learned from the first 429 is 98 % of its bound and tightens only on
	// a later 429; a sequential run that learns late takes up to 1.09×, and 4×6 is at
	// the line (up to 1.050×). (silent/16×6 meets its targets.)
	"silent/1×12": "time ≤ 1.05×: up to 1.092×",
	"silent/4×6":  "time ≤ 1.05×: up to 1.050×, at the line",
}

// Every model runs to the end through luft and through the baseline (whatever their
// figures), and each model's engine makes the baseline meet 429s on four branches: the
// workload reaches the limits in every model.
func TestEveryModelRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("minutes of modelled traffic per model")
	}
	for _, p := range testkit.Providers() {
		m := modelFor(p)
		for _, c := range []string{"luft", "direct"} {
			r, err := inBubble(t)(env{}, m, workload{"b", 4, 6}, 1, c, 8)
			if err != nil {
				t.Fatalf("%s %s: %v", m.name(), c, err)
			}
			if r.Calls != 24 || r.Requests < 24-r.Failed || r.Seconds <= 0 {
				t.Errorf("%s %s: %+v", m.name(), c, r)
			}
			if c == "direct" && r.RateLimited == 0 {
				t.Errorf("%s: the baseline met no 429", m.name())
			}
			if v := verdict(r); c == "direct" && v == "yes" {
				t.Errorf("%s: the baseline meets luft's targets (%d × 429, %d extra, %.3f× the floor): they do not discriminate",
					m.name(), r.RateLimited, r.Extra, r.Ratio)
			}
			t.Logf("%-12s %-6s 429 %3d extra %3d failed %d ratio %.3f targets met: %s", m.name(), c, r.RateLimited, r.Extra, r.Failed, r.Ratio, verdict(r))
		}
	}
}

// memNet is HTTP in memory (as bench/proxy's test has it): a request to a served host
// runs the host's handler on a goroutine of its own, its response streamed back through
// a pipe.
type memNet struct {
	mu    sync.Mutex
	hosts map[string]http.Handler
}

func newMemNet() *memNet { return &memNet{hosts: map[string]http.Handler{}} }

func (m *memNet) serve(h http.Handler) (string, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	host := fmt.Sprintf("host%d.mem", len(m.hosts)+1)
	m.hosts[host] = h
	return "http://" + host, func() {}, nil
}

func (m *memNet) transport() http.RoundTripper { return memTransport{m} }

type memTransport struct{ m *memNet }

func (t memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.m.mu.Lock()
	h := t.m.hosts[req.URL.Host]
	t.m.mu.Unlock()
	if h == nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("memnet: no host %q", req.URL.Host)
	}
	sreq := req.Clone(req.Context())
	sreq.RequestURI, sreq.RemoteAddr = req.URL.RequestURI(), "127.0.0.1:1"
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &memWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing
			pw.Close()
		}()
		h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1,
		ProtoMinor: 1, Header: w.sent, Body: pr, ContentLength: -1, Request: req}, nil
}

// memWriter is the handler's side: headers go out on the first write, the body through
// the pipe as it is written.
type memWriter struct {
	header http.Header
	sent   http.Header
	status int
	pw     *io.PipeWriter
	ready  chan struct{}
}

func (w *memWriter) Header() http.Header { return w.header }

func (w *memWriter) WriteHeader(code int) {
	if w.sent != nil {
		return
	}
	w.status, w.sent = code, w.header.Clone()
	close(w.ready)
}

func (w *memWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

func (w *memWriter) Flush() { w.WriteHeader(http.StatusOK) }
