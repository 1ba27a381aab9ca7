package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// TestRateLimitsLearnedNo429: the engine allows 4 requests per 2 s (refilled continuously)
// and says so in its headers; a burst of 10 turns through the proxy gets no 429 from the
// engine: luft's scheduler learns the budget from the first answer and holds the rest
// back as it refills. (A proxy that kept the headers from the scheduler would meet 429s.)
func TestRateLimitsLearnedNo429(t *testing.T) {
	f := newFixture(t, fixtureOpts{
		engine: testkit.Config{Slots: 16, Limits: testkit.Limits{RPM: 4, TPM: 100_000, Period: 2 * time.Second}},
		// One turn at a time, so the answers' headers arrive in the order the engine
		// counted them.
		sched: scheduler.Config{Lanes: map[string]scheduler.LaneConfig{"fake/*": {Slots: 1}}},
	})
	var wg sync.WaitGroup
	codes := make(chan int, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := f.post(t, hello, map[string]string{"x-luft-caller": "burst"})
			readAll(t, resp)
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a client got HTTP %d", c)
		}
	}
	n429 := 0
	for _, r := range f.engine.Log() {
		if r.Status == 429 {
			n429++
		}
	}
	if n429 != 0 || len(f.engine.Log()) != 10 {
		t.Fatalf("engine saw %d requests, %d of them 429", len(f.engine.Log()), n429)
	}
}

// TestUpstream429RetriedInsideLuft: an upstream 429 with retry-after-ms is waited out by
// luft and the turn sent again; the client sees the answer, not the 429.
func TestUpstream429RetriedInsideLuft(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			w.Header().Set("retry-after-ms", "5")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"message":"slow down","type":"tokens","code":"rate_limit_exceeded"}}`)
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":2,"completion_tokens":1}}`)
	}))
	defer up.Close()
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
	resp, b := postChat(t, front, hello2)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"ok"`) || calls != 2 {
		t.Fatalf("after an upstream 429: HTTP %d %s, %d upstream calls", resp.StatusCode, b, calls)
	}
}

// TestFallbackUpstream: while the lane's circuit is open its turns go to the fallback
// backend (at another host, with its own key), with the fallback's model in the body.
func TestFallbackUpstream(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
	}))
	defer down.Close()
	var gotModel string
	backup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Model string }
		json.NewDecoder(r.Body).Decode(&req)
		gotModel = req.Model
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"from backup"}}]}`)
	}))
	defer backup.Close()
	sched := scheduler.NewExecutor(scheduler.Config{BreakerThreshold: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		Lanes: map[string]scheduler.LaneConfig{"main/m": {Fallback: "spare/m2"}}}, nil)
	_, front := serve(t, Options{Upstreams: []Upstream{
		{Name: "main", BaseURL: down.URL + "/v1", Model: "m", Fallback: "spare"},
		{Name: "spare", BaseURL: backup.URL + "/v1", Model: "m2", APIKey: "sk-spare"},
	}, Scheduler: sched})
	resp, b := postChat(t, front, hello2)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "from backup") || gotModel != "m2" {
		t.Fatalf("HTTP %d %s; the fallback got model %q", resp.StatusCode, b, gotModel)
	}
}

// TestReplicas: the scheduler's replica choice picks the upstream's base URL.
func TestReplicas(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	release := make(chan struct{})
	arrived := make(chan struct{}, 4)
	mk := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits[name]++
			mu.Unlock()
			arrived <- struct{}{}
			<-release
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
		}))
	}
	r0, r1 := mk("r0"), mk("r1")
	defer r0.Close()
	defer r1.Close()
	sched := scheduler.NewExecutor(scheduler.Config{Lanes: map[string]scheduler.LaneConfig{"u/m": {Slots: 1, Replicas: 2}}}, nil)
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: r0.URL + "/v1", Replicas: []string{r1.URL + "/v1/"}, Model: "m"}}, Scheduler: sched})
	a := postAsync(front, hello2, map[string]string{"x-luft-run-id": "a"})
	b := postAsync(front, hello2, map[string]string{"x-luft-run-id": "b"})
	for i := 0; i < 2; i++ {
		select {
		case <-arrived:
		case <-time.After(failAfter):
			t.Fatalf("two turns on two replicas of one slot each did not run together: %v", hits)
		}
	}
	close(release)
	waitAll(t, []<-chan int{a, b})
	if hits["r0"] != 1 || hits["r1"] != 1 {
		t.Fatalf("replica hits %v, want one each", hits)
	}
}
