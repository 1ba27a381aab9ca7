package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/luft-run/luft/scheduler"
)

// streamUpstream answers every request with a short stream and counts its connections.
func streamUpstream(conns *atomic.Int64) *httptest.Server {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\" world\"}}]}\n\ndata: [DONE]\n\n")
	}))
	up.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	return up
}

const benchBody = `{"model":"m","stream":true,"messages":[{"role":"system","content":"You are an agent."},{"role":"user","content":"turn 3 of a task that needs a few words of context to look like a real prompt"}]}`

// TestUpstreamConnectionsReused: turns one after another share one upstream connection
// (a proxy that left answers unread would open one per turn).
func TestUpstreamConnectionsReused(t *testing.T) {
	var conns atomic.Int64
	up := streamUpstream(&conns)
	defer up.Close()
	p, _ := New(Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
	defer p.Close()
	for i := 0; i < 50; i++ {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(benchBody)))
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), "[DONE]") {
			t.Fatalf("turn %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("50 turns opened %d upstream connections", n)
	}
}

// BenchmarkTurn is one streamed turn through the proxy in process (the upstream on
// loopback in the same process): the proxy's own cost per turn.
func BenchmarkTurn(b *testing.B) {
	var conns atomic.Int64
	up := streamUpstream(&conns)
	defer up.Close()
	p, _ := New(Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
	defer p.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(benchBody))
		req.Header.Set("x-luft-run-id", "r")
		p.ServeHTTP(httptest.NewRecorder(), req)
	}
}
