package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// The Responses API and Anthropic Messages through the proxy, against the fake engine
// speaking both on one base URL, as a client of each wire meets them.

// anthropicVersion is the header every Anthropic SDK sends.
var anthropicVersion = map[string]string{"anthropic-version": "2023-06-01", "Content-Type": "application/json"}

// seenRequest is one request that reached the upstream.
type seenRequest struct {
	uri    string // path and query
	header http.Header
	body   []byte
}

// upstreamLog serves next and keeps every request it gets; hook, when set, runs first.
type upstreamLog struct {
	next http.Handler
	hook func(r *http.Request, body []byte)
	mu   sync.Mutex
	reqs []seenRequest
}

func (u *upstreamLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	u.mu.Lock()
	u.reqs = append(u.reqs, seenRequest{uri: r.URL.RequestURI(), header: r.Header.Clone(), body: b})
	u.mu.Unlock()
	if u.hook != nil {
		u.hook(r, b)
	}
	u.next.ServeHTTP(w, r)
}

func (u *upstreamLog) all() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// turnLog is a scheduler that keeps every turn it is asked to admit.
type turnLog struct {
	s     scheduler.Scheduler
	mu    sync.Mutex
	turns []scheduler.Turn
}

func (l *turnLog) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	l.mu.Lock()
	l.turns = append(l.turns, t)
	l.mu.Unlock()
	return l.s.Admit(ctx, t)
}

func (l *turnLog) all() []scheduler.Turn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.turns)
}

// wiresFixture is the fake engine (models gpt-m, claude-m and claude-n) behind an
// upstreamLog, and a proxy in front with an openai backend "oa" serving gpt-m and
// anthropic backends "an" (claude-m) and "an2" (claude-n), all at the engine's base URL.
type wiresFixture struct {
	engine *testkit.Engine
	base   string // the engine's base URL, …/v1
	seen   *upstreamLog
	turns  *turnLog
	proxy  *Proxy
	url    string
	store  storage.Store
}

type wiresOpts struct {
	engine testkit.Config
	sched  scheduler.Config
	store  storage.Store // records the runs when set
	hook   func(r *http.Request, body []byte)
	opts   func(o *Options)
}

func newWiresFixture(t *testing.T, wo wiresOpts) *wiresFixture {
	t.Helper()
	if wo.engine.Models == nil {
		wo.engine.Models = []string{"gpt-m", "claude-m", "claude-n"}
	}
	e := testkit.NewEngine(wo.engine)
	seen := &upstreamLog{next: testkit.NewServer(e).Handler(), hook: wo.hook}
	up := httptest.NewServer(seen)
	t.Cleanup(up.Close)
	if wo.sched.BackoffBase == 0 {
		wo.sched.BackoffBase = time.Millisecond
		wo.sched.BackoffMax = 5 * time.Millisecond
	}
	turns := &turnLog{s: scheduler.NewExecutor(wo.sched, nil)}
	base := up.URL + "/v1"
	o := Options{Upstreams: []Upstream{
		{Name: "oa", BaseURL: base, Model: "gpt-m", PriceInPerMTok: 1, PriceOutPerMTok: 2},
		{Name: "an", Family: FamilyAnthropic, BaseURL: base, Model: "claude-m", PriceInPerMTok: 3, PriceOutPerMTok: 15},
		{Name: "an2", Family: FamilyAnthropic, BaseURL: base, Model: "claude-n"},
	}, Scheduler: turns}
	if wo.store != nil {
		o.Service = recordIn(t, wo.store)
	}
	if wo.opts != nil {
		wo.opts(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	return &wiresFixture{engine: e, base: base, seen: seen, turns: turns, proxy: p, url: front.URL, store: wo.store}
}

// send posts body to the proxy's path (with its query string, if any).
func (f *wiresFixture) send(t *testing.T, path, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	return postTo(t, f.url+path, body, hdr)
}

// direct posts body to the engine itself; path is the proxy's (it begins with /v1).
func (f *wiresFixture) direct(t *testing.T, path, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	return postTo(t, strings.TrimSuffix(f.base, "/v1")+path, body, hdr)
}

func postTo(t *testing.T, url, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

// hdrs merges header maps, the later winning.
func hdrs(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// sse is one event of a Responses or Messages stream.
type sse struct {
	name string
	data map[string]any
}

// sseOf reads the events of a stream body.
func sseOf(t *testing.T, b []byte) []sse {
	t.Helper()
	var out []sse
	for _, block := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		var ev sse
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
					t.Fatalf("stream event %q: data is not JSON: %q", ev.name, line)
				}
			}
		}
		out = append(out, ev)
	}
	return out
}

// responseOf is the response object of a Responses answer: the body, or the
// response.completed event of a stream.
func responseOf(t *testing.T, b []byte, stream bool) map[string]any {
	t.Helper()
	if !stream {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("not a response: %s", b)
		}
		return m
	}
	for _, ev := range sseOf(t, b) {
		if ev.name == "response.completed" {
			return ev.data["response"].(map[string]any)
		}
	}
	t.Fatalf("the stream has no response.completed: %s", b)
	return nil
}

// functionCalls are the function_call items of a response's output.
func functionCalls(resp map[string]any) []map[string]any {
	var out []map[string]any
	out_, _ := resp["output"].([]any)
	for _, it := range out_ {
		if m := it.(map[string]any); m["type"] == "function_call" {
			out = append(out, m)
		}
	}
	return out
}

// messageContent is the content of a Messages answer: the body's, or rebuilt from a
// stream's content blocks.
func messageContent(t *testing.T, b []byte, stream bool) []any {
	t.Helper()
	if !stream {
		var m struct {
			Content []any `json:"content"`
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Content == nil {
			t.Fatalf("not a message: %s", b)
		}
		return m.Content
	}
	var blocks []map[string]any
	var partial []string
	for _, ev := range sseOf(t, b) {
		switch ev.name {
		case "content_block_start":
			blocks = append(blocks, ev.data["content_block"].(map[string]any))
			partial = append(partial, "")
		case "content_block_delta":
			i := int(ev.data["index"].(float64))
			d := ev.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				blocks[i]["text"] = blocks[i]["text"].(string) + d["text"].(string)
			case "input_json_delta":
				partial[i] += d["partial_json"].(string)
			}
		}
	}
	var out []any
	for i, blk := range blocks {
		if blk["type"] == "tool_use" {
			var in any
			if err := json.Unmarshal([]byte(partial[i]), &in); err != nil {
				t.Fatalf("tool_use input %q: %v", partial[i], err)
			}
			blk["input"] = in
		}
		out = append(out, blk)
	}
	return out
}

