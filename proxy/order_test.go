package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// queueWatch wraps the scheduler so a test learns when a turn is queued in it, and
// when an Admit gives up.
type queueWatch struct {
	s       scheduler.Scheduler
	queued  chan string // the turn's caller
	refused chan error  // when set, the errors of Admit calls that failed
}

func (q *queueWatch) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	inner := t.Notify
	t.Notify = func(n scheduler.Notice) {
		if n.Kind == scheduler.NoticeQueued {
			q.queued <- t.Caller
		}
		if inner != nil {
			inner(n)
		}
	}
	p, err := q.s.Admit(ctx, t)
	if err != nil && q.refused != nil {
		q.refused <- err
	}
	return p, err
}

// heldEngine serves the fake engine but holds a request that carries x-test-hold until
// released, so the lane's one slot stays taken while the test queues turns behind it.
type heldEngine struct {
	next    http.Handler
	held    chan struct{}
	release chan struct{}
}

func (h *heldEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("x-test-hold") != "" {
		close(h.held)
		<-h.release
	}
	h.next.ServeHTTP(w, r)
}

// orderFixture: one slot on the lane, an engine log to read the order from.
func orderFixture(t *testing.T) (*testkit.Engine, *heldEngine, *queueWatch, string) {
	t.Helper()
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, ToolRules: []testkit.ToolRule{weatherRule}})
	h := &heldEngine{next: testkit.NewServer(e).Handler(), held: make(chan struct{}), release: make(chan struct{})}
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	q := &queueWatch{s: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}}, nil),
		queued: make(chan string, 64)}
	p, err := New(Options{Upstreams: []Upstream{{Name: "fake", BaseURL: up.URL + "/v1", Model: "m1"}}, Scheduler: q})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	return e, h, q, front.URL
}

// asCaller names the request's x-luft-caller to the fake engine too, in the header a
// gateway's fairness id travels in: the proxy keeps luft's own headers to itself.
func asCaller(req *http.Request) {
	if c := req.Header.Get("x-luft-caller"); c != "" {
		req.Header.Set("x-gateway-inference-fairness-id", c)
	}
}

func postAsync(url, body string, hdr map[string]string) <-chan int {
	return postPathAsync(url+"/v1/chat/completions", body, hdr)
}

// postPathAsync posts body to url (the whole endpoint) and returns the status to come.
func postPathAsync(url, body string, hdr map[string]string) <-chan int {
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		asCaller(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	return done
}

func waitQueued(t *testing.T, q *queueWatch, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-q.queued:
		case <-time.After(failAfter):
			t.Fatalf("only %d of %d turns were queued", i, n)
		}
	}
}

func waitAll(t *testing.T, chans []<-chan int) {
	t.Helper()
	for _, c := range chans {
		select {
		case code := <-c:
			if code != 200 {
				t.Fatalf("a turn failed: %d", code)
			}
		case <-time.After(failAfter):
			t.Fatal("a turn never finished")
		}
	}
}

// TestContinuationAheadOfBatchFlood: an own-loop agent's turn after a tool result goes
// ahead of another caller's batch turns queued before it, as the engine's log shows.
func TestContinuationAheadOfBatchFlood(t *testing.T) {
	e, h, q, url := orderFixture(t)
	hdrA := map[string]string{"x-luft-caller": "agent"}
	c := &convo{msgs: []map[string]any{{"role": "user", "content": "what is the weather"}}}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(c.body(false)))
	req.Header.Set("x-luft-caller", "agent")
	asCaller(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	c.answer(t, readAll(t, resp))
	var all []<-chan int
	all = append(all, postAsync(url, hello, map[string]string{"x-luft-caller": "holder", "x-test-hold": "1"}))
	<-h.held
	for i := 0; i < 6; i++ {
		all = append(all, postAsync(url, hello, map[string]string{"x-luft-caller": "flood", "x-luft-class": "batch"}))
	}
	waitQueued(t, q, 6)
	all = append(all, postAsync(url, c.body(false), hdrA))
	waitQueued(t, q, 1)
	close(h.release)
	waitAll(t, all)
	var order []string
	for _, r := range e.Log() {
		order = append(order, r.Caller)
	}
	// The agent's first turn, the holder, then the agent's continuation before the flood.
	want := "agent holder agent flood flood flood flood flood flood"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("engine order %q, want %q", got, want)
	}
}

// TestCallersShareFairly: two callers' backlogs are served in turns, not one after the
// other.
func TestCallersShareFairly(t *testing.T) {
	e, h, q, url := orderFixture(t)
	var all []<-chan int
	all = append(all, postAsync(url, hello, map[string]string{"x-luft-caller": "holder", "x-test-hold": "1"}))
	<-h.held
	for i := 0; i < 4; i++ {
		all = append(all, postAsync(url, hello, map[string]string{"x-luft-caller": "a", "x-luft-class": "batch"}))
	}
	waitQueued(t, q, 4)
	for i := 0; i < 4; i++ {
		all = append(all, postAsync(url, hello, map[string]string{"x-luft-caller": "b", "x-luft-class": "batch"}))
	}
	waitQueued(t, q, 4)
	close(h.release)
	waitAll(t, all)
	var order []string
	for _, r := range e.Log()[1:] {
		order = append(order, r.Caller)
	}
	// Within any window of four, both callers are served twice.
	for i := 0; i+4 <= len(order); i += 2 {
		n := 0
		for _, c := range order[i : i+4] {
			if c == "a" {
				n++
			}
		}
		if n != 2 {
			t.Fatalf("engine order %v: caller a got %d of 4 turns from %d", order, n, i)
		}
	}
}

// TestClientGoneWhileQueued: a client that gives up while its turn waits in luft's queue
// withdraws the turn: it never reaches the engine, and the scheduler holds nothing of it.
func TestClientGoneWhileQueued(t *testing.T) {
	e, h, q, url := orderFixture(t)
	q.refused = make(chan error, 1)
	first := postAsync(url, hello, map[string]string{"x-luft-caller": "holder", "x-test-hold": "1"})
	<-h.held
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(hello))
		_, err := http.DefaultClient.Do(req)
		gone <- err
	}()
	waitQueued(t, q, 1)
	cancel()
	<-gone
	// The proxy's handler sees the client gone and withdraws the turn.
	select {
	case err := <-q.refused:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Admit ended with %v", err)
		}
	case <-time.After(failAfter):
		t.Fatalf("the abandoned turn still waits: %+v", q.s.(*scheduler.Executor).Stats())
	}
	if st := q.s.(*scheduler.Executor).Stats(); st.Waiting != 0 {
		t.Fatalf("the scheduler still holds the abandoned turn: %+v", st)
	}
	close(h.release)
	waitAll(t, []<-chan int{first})
	if n := len(e.Log()); n != 1 {
		t.Fatalf("the engine saw %d requests, want only the holder's", n)
	}
}
