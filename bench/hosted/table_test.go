package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/luft-run/luft/bench/internal/machine"
	"github.com/luft-run/luft/internal/testkit"
)

var (
	tableModels = flag.String("model", "all", "TestModelsTable: provider models, comma-separated, or all")
	tableSeeds  = flag.Int("seeds", 3, "TestModelsTable: seeds per workload")
	tableWorks  = flag.String("w", "a,b,c", "TestModelsTable: workloads")
	tableTable  = flag.Bool("table", false, "run TestModelsTable (the whole measurement: minutes)")
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

// The table of issue 22: every provider model × workload × seed, luft beside the direct
// baseline, on a virtual clock. It measures; it asserts nothing about luft's figures
// (the scheduler is measured as it is, for the fix to target).
//
//	go test ./bench/hosted -run TestModelsTable -v -args -table -model all -seeds 3
func TestModelsTable(t *testing.T) {
	if !*tableTable {
		t.Skip("a measurement of minutes: run with -args -table")
	}
	o, err := newOptions(*tableModels, *tableWorks, *tableSeeds, true, 8)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	machine.Print(&buf)
	if _, err := runTable(&buf, o, func() env { return env{} }, inBubble(t)); err != nil {
		t.Log("\n" + buf.String())
		t.Fatal(err)
	}
	t.Log("\n" + buf.String())
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