// toolUses are the tool_use blocks of content.
func toolUses(content []any) []map[string]any {
	var out []map[string]any
	for _, c := range content {
		if m := c.(map[string]any); m["type"] == "tool_use" {
			out = append(out, m)
		}
	}
	return out
}

// wireErr reads an error body and says its shape: "anthropic" for
// {"type":"error","error":{"type","message"}}, "openai" for {"error":{"message","type",
// "param","code"}}.
func wireErr(t *testing.T, b []byte) (shape, typ, msg string) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("error body is not JSON: %s", b)
	}
	var e map[string]any
	if err := json.Unmarshal(m["error"], &e); err != nil || e == nil {
		t.Fatalf("no error object: %s", b)
	}
	typ, _ = e["type"].(string)
	msg, _ = e["message"].(string)
	if msg == "" || typ == "" {
		t.Fatalf("error without type or message: %s", b)
	}
	_, hasCode := e["code"]
	_, hasParam := e["param"]
	switch {
	case string(m["type"]) == `"error"` && (len(m) == 2 || len(m) == 3 && m["request_id"] != nil) && !hasCode:
		return "anthropic", typ, msg
	case m["type"] == nil && len(m) == 1 && hasCode && hasParam:
		return "openai", typ, msg
	}
	t.Fatalf("error body in neither wire's shape: %s", b)
	return
}

// ---- passthrough ----

// perRequest are what the engine's answers to one body differ in from request to
// request: the ids numbered by its request sequence and the creation time.
var perRequest = regexp.MustCompile(`(resp|msg|req)_fake\d{8}|"created_at":\d+`)

func sameUpToIDs(b []byte) string {
	return perRequest.ReplaceAllStringFunc(string(b), func(s string) string {
		if strings.HasPrefix(s, `"created_at"`) {
			return `"created_at":0`
		}
		return s[:strings.Index(s, "_fake")] + "_fakeN"
	})
}

// TestWirePassthrough: on both new wires, streamed or not, the client gets what the
// engine sends to the same body sent directly — status, body byte for byte (ids and
// times aside), headers with the engine's rate-limit headers — plus x-luft-run, and the
// engine gets the client's body byte for byte and its query string.
func TestWirePassthrough(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{engine: testkit.Config{CacheTokens: -1, // a repeat gets no cache hit
		Limits:    testkit.Limits{RPM: 1000, TPM: 1_000_000},
		ToolRules: []testkit.ToolRule{weatherRule}}})
	cases := []struct {
		name, path, body string
		hdr              map[string]string
		rateHeader       string // one the client must get
		noHeader         string // one the wire does not send
	}{
		{"responses", "/v1/responses", ` {"model":"gpt-m", "input":"hello  there \u00e9","max_output_tokens":9}`, nil,
			"X-Ratelimit-Remaining-Requests", ""},
		{"responses tool call", "/v1/responses", `{"model":"gpt-m","input":[{"role":"user","content":"the weather in Oslo?"}],"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`, nil,
			"X-Ratelimit-Limit-Tokens", ""},
		{"messages", "/v1/messages", `{"model":"claude-m","max_tokens":9, "messages":[{"role":"user","content":"hello \u00e9 there"}]}`, anthropicVersion,
			"Anthropic-Ratelimit-Requests-Remaining", "X-Ratelimit-Remaining-Requests"},
		{"messages tool use", "/v1/messages", `{"model":"claude-m","max_tokens":20,"messages":[{"role":"user","content":[{"type":"text","text":"the weather in Oslo?"}]}],"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}`, anthropicVersion,
			"Anthropic-Ratelimit-Tokens-Reset", "X-Ratelimit-Limit-Tokens"},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			body := tc.body
			name := tc.name
			if stream {
				body = strings.Replace(body, `"model"`, `"stream":true,"model"`, 1)
				name += " streamed"
			}
			t.Run(name, func(t *testing.T) {
				path := tc.path + "?beta=true"
				before := len(f.seen.all())
				resp, got := f.send(t, path, body, tc.hdr)
				seen := f.seen.all()
				if len(seen) != before+1 {
					t.Fatalf("the upstream got %d requests, want 1", len(seen)-before)
				}
				if up := seen[before]; up.uri != path || string(up.body) != body {
					t.Errorf("the upstream got %s %q, want %s %q", up.uri, up.body, path, body)
				}
				dresp, want := f.direct(t, path, body, tc.hdr)
				if resp.StatusCode != 200 || dresp.StatusCode != 200 {
					t.Fatalf("HTTP %d through luft, %d direct: %s", resp.StatusCode, dresp.StatusCode, got)
				}
				if sameUpToIDs(got) != sameUpToIDs(want) {
					t.Fatalf("the answer through luft differs from the engine's:\n got %q\nwant %q", got, want)
				}
				if stream != strings.Contains(string(got), "event: ") {
					t.Fatalf("streamed %v, but the answer is %q", stream, got)
				}
				if resp.Header.Get("x-luft-run") == "" {
					t.Error("no x-luft-run header")
				}
				if resp.Header.Get(tc.rateHeader) == "" {
					t.Errorf("rate-limit header %s not passed on: %v", tc.rateHeader, resp.Header)
				}
				if tc.noHeader != "" && resp.Header.Get(tc.noHeader) != "" {
					t.Errorf("header %s, which the engine does not send on this wire, came back", tc.noHeader)
				}
				// Every header the engine sends comes back, with its value unless it
				// changes from request to request; nothing else but x-luft-run (and the
				// length of an answer luft held whole).
				varies := func(k string) bool {
					return k == "Date" || k == "Request-Id" || k == "X-Request-Id" || k == "Content-Length" ||
						strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "Anthropic-Ratelimit-")
				}
				for k, vv := range dresp.Header {
					if pv, ok := resp.Header[k]; !ok {
						t.Errorf("header %s not passed on", k)
					} else if !varies(k) && strings.Join(pv, ",") != strings.Join(vv, ",") {
						t.Errorf("header %s: %q through luft, %q direct", k, pv, vv)
					}
				}
				for k := range resp.Header {
					if _, ok := dresp.Header[k]; !ok && k != "X-Luft-Run" && k != "Content-Length" {
						t.Errorf("header %s not the engine's: %q", k, resp.Header[k])
					}
				}
				if stream && resp.Header.Get("Content-Length") != "" {
					t.Errorf("a stream with Content-Length %s", resp.Header.Get("Content-Length"))
				}
			})
		}
	}
}

