package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

var weatherRule = testkit.ToolRule{Match: "weather", Rounds: 2,
	Calls: []testkit.ScriptedCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}

// convo is an own-loop agent's conversation as plain JSON messages.
type convo struct {
	msgs []map[string]any
}

func (c *convo) body(stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": "m1", "messages": c.msgs, "stream": stream, "max_tokens": 16})
	return string(b)
}

// answer appends the assistant message of a non-streamed answer and a tool result for
// each of its tool calls; it reports whether there were tool calls.
func (c *convo) answer(t *testing.T, b []byte) bool {
	t.Helper()
	var a struct {
		Choices []struct {
			Message map[string]any `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) == 0 {
		t.Fatalf("answer: %s", b)
	}
	m := a.Choices[0].Message
	c.msgs = append(c.msgs, m)
	calls, _ := m["tool_calls"].([]any)
	for _, tc := range calls {
		id := tc.(map[string]any)["id"].(string)
		c.msgs = append(c.msgs, map[string]any{"role": "tool", "tool_call_id": id, "content": "sunny"})
	}
	return len(calls) > 0
}

func TestContinuationRecognisedByToolCallIDs(t *testing.T) {
	f := newFixture(t, fixtureOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}, store: true})
	c := &convo{msgs: []map[string]any{{"role": "user", "content": "what is the weather in Oslo"}}}
	var runs []string
	for turn := 0; turn < 5; turn++ {
		resp := f.post(t, c.body(false), nil)
		b := readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, b)
		}
		runs = append(runs, resp.Header.Get("x-luft-run"))
		if !c.answer(t, b) {
			break
		}
	}
	if len(runs) != 3 {
		t.Fatalf("want 3 turns (2 tool rounds, then text), got %d", len(runs))
	}
	for _, r := range runs {
		if r != runs[0] {
			t.Fatalf("turns joined different runs: %v", runs)
		}
	}
	// A fresh conversation is a new run.
	other := f.post(t, hello, nil)
	readAll(t, other)
	if other.Header.Get("x-luft-run") == runs[0] {
		t.Fatal("an unrelated request joined the run")
	}
	// The run is stored with a turn each: agent_started/agent_done, usage and cost.
	f.proxy.Close()
	row, err := f.store.GetRun(context.Background(), runs[0])
	if err != nil {
		t.Fatal(err)
	}
	if row.Workflow != "proxy:m1" || row.Status != storage.StatusCompleted || row.Agents.OK != 3 || row.Usage.Input == 0 || row.Cost == 0 {
		t.Fatalf("stored run: %+v", row)
	}
	evs, err := f.store.Events(context.Background(), runs[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	want := "run_started agent_started agent_done agent_started agent_done agent_started agent_done run_done"
	if strings.Join(types, " ") != want {
		t.Fatalf("events: %v", types)
	}
	// run_started says how long the conversation may idle, for the dashboard to say so.
	if args, _ := evs[0].Data["args"].(map[string]any); args == nil || args["idle_timeout_ms"] != float64(DefaultIdleTTL.Milliseconds()) {
		t.Errorf("run_started: %v, want args.idle_timeout_ms %d", evs[0].Data, DefaultIdleTTL.Milliseconds())
	}
	done := evs[len(evs)-2]
	if done.Data["continuation"] != nil || done.Data["tokens"].(float64) <= 0 || done.Data["wait_ms"] == nil {
		t.Errorf("agent_done: %v", done.Data)
	}
	if cont := evs[5].Data["continuation"]; cont != true {
		t.Errorf("the third turn (after a tool result) is not a continuation: %v", evs[5].Data)
	}
}

func TestStreamedTurnsJoinTheirRun(t *testing.T) {
	f := newFixture(t, fixtureOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}})
	c := &convo{msgs: []map[string]any{{"role": "user", "content": "what is the weather in Oslo"}}}
	resp := f.post(t, c.body(true), nil)
	b := readAll(t, resp)
	// Rebuild the assistant message from the stream's tool_call deltas.
	var id string
	for _, line := range strings.Split(string(b), "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(d, `"id":"call`) {
			var ch struct {
				Choices []struct {
					Delta struct {
						ToolCalls []struct{ ID string } `json:"tool_calls"`
					} `json:"delta"`
				} `json:"choices"`
			}
			json.Unmarshal([]byte(d), &ch)
			id = ch.Choices[0].Delta.ToolCalls[0].ID
		}
	}
	if id == "" {
		t.Fatalf("no tool call in the stream: %s", b)
	}
	c.msgs = append(c.msgs, map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": id, "type": "function",
		"function": map[string]any{"name": "get_weather", "arguments": `{"city":"Oslo"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": id, "content": "sunny"})
	resp2 := f.post(t, c.body(true), nil)
	readAll(t, resp2)
	if resp2.Header.Get("x-luft-run") != resp.Header.Get("x-luft-run") {
		t.Fatal("the streamed turn's tool_call id did not lead back to its run")
	}
}

func TestRunIDHeaderScopedByCaller(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	runOf := func(hdr map[string]string) string {
		resp := f.post(t, hello, hdr)
		readAll(t, resp)
		return resp.Header.Get("x-luft-run")
	}
	a1 := runOf(map[string]string{"x-luft-run-id": "job-1", "x-luft-caller": "alice"})
	a2 := runOf(map[string]string{"x-luft-run-id": "job-1", "x-luft-caller": "alice"})
	b1 := runOf(map[string]string{"x-luft-run-id": "job-1", "x-luft-caller": "mallory"})
	if a1 != a2 {
		t.Fatal("one run id, one caller: two runs")
	}
	if b1 == a1 {
		t.Fatal("another caller naming the same run id joined alice's run")
	}
	// Nor can mallory end alice's run by luft's id for it.
	if code := f.delete(t, a1, "mallory"); code != 404 {
		t.Fatalf("mallory deleted alice's run %s: %d", a1, code)
	}
	if code := f.delete(t, "job-1", "mallory"); code != 200 {
		t.Fatalf("mallory's own run: %d", code)
	}
	if a3 := runOf(map[string]string{"x-luft-run-id": "job-1", "x-luft-caller": "alice"}); a3 != a1 {
		t.Fatal("deleting mallory's job-1 ended alice's")
	}
	// tool_call ids are scoped by caller too: mallory echoing alice's ids starts her own run.
	f2 := newFixture(t, fixtureOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}})
	c := &convo{msgs: []map[string]any{{"role": "user", "content": "weather please"}}}
	resp := f2.post(t, c.body(false), map[string]string{"x-luft-caller": "alice"})
	c.answer(t, readAll(t, resp))
	resp2 := f2.post(t, c.body(false), map[string]string{"x-luft-caller": "mallory"})
	readAll(t, resp2)
	if resp2.Header.Get("x-luft-run") == resp.Header.Get("x-luft-run") {
		t.Fatal("echoed tool_call ids let another caller join the run")
	}
}

func (f *fixture) delete(t *testing.T, id, caller string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, f.front.URL+"/v1/runs/"+id, nil)
	if caller != "" {
		req.Header.Set("x-luft-caller", caller)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	return resp.StatusCode
}

func TestDeleteEndsRunAtOnce(t *testing.T) {
	f := newFixture(t, fixtureOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}, store: true})
	c := &convo{msgs: []map[string]any{{"role": "user", "content": "weather please"}}}
	resp := f.post(t, c.body(false), nil)
	c.answer(t, readAll(t, resp))
	run := resp.Header.Get("x-luft-run")
	if code := f.delete(t, run, ""); code != 200 {
		t.Fatalf("DELETE: %d", code)
	}
	if code := f.delete(t, run, ""); code != 404 {
		t.Fatalf("second DELETE: %d", code)
	}
	// Its tool_call ids are forgotten with it: the echo starts a new run.
	resp2 := f.post(t, c.body(false), nil)
	readAll(t, resp2)
	if resp2.Header.Get("x-luft-run") == run {
		t.Fatal("a deleted run took another turn")
	}
	f.proxy.Close()
	row, err := f.store.GetRun(context.Background(), run)
	if err != nil || row.Status != storage.StatusCompleted || row.FinishedAt.IsZero() {
		t.Fatalf("deleted run stored as %+v (%v)", row, err)
	}
}

// fakeClock is a scheduler.Clock the test advances.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) scheduler.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// advance moves the time on and runs the timers that came due, on this goroutine.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.stopped && !t.at.After(c.now) {
			due = append(due, t)
		} else if !t.stopped {
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

func TestIdleRunsExpire(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newFixture(t, fixtureOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}, store: true,
		opts: func(o *Options) { o.Clock, o.IdleTTL = clk, 10*time.Minute }})
	c := &convo{msgs: []map[string]any{{"role": "user", "content": "weather please"}}}
	resp := f.post(t, c.body(false), nil)
	c.answer(t, readAll(t, resp))
	run := resp.Header.Get("x-luft-run")
	keep := f.post(t, hello, map[string]string{"x-luft-run-id": "kept"})
	readAll(t, keep)
	clk.advance(6 * time.Minute)
	if n, _ := f.proxy.runs.size(); n != 2 {
		t.Fatalf("runs expired early: %d left", n)
	}
	readAll(t, f.post(t, hello, map[string]string{"x-luft-run-id": "kept"})) // active again
	clk.advance(5 * time.Minute)
	if n, _ := f.proxy.runs.size(); n != 1 {
		t.Fatalf("after 11 idle minutes: %d runs, want 1 (the active one)", n)
	}
	resp2 := f.post(t, c.body(false), nil)
	readAll(t, resp2)
	if resp2.Header.Get("x-luft-run") == run {
		t.Fatal("an expired run took another turn")
	}
	f.proxy.Close()
	evs, _ := f.store.EventsOfType(context.Background(), run, 0, 0, []string{event.RunDone})
	if len(evs) != 1 || !strings.Contains(evs[0].Data["reason"].(string), "idle") {
		t.Fatalf("expired run's run_done: %v", evs)
	}
}

func TestToolIDTableBounded(t *testing.T) {
	tb := newTable(3, 4, nil, DefaultIdleTTL, nil)
	now := time.Now()
	for i := 0; i < 10; i++ {
		j, _ := tb.join("c", "", "interactive", "b", "m", nil, false, nil, now)
		tb.finish(j, turnEnd{ok: true, ids: []string{"a" + string(rune('0'+i)), "b" + string(rune('0'+i))}}, now)
	}
	runs, ids := tb.size()
	if runs > 3 || ids > 4 {
		t.Fatalf("table grew past its bounds: %d runs, %d ids", runs, ids)
	}
	// The newest ids still lead to their run.
	j, _ := tb.join("c", "", "interactive", "b", "m", []string{"b9"}, true, nil, now)
	if j.turn != 2 || !j.continuation {
		t.Fatalf("newest id lost: %+v", j)
	}
}

// TestCancelRequestStopsRun: luft cancel (a cancel request in the store, from any
// process, or the dashboard) ends a proxy run: its turn in flight is stopped upstream,
// the client is told, and the run is stored cancelled.
func TestCancelRequestStopsRun(t *testing.T) {
	arrived, gone, quit := make(chan struct{}), make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // the server notices a client going away once the body is read
		close(arrived)
		select {
		case <-r.Context().Done():
			close(gone)
		case <-quit: // the test failed: let the servers close
		}
	}))
	defer up.Close()
	defer close(quit)
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newFixture(t, fixtureOpts{store: true, opts: func(o *Options) {
		o.Clock = clk
		o.Upstreams[0].BaseURL = up.URL + "/v1"
	}})
	done := postAsync(f.front.URL, hello, map[string]string{"x-luft-run-id": "long"})
	<-arrived
	runs, err := f.store.ListRuns(context.Background(), storage.ListOptions{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	if err := f.store.RequestCancel(context.Background(), runs[0].ID); err != nil {
		t.Fatal(err)
	}
	clk.advance(cancelPoll)
	select {
	case <-gone:
	case <-time.After(failAfter):
		t.Fatal("the cancelled run's turn still runs upstream")
	}
	select {
	case code := <-done:
		if code != http.StatusConflict {
			t.Fatalf("the client of the cancelled turn got %d", code)
		}
	case <-time.After(failAfter):
		t.Fatal("the client of the cancelled turn got no answer")
	}
	row, _ := f.store.GetRun(context.Background(), runs[0].ID)
	if row.Status != storage.StatusCancelled {
		t.Fatalf("cancelled run stored as %s", row.Status)
	}
}

// TestRunIdleBetweenTurns: a run's stored spec says idle once its turn is answered, not
// idle while a turn of it is in flight (list and status show it as idle or running, see
// runtime.StatusIdle), and its end stays its end.
func TestRunIdleBetweenTurns(t *testing.T) {
	hold, arrived := make(chan struct{}), make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-test-hold") != "" {
			arrived <- struct{}{}
			<-hold
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	defer up.Close()
	st, err := storage.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Service: recordIn(t, st)})
	idle := func(run string) bool {
		t.Helper()
		p.runs.sync(run)
		row, err := st.GetRun(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		var sp struct{ Idle bool }
		if err := json.Unmarshal(row.Spec, &sp); err != nil {
			t.Fatalf("spec %s: %v", row.Spec, err)
		}
		return sp.Idle
	}
	send := func(hdr map[string]string) <-chan int { return postAsync(front, hello2, hdr) }
	if code := <-send(map[string]string{"x-luft-run-id": "r"}); code != 200 {
		t.Fatalf("turn 1: %d", code)
	}
	p.runs.mu.Lock()
	run := p.runs.byClient["proxy\x00r"].id
	p.runs.mu.Unlock()
	if !idle(run) {
		t.Fatal("after its answer the run is not idle")
	}
	second := send(map[string]string{"x-luft-run-id": "r", "x-test-hold": "1"})
	<-arrived
	if idle(run) {
		t.Fatal("with a turn in flight the run is idle")
	}
	close(hold)
	if code := <-second; code != 200 {
		t.Fatalf("turn 2: %d", code)
	}
	if !idle(run) {
		t.Fatal("after its second answer the run is not idle")
	}
	p.Close()
	if row, err := st.GetRun(context.Background(), run); err != nil || row.Status != storage.StatusCompleted || row.Agents.OK != 2 {
		t.Fatalf("ended run stored as %+v (%v)", row, err)
	}
}

// sync waits until the writes queued so far for the run with luft id id are done.
func (t *table) sync(id string) {
	t.mu.Lock()
	var last <-chan struct{}
	if r := t.byID[id]; r != nil {
		last = r.last
	}
	t.mu.Unlock()
	if last != nil {
		<-last
	}
}
