package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/luft-run/luft/internal/testkit"
)

// The benchmark on a virtual clock: each measurement runs in a testing/synctest bubble,
// whose clock moves only when every goroutine in it waits, with HTTP carried in memory
// (a goroutine blocked on a socket would stall that clock). Same engine, same agents,
// same proxy, scheduler and retry code as `go run ./bench/proxy`, deterministic per
// seed and fast. Through the proxy every seed meets both targets — no 429 reaches the
// engine or an agent, every agent finishes within 1.03 × the net floor — and the agents
// talking to the engine directly miss them in every seed.
func TestProxyTargets(t *testing.T) {
	seeds := 10
	if testing.Short() {
		seeds = 3
	}
	by := map[string][]Result{}
	for s := 1; s <= seeds; s++ {
		for _, tgt := range []target{direct{}, direct{free: true}, viaProxy{}} {
			var r Result
			var err error
			synctest.Test(t, func(t *testing.T) {
				e := env{clock: testkit.RealClock{}, net: newMemNet()}
				r, err = measure(t.Context(), e, tgt, Full, uint64(s), 8)
			})
			if err != nil {
				t.Fatalf("%s seed %d: %v", tgt.name(), s, err)
			}
			by[r.Target] = append(by[r.Target], r)
			switch {
			case r.Target == "proxy" && (r.RateLimited > 0 || r.SeenByAgent > 0 || r.FailedRuns > 0 || r.Turns != 96):
				t.Errorf("proxy seed %d: %d 429s at the engine, %d at the agents, %d agents gave up, %d turns answered",
					s, r.RateLimited, r.SeenByAgent, r.FailedRuns, r.Turns)
			case r.Target == "proxy" && !(r.Ratio > 0 && r.Ratio <= maxRatio):
				t.Errorf("proxy seed %d: %.1fs, %.3f× the net floor %.1fs, want ≤ %.2f×", s, r.Seconds, r.Ratio, r.Floor, maxRatio)
			case r.Target != "proxy" && r.RateLimited == 0:
				t.Errorf("%s seed %d: no 429: the workload does not reach the key's limits", r.Target, s)
			}
		}
	}
	var buf bytes.Buffer
	printRowHeader(&buf)
	for _, c := range columns {
		for _, r := range by[c.key] {
			printRow(&buf, r)
		}
	}
	buf.WriteString("\n")
	summarise(&buf, by)
	t.Log("\n" + buf.String())
}

// The same seed gives the same counts on the virtual clock, and times within a tenth of a
// second (of about 40): goroutines woken at one instant run in no fixed order, so turns
// that arrive together may be admitted in another order.
func TestProxyDeterministic(t *testing.T) {
	var rs [2]Result
	for i := range rs {
		synctest.Test(t, func(t *testing.T) {
			var err error
			rs[i], err = measure(t.Context(), env{clock: testkit.RealClock{}, net: newMemNet()}, viaProxy{}, Shape{Agents: 4, Steps: 2}, 3, 8)
			if err != nil {
				t.Fatal(err)
			}
		})
		rs[i].WallSeconds = 0
	}
	if d := rs[0].Seconds - rs[1].Seconds; d > 0.1 || d < -0.1 {
		t.Errorf("times differ by %.3fs", d)
	}
	rs[1].Seconds, rs[1].Ratio = rs[0].Seconds, rs[0].Ratio
	if rs[0] != rs[1] {
		t.Fatalf("two runs differ:\n%+v\n%+v", rs[0], rs[1])
	}
}

// memNet is HTTP in memory: a request to a served host runs the host's handler on a
// goroutine of its own, its response streamed back through a pipe.
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

// Every provider model of the engine runs through the proxy and straight at the engine
// (the figures are logged, not held to targets: only the classic model's are).
func TestProxyModels(t *testing.T) {
	for _, p := range testkit.Providers() {
		for _, tgt := range []target{direct{}, viaProxy{}} {
			var r Result
			var err error
			synctest.Test(t, func(t *testing.T) {
				e := env{clock: testkit.RealClock{}, net: newMemNet(), model: p}
				r, err = measure(t.Context(), e, tgt, Shape{Agents: 4, Steps: 2}, 1, 8)
			})
			if err != nil {
				t.Fatalf("%s %s: %v", p, tgt.name(), err)
			}
			if r.Requests == 0 || r.Seconds <= 0 {
				t.Errorf("%s %s: %+v", p, tgt.name(), r)
			}
			t.Logf("%-12s %-7s turns %2d gave up %d 429 %3d ratio %.3f", p, r.Target, r.Turns, r.FailedRuns, r.RateLimited, r.Ratio)
		}
	}
}

// The same workload on the two other wires the proxy serves, on a virtual clock: the
// agents speak the Responses API (the whole input every turn) or Anthropic Messages
// (max_tokens 1,024, which that wire requires). Through the proxy no 429 reaches the
// engine or an agent in any seed and every agent finishes; straight at the engine the
// agents meet 429s in every seed. (The time target is the chat wire's; the others' times
// are logged beside it.)
func TestProxyWires(t *testing.T) {
	seeds := 10
	if testing.Short() {
		seeds = 2
	}
	for _, wire := range []string{wireResponses, wireMessages} {
		t.Run(wire, func(t *testing.T) {
			by := map[string][]Result{}
			for s := 1; s <= seeds; s++ {
				for _, tgt := range []target{direct{}, viaProxy{}} {
					var r Result
					var err error
					synctest.Test(t, func(t *testing.T) {
						e := env{clock: testkit.RealClock{}, net: newMemNet(), wire: wire}
						r, err = measure(t.Context(), e, tgt, Full, uint64(s), 8)
					})
					if err != nil {
						t.Fatalf("%s seed %d: %v", tgt.name(), s, err)
					}
					by[r.Target] = append(by[r.Target], r)
					switch {
					case r.Target == "proxy" && (r.RateLimited > 0 || r.SeenByAgent > 0 || r.FailedRuns > 0 || r.Turns != 96):
						t.Errorf("proxy seed %d: %d 429s at the engine, %d at the agents, %d agents gave up, %d turns answered",
							s, r.RateLimited, r.SeenByAgent, r.FailedRuns, r.Turns)
					case r.Target != "proxy" && r.RateLimited == 0:
						t.Errorf("%s seed %d: no 429: the workload does not reach the key's limits", r.Target, s)
					}
				}
			}
			var buf bytes.Buffer
			summarise(&buf, by)
			t.Log("\n" + buf.String())
		})
	}
}