// ---- runs ----

// getWeather is a Responses function tool the weather rule calls.
const getWeatherTool = `{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}`

// checkRun holds one conversation's turns to one run: every turn joined the run the
// first began (x-luft-run), the scheduler saw them in that run, and every turn after a
// tool result, and only those, was a continuation (all turns but the first, or those
// ending before last when last > 0); it returns the turns.
func checkRun(t *testing.T, f *wiresFixture, from int, runs []string, last ...int) []scheduler.Turn {
	t.Helper()
	turns := f.turns.all()[from:]
	if len(turns) != len(runs) {
		t.Fatalf("the scheduler saw %d turns, want %d", len(turns), len(runs))
	}
	for i, r := range runs {
		if r == "" || r != runs[0] {
			t.Fatalf("the conversation's turns joined runs %v, want one", runs)
		}
		if turns[i].RunID != r {
			t.Errorf("turn %d admitted in run %q, answered in %q", i+1, turns[i].RunID, r)
		}
		want := i > 0
		if len(last) > 0 && i >= last[0] {
			want = false
		}
		if turns[i].Continuation != want {
			t.Errorf("turn %d: continuation %v, want %v", i+1, turns[i].Continuation, want)
		}
	}
	return turns
}

// TestResponsesRunByCallIDs: a Responses client that resends the whole input with each
// function_call_output, without x-luft-run-id, keeps its conversation in one run,
// recognised by the call_ids it echoes, each turn after a tool's output a continuation; another
// conversation is another run.
func TestResponsesRunByCallIDs(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}})
	converse := func(city string, stream bool) []string {
		from := len(f.turns.all())
		input := []any{map[string]any{"role": "user", "content": "what is the weather in " + city}}
		var runs []string
		for turn := 1; turn <= 5; turn++ {
			b, _ := json.Marshal(map[string]any{"model": "gpt-m", "input": input, "tools": []json.RawMessage{json.RawMessage(getWeatherTool)},
				"stream": stream, "max_output_tokens": 16})
			resp, got := f.send(t, "/v1/responses", string(b), nil)
			if resp.StatusCode != 200 {
				t.Fatalf("turn %d: HTTP %d %s", turn, resp.StatusCode, got)
			}
			runs = append(runs, resp.Header.Get("x-luft-run"))
			calls := functionCalls(responseOf(t, got, stream))
			if len(calls) == 0 {
				break
			}
			for _, c := range calls {
				input = append(input, c, map[string]any{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"})
			}
		}
		if len(runs) != 3 {
			t.Fatalf("%d turns, want 3 (two tool rounds, then text)", len(runs))
		}
		checkRun(t, f, from, runs)
		return runs
	}
	a := converse("Oslo", false)
	b := converse("Bergen", true)
	if a[0] == b[0] {
		t.Fatalf("two conversations share run %s", a[0])
	}
}

// TestResponsesRunByPreviousResponseID: a client that chains its turns by
// previous_response_id, sending only the function_call_output, keeps one run; each turn
// after a tool's output is a continuation, and the token estimate of each chained turn
// holds the conversation the engine prepends (the run's last prompt and answer), not
// just the body. A follow-up chained by previous_response_id alone (a new user message,
// no call_id) joins the run too, as new work.
func TestResponsesRunByPreviousResponseID(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}})
	converse := func(city string, stream bool) []string {
		from, logFrom := len(f.turns.all()), len(f.engine.Log())
		req := map[string]any{"model": "gpt-m", "input": "what is the weather in " + city + "? " + strings.Repeat("please tell me ", 20),
			"tools": []json.RawMessage{json.RawMessage(getWeatherTool)}, "stream": stream, "max_output_tokens": 16}
		var runs []string
		var bodies []string
		for turn := 1; turn <= 5; turn++ {
			b, _ := json.Marshal(req)
			bodies = append(bodies, string(b))
			resp, got := f.send(t, "/v1/responses", string(b), nil)
			if resp.StatusCode != 200 {
				t.Fatalf("turn %d: HTTP %d %s", turn, resp.StatusCode, got)
			}
			runs = append(runs, resp.Header.Get("x-luft-run"))
			out := responseOf(t, got, stream)
			calls := functionCalls(out)
			if len(calls) == 0 {
				if len(runs) > 3 {
					break
				}
				// The follow-up: only the previous response's id ties it to the run.
				req = map[string]any{"model": "gpt-m", "previous_response_id": out["id"], "input": "thanks; and tomorrow?", "stream": stream}
				continue
			}
			var input []any
			for _, c := range calls {
				input = append(input, map[string]any{"type": "function_call_output", "call_id": c["call_id"], "output": "sunny"})
			}
			req = map[string]any{"model": "gpt-m", "previous_response_id": out["id"], "input": input, "stream": stream, "max_output_tokens": 16,
				"tools": []json.RawMessage{json.RawMessage(getWeatherTool)}}
		}
		if len(runs) != 4 {
			t.Fatalf("%d turns, want 4 (two tool rounds, text, and the follow-up)", len(runs))
		}
		turns := checkRun(t, f, from, runs, 3)
		recs := f.engine.Log()[logFrom:]
		for i := 1; i < len(turns); i++ {
			alone, err := responsesWire.parse([]byte(bodies[i]))
			if err != nil {
				t.Fatal(err)
			}
			body := alone.estIn + alone.maxOut
			want := body + recs[i-1].PromptTokens + recs[i-1].OutputTokens
			if turns[i].EstTokens != want || turns[i].EstTokens <= body {
				t.Errorf("turn %d: estimated %d tokens, want %d: the body's %d and the conversation so far (%d prompt + %d answer)",
					i+1, turns[i].EstTokens, want, body, recs[i-1].PromptTokens, recs[i-1].OutputTokens)
			}
		}
		return runs
	}
	a := converse("Oslo", false)
	b := converse("Bergen", true)
	if a[0] == b[0] {
		t.Fatalf("two conversations share run %s", a[0])
	}
}

