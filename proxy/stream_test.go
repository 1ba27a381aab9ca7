package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

// failAfter bounds a wait that must not hang the test; it is no timing assumption.
const failAfter = 20 * time.Second

// gatedStream is an upstream that sends the first SSE chunk, then waits for release
// before sending the rest; it reports when its client went away.
type gatedStream struct {
	release chan struct{}
	gone    chan struct{}
	first   string
	rest    string
}

func newGatedStream() *gatedStream {
	return &gatedStream{release: make(chan struct{}), gone: make(chan struct{}),
		first: "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
		rest: "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_s1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n" +
			"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":5}}\n\n" +
			"data: [DONE]\n\n"}
}

func (g *gatedStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Ratelimit-Remaining-Requests", "41")
	w.WriteHeader(200)
	io.WriteString(w, g.first)
	w.(http.Flusher).Flush()
	select {
	case <-g.release:
		io.WriteString(w, g.rest)
	case <-r.Context().Done():
		close(g.gone)
	}
}

func TestStreamFirstChunkBeforeUpstreamEnds(t *testing.T) {
	g := newGatedStream()
	up := httptest.NewServer(g)
	defer up.Close()
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "up", BaseURL: up.URL + "/v1", Model: "m"}},
		Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
	resp, err := http.Post(front+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Ratelimit-Remaining-Requests") != "41" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream headers not passed on: %v", resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		blank, _ := br.ReadString('\n')
		got <- line + blank
	}()
	select {
	case s := <-got:
		if s != g.first {
			t.Fatalf("first chunk %q, want %q", s, g.first)
		}
	case <-time.After(failAfter):
		t.Fatal("the first chunk did not arrive while the upstream held the rest back: the proxy buffers")
	}
	close(g.release)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if string(rest) != g.rest {
		t.Fatalf("rest of the stream changed:\n got %q\nwant %q", rest, g.rest)
	}
	// The stream's tool_call id leads the next turn back to the same run.
	run := resp.Header.Get("x-luft-run")
	resp2, err := http.Post(front+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"call_s1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_s1","content":"42"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if r2 := resp2.Header.Get("x-luft-run"); r2 != run || run == "" {
		t.Fatalf("continuation joined run %q, want %q", r2, run)
	}
}

func TestClientDisconnectMidStreamCancelsUpstreamAndFreesSlot(t *testing.T) {
	g := newGatedStream()
	up := httptest.NewServer(g)
	defer up.Close()
	sched := scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}}, nil)
	p, front := serve(t, Options{Upstreams: []Upstream{{Name: "up", BaseURL: up.URL + "/v1", Model: "m"}}, Scheduler: sched})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", front+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.Contains(line, "Hel") {
		t.Fatalf("first chunk: %q", line)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-g.gone:
	case <-time.After(failAfter):
		t.Fatal("the upstream request was not cancelled when the client went away")
	}
	// The lane has one slot: a second turn runs only if the first freed it.
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	defer ok.Close()
	p.ups["up"].BaseURL = ok.URL + "/v1"
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(front+"/v1/chat/completions", "application/json", strings.NewReader(hello2))
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case code := <-done:
		if code != 200 {
			t.Fatalf("second turn: status %d", code)
		}
	case <-time.After(failAfter):
		t.Fatalf("the slot of the abandoned stream was never freed: %+v", sched.Stats())
	}
	if st := sched.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("scheduler still holds turns: %+v", st)
	}
}

const hello2 = `{"model":"m","messages":[{"role":"user","content":"again"}]}`