// TestMessagesRunByToolUseIDs: a Messages client (no x-luft-run-id) echoing tool_use ids
// in its tool_result blocks keeps its conversation in one run, each turn after a tool
// result a continuation, streamed or not; another conversation is another run.
func TestMessagesRunByToolUseIDs(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{engine: testkit.Config{ToolRules: []testkit.ToolRule{weatherRule}}})
	tools := []any{map[string]any{"name": "get_weather", "input_schema": map[string]any{"type": "object"}}}
	converse := func(city string, streamFirst bool) []string {
		from := len(f.turns.all())
		msgs := []any{map[string]any{"role": "user", "content": "what is the weather in " + city}}
		var runs []string
		for turn := 1; turn <= 5; turn++ {
			stream := streamFirst == (turn%2 == 1) // alternate
			b, _ := json.Marshal(map[string]any{"model": "claude-m", "max_tokens": 32, "messages": msgs, "tools": tools, "stream": stream})
			resp, got := f.send(t, "/v1/messages", string(b), anthropicVersion)
			if resp.StatusCode != 200 {
				t.Fatalf("turn %d: HTTP %d %s", turn, resp.StatusCode, got)
			}
			runs = append(runs, resp.Header.Get("x-luft-run"))
			content := messageContent(t, got, stream)
			uses := toolUses(content)
			if len(uses) == 0 {
				break
			}
			msgs = append(msgs, map[string]any{"role": "assistant", "content": content})
			var results []any
			for _, u := range uses {
				results = append(results, map[string]any{"type": "tool_result", "tool_use_id": u["id"], "content": "sunny"})
			}
			msgs = append(msgs, map[string]any{"role": "user", "content": results})
		}
		if len(runs) != 3 {
			t.Fatalf("%d turns, want 3 (two tool rounds, then text)", len(runs))
		}
		checkRun(t, f, from, runs)
		return runs
	}
	a := converse("Oslo", true)
	b := converse("Bergen", false)
	if a[0] == b[0] {
		t.Fatalf("two conversations share run %s", a[0])
	}
	for _, r := range f.engine.Log() {
		if r.Wire != testkit.WireMessages || r.Status != 200 {
			t.Fatalf("engine record %+v", r)
		}
	}
}

// ---- usage ----

// agentDone are the usages of a stored run's agent_done events.
func agentDone(t *testing.T, st storage.Store, run string) []agent.Usage {
	t.Helper()
	evs, err := st.Events(context.Background(), run, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []agent.Usage
	for _, ev := range evs {
		if ev.Type != "agent_done" {
			continue
		}
		var u agent.Usage
		b, _ := json.Marshal(ev.Data["usage"])
		if err := json.Unmarshal(b, &u); err != nil {
			t.Fatalf("agent_done usage %v", ev.Data["usage"])
		}
		out = append(out, u)
	}
	return out
}

// TestWireUsageRecorded: each turn's agent_done, and its run's totals, carry the tokens
// the engine counted, on both wires, streamed or not; on the Messages wire luft's input
// is the whole prompt (input_tokens + cache reads) and cached the cache reads.
func TestWireUsageRecorded(t *testing.T) {
	st, err := storage.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := newWiresFixture(t, wiresOpts{store: st})
	// Long enough a prompt that the second turn of each run reads blocks of it from the
	// engine's prefix cache.
	long := strings.Repeat("a long and winding road of words that repeat ", 12)
	cached := map[testkit.Wire]int{}
	for _, tc := range []struct {
		path, body string
		hdr        map[string]string
		wire       testkit.Wire
	}{
		{"/v1/responses", `{"model":"gpt-m","instructions":"` + long + `","input":"hello","max_output_tokens":12}`, nil, testkit.WireResponses},
		{"/v1/responses", `{"model":"gpt-m","stream":true,"instructions":"` + long + `","input":"hi","max_output_tokens":7}`, nil, testkit.WireResponses},
		{"/v1/messages", `{"model":"claude-m","system":"` + long + `","max_tokens":11,"messages":[{"role":"user","content":"hello"}]}`, anthropicVersion, testkit.WireMessages},
		{"/v1/messages", `{"model":"claude-m","stream":true,"system":"` + long + `","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, anthropicVersion, testkit.WireMessages},
	} {
		name := fmt.Sprintf("%s stream %v", tc.wire, strings.Contains(tc.body, `"stream":true`))
		run := "usage-" + strings.ReplaceAll(name, " ", "-")
		var recs []testkit.Record
		var luftRun string
		for turn := 0; turn < 2; turn++ {
			resp, b := f.send(t, tc.path, tc.body, hdrs(tc.hdr, map[string]string{"x-luft-run-id": run}))
			if resp.StatusCode != 200 {
				t.Fatalf("%s: HTTP %d %s", name, resp.StatusCode, b)
			}
			luftRun = resp.Header.Get("x-luft-run")
			log := f.engine.Log()
			rec := log[len(log)-1]
			if rec.Wire != tc.wire || rec.Status != 200 {
				t.Fatalf("%s: engine record %+v", name, rec)
			}
			recs = append(recs, rec)
			cached[tc.wire] += rec.CachedTokens
		}
		got := agentDone(t, st, luftRun)
		if len(got) != len(recs) {
			t.Fatalf("%s: %d agent_done events, want %d", name, len(got), len(recs))
		}
		var sum agent.Usage
		for i, rec := range recs {
			want := agent.Usage{Input: rec.PromptTokens, Output: rec.OutputTokens, Cached: rec.CachedTokens}
			if got[i] != want {
				t.Errorf("%s: turn %d recorded %+v, the engine counted %+v", name, i+1, got[i], want)
			}
			sum = sum.Add(want)
		}
		row, err := st.GetRun(context.Background(), luftRun)
		if err != nil {
			t.Fatal(err)
		}
		if row.Usage != (storage.Usage{Input: sum.Input, Output: sum.Output, Cached: sum.Cached}) || row.Cost <= 0 {
			t.Errorf("%s: run totals %+v cost %v, want %+v", name, row.Usage, row.Cost, sum)
		}
	}
	if cached[testkit.WireResponses] == 0 || cached[testkit.WireMessages] == 0 {
		t.Fatalf("no turn read the engine's cache (%v): the test cannot tell cached tokens apart", cached)
	}
}

// TestMessagesUsageCountsCache: an Anthropic answer's usage counts cache reads and
// writes apart from input_tokens; luft's input is the sum, its cached the reads, in a
// whole answer and in a stream whose message_delta carries only the output.
func TestMessagesUsageCountsCache(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"+
				"\"usage\":{\"input_tokens\":5,\"cache_creation_input_tokens\":3,\"cache_read_input_tokens\":7,\"output_tokens\":1}}}\n\n"+
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"+
				"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn",`+
			`"usage":{"input_tokens":5,"cache_creation_input_tokens":3,"cache_read_input_tokens":7,"output_tokens":2}}`)
	}))
	defer up.Close()
	st, err := storage.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "an", Family: FamilyAnthropic, BaseURL: up.URL + "/v1", Model: "claude-m"}},
		Service: recordIn(t, st)})
	for _, tc := range []struct {
		body string
		want agent.Usage
	}{
		{`{"model":"claude-m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, agent.Usage{Input: 15, Cached: 7, Output: 2}},
		{`{"model":"claude-m","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, agent.Usage{Input: 15, Cached: 7, Output: 9}},
	} {
		resp, b := postTo(t, front+"/v1/messages", tc.body, anthropicVersion)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"hi"`) {
			t.Fatalf("HTTP %d %s", resp.StatusCode, b)
		}
		if got := agentDone(t, st, resp.Header.Get("x-luft-run")); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: recorded %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

// ---- errors ----

// TestWireErrorShapes: what luft refuses on a wire it refuses in that wire's shape and
// status, before the engine sees anything.
func TestWireErrorShapes(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{opts: func(o *Options) { o.MaxBody = 1 << 16 }})
	huge := strings.Repeat("a", 1<<17)
	const msg = `{"model":"claude-m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	const resp = `{"model":"gpt-m","input":"hi"}`
	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
		status           int
		shape, typ, want string
	}{
		{"messages malformed", "/v1/messages", `{"model":"claude-m","messages":[`, anthropicVersion, 400, "anthropic", "invalid_request_error", "not a valid Messages request"},
		{"messages no model", "/v1/messages", `{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, anthropicVersion, 400, "anthropic", "invalid_request_error", "needs model"},
		{"messages unknown model", "/v1/messages", strings.Replace(msg, "claude-m", "gpt-m", 1), anthropicVersion, 404, "anthropic", "not_found_error", "configured models: claude-m, claude-n"},
		{"messages too large", "/v1/messages", `{"model":"claude-m","max_tokens":8,"messages":[{"role":"user","content":"` + huge + `"}]}`, anthropicVersion, 413, "anthropic", "request_too_large", "at most"},
		{"messages bad class", "/v1/messages", msg, hdrs(anthropicVersion, map[string]string{"x-luft-class": "urgent"}), 400, "anthropic", "invalid_request_error", "interactive or batch"},
		{"messages without anthropic-version", "/v1/messages", `{"model":"claude-m"`, nil, 400, "anthropic", "invalid_request_error", "not a valid Messages request"},
		{"responses malformed", "/v1/responses", `{"model":"gpt-m","input":[`, nil, 400, "openai", "invalid_request_error", "not a valid Responses API request"},
		{"responses no model", "/v1/responses", `{"input":"hi"}`, nil, 400, "openai", "invalid_request_error", "needs model"},
		{"responses no input", "/v1/responses", `{"model":"gpt-m"}`, nil, 400, "openai", "invalid_request_error", "needs input"},
		{"responses unknown model", "/v1/responses", strings.Replace(resp, "gpt-m", "claude-m", 1), nil, 404, "openai", "invalid_request_error", "configured models: gpt-m"},
		{"responses too large", "/v1/responses", `{"model":"gpt-m","input":"` + huge + `"}`, nil, 413, "openai", "invalid_request_error", "at most"},
		{"responses bad class", "/v1/responses", resp, map[string]string{"x-luft-class": "urgent"}, 400, "openai", "invalid_request_error", "interactive or batch"},
		{"count_tokens malformed", "/v1/messages/count_tokens", `{"model":`, anthropicVersion, 400, "anthropic", "invalid_request_error", "count_tokens"},
		{"count_tokens unknown model", "/v1/messages/count_tokens", `{"model":"gpt-m","messages":[{"role":"user","content":"hi"}]}`, anthropicVersion, 404, "anthropic", "not_found_error", "configured models: claude-m"},
		{"count_tokens too large", "/v1/messages/count_tokens", `{"model":"claude-m","messages":[{"role":"user","content":"` + huge + `"}]}`, anthropicVersion, 413, "anthropic", "request_too_large", "at most"},
		{"unknown path, Anthropic client", "/v1/complete", `{}`, anthropicVersion, 404, "anthropic", "not_found_error", "/v1/messages"},
		{"unknown path, OpenAI client", "/v1/embeddings", `{}`, nil, 404, "openai", "invalid_request_error", "/v1/responses"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, b := f.send(t, tc.path, tc.body, tc.hdr)
			if r.StatusCode != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", r.StatusCode, tc.status, b)
			}
			shape, typ, m := wireErr(t, b)
			if shape != tc.shape || typ != tc.typ || !strings.Contains(m, tc.want) {
				t.Fatalf("%s error of type %s %q, want %s %s saying %q", shape, typ, m, tc.shape, tc.typ, tc.want)
			}
		})
	}
	if n := len(f.seen.all()); n != 0 {
		t.Fatalf("refused requests reached the engine: %d", n)
	}
	if runs, _ := f.proxy.runs.size(); runs != 0 {
		t.Fatalf("refused requests started %d runs", runs)
	}
}

// TestMessagesWithoutAnthropicBackend: with only openai backends, a Messages request
// (and a count) is a 404 in Anthropic's shape that names the backend type to configure.
func TestMessagesWithoutAnthropicBackend(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{opts: func(o *Options) { o.Upstreams = o.Upstreams[:1] }})
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		r, b := f.send(t, path, `{"model":"claude-m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, anthropicVersion)
		if r.StatusCode != 404 {
			t.Fatalf("%s: HTTP %d %s", path, r.StatusCode, b)
		}
		if shape, typ, m := wireErr(t, b); shape != "anthropic" || typ != "not_found_error" || !strings.Contains(m, `type = "anthropic"`) {
			t.Fatalf("%s: %s %s %q, want an Anthropic not_found_error naming type = \"anthropic\"", path, shape, typ, m)
		}
	}
	if n := len(f.seen.all()); n != 0 {
		t.Fatalf("the engine got %d requests", n)
	}
}

// ---- rate limits ----

// TestWireRateLimitsLearned: on each wire the engine allows 4 requests a second and says
// so in that wire's headers (x-ratelimit-* on the Responses API, anthropic-ratelimit-*
// on Messages, streamed); a burst of 10 turns through luft meets no 429: the scheduler learns the
// budget from the headers and holds the turns back as it refills.
func TestWireRateLimitsLearned(t *testing.T) {
	for _, tc := range []struct {
		wire       testkit.Wire
		path, body string
		hdr        map[string]string
	}{
		{testkit.WireResponses, "/v1/responses", `{"model":"gpt-m","input":"hello","max_output_tokens":4}`, nil},
		// Streamed, as Claude Code sends its turns.
		{testkit.WireMessages, "/v1/messages", `{"model":"claude-m","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hello"}]}`, anthropicVersion},
	} {
		t.Run(string(tc.wire), func(t *testing.T) {
			f := newWiresFixture(t, wiresOpts{
				engine: testkit.Config{Slots: 16, Limits: testkit.Limits{RPM: 4, TPM: 100_000, Period: time.Second}},
				// One turn at a time, so the answers' headers arrive in the order the
				// engine counted them.
				sched: scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}},
			})
			var wg sync.WaitGroup
			codes := make(chan int, 10)
			for range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, _ := f.send(t, tc.path, tc.body, hdrs(tc.hdr, map[string]string{"x-luft-caller": "burst"}))
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
			log := f.engine.Log()
			n429 := 0
			for _, r := range log {
				if r.Wire != tc.wire {
					t.Fatalf("a request on wire %s", r.Wire)
				}
				if r.Status == 429 {
					n429++
				}
			}
			if n429 != 0 || len(log) != 10 {
				t.Fatalf("the engine saw %d requests, %d of them 429", len(log), n429)
			}
		})
	}
}

// TestMessages429RetriedInsideLuft: the engine's request budget is spent when a Messages
// turn comes: its 429 (rate_limit_error, retry-after in whole seconds) is waited out
// inside luft and the turn sent again; the client gets the answer, not the 429.
func TestMessages429RetriedInsideLuft(t *testing.T) {
	// 60 requests a minute, refilled continuously: one a second once spent.
	const rpm = 60
	f := newWiresFixture(t, wiresOpts{engine: testkit.Config{Limits: testkit.Limits{RPM: rpm, TPM: 1_000_000, NoChargeRejected: true}}})
	const body = `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
	for i := range rpm {
		if resp, b := f.direct(t, "/v1/messages", body, anthropicVersion); resp.StatusCode != 200 {
			t.Fatalf("request %d of those that spend the budget: HTTP %d %s", i+1, resp.StatusCode, b)
		}
	}
	resp, b := f.send(t, "/v1/messages", body, anthropicVersion)
	if resp.StatusCode != 200 || len(messageContent(t, b, false)) == 0 {
		t.Fatalf("through luft: HTTP %d %s", resp.StatusCode, b)
	}
	log := f.engine.Log()[rpm:]
	if len(log) < 2 || log[0].Status != 429 || log[0].Wire != testkit.WireMessages || log[len(log)-1].Status != 200 {
		t.Fatalf("engine log %+v: want luft's 429, then its 200", log)
	}
	for _, r := range log[1 : len(log)-1] {
		if r.Status != 429 {
			t.Fatalf("engine log %+v", log)
		}
	}
	rej, ok := log[0], log[len(log)-1]
	if rej.RetryAfter <= 0 || ok.Arrival.Sub(rej.Arrival) < rej.RetryAfter {
		t.Fatalf("luft sent the turn again %s after the 429, which said retry after %s", ok.Arrival.Sub(rej.Arrival), rej.RetryAfter)
	}
}

// ---- auth ----

// TestMessagesAuth: an anthropic backend with a key of its own gets it as x-api-key in
// place of the client's credentials; without one, the client's x-api-key passes. With
// a proxy token, a client sending it as x-api-key is admitted and the token goes no
// further; a wrong one gets a 401 in Anthropic's shape.
func TestMessagesAuth(t *testing.T) {
	const body = `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	const count = `{"model":"claude-m","messages":[{"role":"user","content":"hi"}]}`
	check := func(t *testing.T, f *wiresFixture, hdr map[string]string, wantKey string) {
		t.Helper()
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			b := body
			if strings.HasSuffix(path, "count_tokens") {
				b = count
			}
			before := len(f.seen.all())
			if resp, got := f.send(t, path, b, hdrs(anthropicVersion, hdr)); resp.StatusCode != 200 {
				t.Fatalf("%s: HTTP %d %s", path, resp.StatusCode, got)
			}
			seen := f.seen.all()[before:]
			if len(seen) != 1 {
				t.Fatalf("%s: the engine got %d requests", path, len(seen))
			}
			h := seen[0].header
			if got := h.Values("X-Api-Key"); strings.Join(got, ",") != wantKey {
				t.Errorf("%s: the engine got x-api-key %q, want %q", path, got, wantKey)
			}
			if got := h.Get("Authorization"); got != "" {
				t.Errorf("%s: the engine got Authorization %q", path, got)
			}
			if h.Get("Anthropic-Version") == "" {
				t.Errorf("%s: anthropic-version did not reach the engine", path)
			}
		}
	}
	t.Run("backend key", func(t *testing.T) {
		f := newWiresFixture(t, wiresOpts{opts: func(o *Options) { o.Upstreams[1].APIKey = "sk-ant-luft" }})
		check(t, f, map[string]string{"x-api-key": "sk-ant-client", "Authorization": "Bearer sk-client"}, "sk-ant-luft")
	})
	t.Run("client key", func(t *testing.T) {
		f := newWiresFixture(t, wiresOpts{})
		check(t, f, map[string]string{"x-api-key": "sk-ant-client"}, "sk-ant-client")
	})
	t.Run("luft token as x-api-key", func(t *testing.T) {
		f := newWiresFixture(t, wiresOpts{opts: func(o *Options) { o.Token = "luft-tok" }})
		check(t, f, map[string]string{"x-api-key": "luft-tok"}, "")
		for _, tc := range []struct {
			hdr   map[string]string
			shape string
		}{
			{hdrs(anthropicVersion, map[string]string{"x-api-key": "wrong"}), "anthropic"},
			{anthropicVersion, "anthropic"},
			{map[string]string{"x-api-key": "wrong"}, "openai"},
		} {
			resp, b := f.send(t, "/v1/messages", body, tc.hdr)
			if resp.StatusCode != 401 {
				t.Fatalf("%v: HTTP %d %s", tc.hdr, resp.StatusCode, b)
			}
			shape, typ, _ := wireErr(t, b)
			if shape != tc.shape || (shape == "anthropic" && typ != "authentication_error") {
				t.Errorf("%v: a 401 %s %s, want in %s's shape", tc.hdr, shape, typ, tc.shape)
			}
		}
		if n := len(f.seen.all()); n != 2 {
			t.Fatalf("the engine got %d requests, want the 2 with the token", n)
		}
	})
}

// ---- count_tokens and models ----

// TestCountTokensPassthrough: count_tokens is answered by the engine, with its query
// string, and not scheduled; an unknown model is a 404 in Anthropic's shape.
func TestCountTokensPassthrough(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{})
	const body = `{"model":"claude-n","system":"be brief","messages":[{"role":"user","content":"how many tokens is this, roughly?"}]}`
	resp, got := f.send(t, "/v1/messages/count_tokens?beta=true", body, anthropicVersion)
	_, want := f.direct(t, "/v1/messages/count_tokens", body, anthropicVersion)
	var n struct {
		InputTokens *int `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(got, &n) != nil || n.InputTokens == nil || *n.InputTokens <= 0 {
		t.Fatalf("HTTP %d %s", resp.StatusCode, got)
	}
	if string(got) != string(want) {
		t.Fatalf("count through luft %s, the engine's %s", got, want)
	}
	if seen := f.seen.all(); seen[0].uri != "/v1/messages/count_tokens?beta=true" || string(seen[0].body) != body {
		t.Fatalf("the engine got %s %q", seen[0].uri, seen[0].body)
	}
	if turns := f.turns.all(); len(turns) != 0 {
		t.Fatalf("count_tokens was scheduled: %+v", turns)
	}
	if runs, _ := f.proxy.runs.size(); runs != 0 || resp.Header.Get("x-luft-run") != "" {
		t.Fatalf("count_tokens started %d runs", runs)
	}
}

// TestModelsPerWire: GET /v1/models lists the anthropic backends' models in Anthropic's
// shape to a client that sends anthropic-version, and the openai ones in OpenAI's to
// the rest.
func TestModelsPerWire(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{})
	get := func(hdr map[string]string) []byte {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/models", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b := readAll(t, resp)
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d %s", resp.StatusCode, b)
		}
		return b
	}
	var ant struct {
		Data []struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
		} `json:"data"`
		HasMore *bool   `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
		Object  *string `json:"object"`
	}
	b := get(anthropicVersion)
	if err := json.Unmarshal(b, &ant); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range ant.Data {
		if m.Type != "model" || m.DisplayName == "" {
			t.Errorf("model %s of type %q", m.ID, m.Type)
		}
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "claude-m,claude-n" || ant.HasMore == nil || *ant.HasMore || ant.FirstID == nil || *ant.FirstID != "claude-m" ||
		ant.LastID == nil || *ant.LastID != "claude-n" || ant.Object != nil {
		t.Fatalf("Anthropic's list: %s", b)
	}
	var oai struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object string
			OwnedBy    string `json:"owned_by"`
		} `json:"data"`
	}
	b = get(nil)
	if err := json.Unmarshal(b, &oai); err != nil || oai.Object != "list" || len(oai.Data) != 1 || oai.Data[0].ID != "gpt-m" ||
		oai.Data[0].Object != "model" || oai.Data[0].OwnedBy != "oa" {
		t.Fatalf("OpenAI's list: %s", b)
	}
}

// ---- hostile input ----

// TestWireHostileInput: bodies of the wrong shape on either wire are refused with a 400
// in the wire's shape, whatever they hold; the proxy keeps serving.
func TestWireHostileInput(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{})
	items := func(n int, item string) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	nested := strings.Repeat("[", 20_000) + strings.Repeat("]", 20_000)
	for _, tc := range []struct {
		name, path, body string
		upstream         bool // refused by the engine, not luft
	}{
		{"input a number", "/v1/responses", `{"model":"gpt-m","input":42}`, false},
		{"input an object", "/v1/responses", `{"model":"gpt-m","input":{"role":"user","content":"hi"}}`, false},
		{"input true", "/v1/responses", `{"model":"gpt-m","input":true}`, false},
		{"thousands of items not objects", "/v1/responses", `{"model":"gpt-m","input":` + items(5000, `"hi"`) + `}`, false},
		{"thousands of outputs of unknown calls", "/v1/responses",
			`{"model":"gpt-m","input":` + items(5000, `{"type":"function_call_output","call_id":"call_nope","output":"x"}`) + `}`, true},
		{"deeply nested input", "/v1/responses", `{"model":"gpt-m","input":` + nested + `}`, false},
		{"deeply nested item", "/v1/responses", `{"model":"gpt-m","input":[{"type":"message","content":` + nested + `}]}`, false},
		{"huge previous_response_id", "/v1/responses", `{"model":"gpt-m","previous_response_id":"resp_` + strings.Repeat("x", 1<<20) + `","input":"hi"}`, true},
		{"previous_response_id a number", "/v1/responses", `{"model":"gpt-m","previous_response_id":7,"input":"hi"}`, false},
		{"content a number", "/v1/messages", `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":42}]}`, false},
		{"content an object", "/v1/messages", `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":{"type":"text","text":"hi"}}]}`, false},
		{"content blocks not objects", "/v1/messages", `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":[1,2,3]}]}`, false},
		{"messages a string", "/v1/messages", `{"model":"claude-m","max_tokens":4,"messages":"hi"}`, false},
		{"deeply nested content", "/v1/messages", `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":` + nested + `}]}`, false},
		{"thousands of blocks not objects", "/v1/messages", `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":` + items(5000, `"x"`) + `}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr, shape := map[string]string(nil), "openai"
			if strings.HasPrefix(tc.path, "/v1/messages") {
				hdr, shape = anthropicVersion, "anthropic"
			}
			before := len(f.seen.all())
			resp, b := f.send(t, tc.path, tc.body, hdr)
			if resp.StatusCode != 400 {
				t.Fatalf("HTTP %d, want 400: %.300s", resp.StatusCode, b)
			}
			if got, typ, _ := wireErr(t, b); got != shape || typ != "invalid_request_error" {
				t.Fatalf("a %s %s error, want %s invalid_request_error: %.300s", got, typ, shape, b)
			}
			if sent := len(f.seen.all()) - before; sent != map[bool]int{false: 0, true: 1}[tc.upstream] {
				t.Fatalf("%d requests reached the engine", sent)
			}
		})
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"gpt-m","input":"still there?"}`},
		{"/v1/messages", `{"model":"claude-m","max_tokens":4,"messages":[{"role":"user","content":"still there?"}]}`},
	} {
		if resp, b := f.send(t, tc.path, tc.body, anthropicVersion); resp.StatusCode != 200 {
			t.Fatalf("%s after the hostile input: HTTP %d %s", tc.path, resp.StatusCode, b)
		}
	}
}

// ---- unrecorded ends ----

// TestUnrecordedEndOnWires: when the turn's end cannot be recorded (the state dir turned
// read-only while the turn was upstream), a Responses stream ends with an error event
// saying luft_state_unwritable in place of response.completed, and a Messages stream
// with one in place of message_stop; a whole answer is replaced by a 503 in the wire's
// shape. The closing event never reaches the client.
func TestUnrecordedEndOnWires(t *testing.T) {
	st := newReadOnlyStore(t)
	f := newWiresFixture(t, wiresOpts{store: st, hook: func(*http.Request, []byte) { st.ro.Store(true) }})
	t.Cleanup(func() { st.ro.Store(false) }) // before the proxy closes: its runs' ends are written
	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
		closing, before  string // the closing event, and one that comes before it
	}{
		{"responses", "/v1/responses", `{"model":"gpt-m","stream":true,"input":"hello","max_output_tokens":6}`, nil,
			"response.completed", "response.output_item.done"},
		{"messages", "/v1/messages", `{"model":"claude-m","stream":true,"max_tokens":6,"messages":[{"role":"user","content":"hello"}]}`, anthropicVersion,
			"message_stop", "message_delta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st.ro.Store(false)
			resp, b := f.send(t, tc.path, tc.body, tc.hdr)
			if resp.StatusCode != 200 || resp.Header.Get("x-luft-run") == "" {
				t.Fatalf("HTTP %d (run %q) %s", resp.StatusCode, resp.Header.Get("x-luft-run"), b)
			}
			evs := sseOf(t, b)
			var names []string
			for _, ev := range evs {
				names = append(names, ev.name)
			}
			if slices.Contains(names, tc.closing) || strings.Contains(string(b), tc.closing) {
				t.Fatalf("the stream of a turn whose end was not recorded closed with %s: %v", tc.closing, names)
			}
			if !slices.Contains(names, tc.before) {
				t.Fatalf("the stream lost its events before the end: %v", names)
			}
			last := evs[len(evs)-1]
			data, _ := json.Marshal(last.data)
			if last.name != "error" || last.data["type"] != "error" || !strings.Contains(string(data), codeUnrecorded) || !strings.Contains(string(data), st.dir) {
				t.Fatalf("the stream ends with %s %s, want an error event saying %s and the state dir", last.name, data, codeUnrecorded)
			}
			if tc.name == "messages" {
				if e, _ := last.data["error"].(map[string]any); e == nil || e["type"] != "api_error" {
					t.Errorf("not an Anthropic error event: %s", data)
				}
			} else if last.data["code"] != codeUnrecorded {
				t.Errorf("not a Responses error event: %s", data)
			}

			st.ro.Store(false)
			whole := strings.Replace(tc.body, `"stream":true,`, "", 1)
			resp, b = f.send(t, tc.path, whole, tc.hdr)
			shape, typ, msg := wireErr(t, b)
			want := map[string][2]string{"responses": {"openai", "server_error"}, "messages": {"anthropic", "overloaded_error"}}[tc.name]
			if resp.StatusCode != 503 || shape != want[0] || typ != want[1] || !strings.Contains(string(b), codeUnrecorded) || !strings.Contains(msg, st.dir) {
				t.Fatalf("a whole answer whose end was not recorded: HTTP %d %s, want a 503 %s in %s's shape", resp.StatusCode, b, want[1], want[0])
			}
		})
	}
}

// A cap beyond any model's output (max_tokens near the int64 limit) is held to
// maxReserved in the turn's estimate: it cannot overflow into a reservation of nothing.
func TestHugeCapBoundedEstimate(t *testing.T) {
	f := newWiresFixture(t, wiresOpts{})
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"gpt-m","messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807}`},
		{"/v1/responses", `{"model":"gpt-m","input":"hi","max_output_tokens":9223372036854775807}`},
		{"/v1/messages", `{"model":"claude-m","max_tokens":9223372036854775807,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		f.send(t, c.path, c.body, map[string]string{"anthropic-version": "2023-06-01"})
	}
	turns := f.turns.all()
	if len(turns) != 3 {
		t.Fatalf("%d turns admitted, want 3", len(turns))
	}
	for _, tu := range turns {
		if tu.EstOutput != maxReserved || tu.EstTokens <= tu.EstOutput || tu.EstTokens > 2*maxReserved {
			t.Errorf("turn estimated at %d tokens, %d of them output: want the cap held to %d", tu.EstTokens, tu.EstOutput, maxReserved)
		}
	}
}
