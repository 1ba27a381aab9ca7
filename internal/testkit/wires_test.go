package testkit

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

// sseEvent is one named server-sent event of the Responses or Messages API.
type sseEvent struct {
	Event string
	Data  map[string]any
}

// nextEvent reads one event: an event: line and a data: line, then a blank line. The
// event's name must be its data's type.
func nextEvent(t *testing.T, br *bufio.Reader) (sseEvent, bool) {
	t.Helper()
	var ev sseEvent
	var data string
	for {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" && ev.Event == "" && data == "" {
			return ev, false
		}
		if err != nil {
			t.Fatalf("reading the stream: %v (line %q)", err, line)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && ev.Event == "" && data == "":
			continue
		case line == "":
			if err := json.Unmarshal([]byte(data), &ev.Data); err != nil {
				t.Fatalf("event %s: data %q: %v", ev.Event, data, err)
			}
			if ev.Event == "" || ev.Data["type"] != ev.Event {
				t.Fatalf("event %q carries type %v", ev.Event, ev.Data["type"])
			}
			return ev, true
		case strings.HasPrefix(line, "event: "):
			ev.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if data != "" {
				t.Fatalf("event %s has two data lines", ev.Event)
			}
			data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
}

// readEvents reads every event of a stream.
func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	br := bufio.NewReader(r)
	var out []sseEvent
	for {
		ev, ok := nextEvent(t, br)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

// eventNames lists the events' names, squeezing repeats of one name into name+.
func eventNames(evs []sseEvent) []string {
	var out []string
	for _, ev := range evs {
		n := ev.Event
		if k := len(out); k > 0 && (out[k-1] == n || out[k-1] == n+"+") {
			out[k-1] = n + "+"
			continue
		}
		out = append(out, n)
	}
	return out
}

// streamOnClock posts a streamed request to a server whose engine runs on c, lets
// prefill end, reads the first n events, then lets decoding end and reads the rest. That
// the first events can be read while the decode timer is still pending shows they went
// out when prefill ended.
func streamOnClock(t *testing.T, c *VirtualClock, url, body string, n int) (resp *http.Response, first, rest []sseEvent) {
	t.Helper()
	type result struct {
		resp *http.Response
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		ch <- result{resp, err}
	}()
	if err := c.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	c.Step() // prefill ends
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.resp.Body.Close() })
	br := bufio.NewReader(r.resp.Body)
	for range n {
		ev, ok := nextEvent(t, br)
		if !ok {
			t.Fatalf("the stream ended after %d events", len(first))
		}
		first = append(first, ev)
	}
	if c.Pending() != 1 {
		t.Fatalf("%d timers pending after the first events, want the decode timer", c.Pending())
	}
	c.Step() // decoding ends
	for {
		ev, ok := nextEvent(t, br)
		if !ok {
			return r.resp, first, rest
		}
		rest = append(rest, ev)
	}
}

func virtualServer(t *testing.T, cfg Config) (*VirtualClock, *Engine, string) {
	t.Helper()
	c := NewVirtualClock(t0)
	cfg.Clock = c
	e := NewEngine(cfg)
	s := NewServer(e)
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c, e, base
}

// TestWireRecorded: each endpoint's requests are logged with their wire, their ids in
// the wire's style and the x-luft-* headers, and RecordHeaders keeps all their headers.
func TestWireRecorded(t *testing.T) {
	e := NewEngine(Config{})
	s := NewServer(e)
	s.RecordHeaders = true
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, c := range []struct{ path, body string }{
		{"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`},
		{"/responses", `{"model":"m","input":"hi","max_output_tokens":2}`},
		{"/messages?beta=true", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`},
		{"/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	} {
		if resp, b := post(t, base+c.path, c.body, "x-luft-caller", "c"+c.path, "x-luft-run-id", "r1", "x-luft-class", "batch"); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, b)
		}
	}
	log := e.Log()
	if len(log) != 3 {
		t.Fatalf("%d records, want 3 (count_tokens is not logged)", len(log))
	}
	for i, want := range []struct {
		wire   Wire
		id     string
		caller string
	}{{WireChat, "chatcmpl-fake", "c/chat/completions"}, {WireResponses, "resp_fake", "c/responses"}, {WireMessages, "msg_fake", "c/messages?beta=true"}} {
		r := log[i]
		if r.Wire != want.wire || !strings.HasPrefix(r.ID, want.id) || r.Caller != want.caller || r.Run != "r1" || r.Class != "batch" {
			t.Errorf("record %d: wire %q id %q caller %q run %q class %q", i, r.Wire, r.ID, r.Caller, r.Run, r.Class)
		}
	}
	h := s.RequestHeaders()
	if len(h) != 3 || h[1].Get("x-luft-caller") != "c/responses" || h[2].Get("x-luft-caller") != "c/messages?beta=true" {
		t.Fatalf("recorded headers %v", h)
	}
	// In process, a request without a wire is a chat completion.
	res, err := e.Do(t.Context(), userReq("x", 1))
	if err != nil || res.Record.Wire != WireChat {
		t.Fatalf("in-process wire %q, %v", res.Record.Wire, err)
	}
}

// TestWireRateLimited: a 429 on each wire has that wire's error shape and headers: the
// Responses API OpenAI's (x-ratelimit-*, retry-after and retry-after-ms as the provider
// model sends them), the Messages API Anthropic's (anthropic-ratelimit-*, retry-after in
// whole seconds, never x-ratelimit-*), streamed or not.
func TestWireRateLimited(t *testing.T) {
	for _, p := range []Provider{ProviderClassic, ProviderOpenAI, ProviderAnthropic} {
		t.Run(p.String(), func(t *testing.T) {
			for _, c := range []struct {
				path, body string
				stream     bool
			}{
				{"/responses", `{"model":"m","input":"hi","max_output_tokens":2}`, false},
				{"/responses", `{"model":"m","input":"hi","max_output_tokens":2,"stream":true}`, true},
				{"/messages", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, false},
				{"/messages", `{"model":"m","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true},
			} {
				e, _, base := startServer(t, Config{Limits: Limits{Provider: p, RPM: 1, TPM: 100000, Quantum: noQuantum}})
				if resp, b := post(t, base+c.path, c.body); resp.StatusCode != 200 {
					t.Fatalf("%s: first request %d %s", c.path, resp.StatusCode, b)
				}
				resp, b := post(t, base+c.path, c.body)
				now := time.Now()
				if resp.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("%s stream=%v: %d %s", c.path, c.stream, resp.StatusCode, b)
				}
				hdrs := strings.Join(rateHeaders(resp.Header), " ")
				tel := scheduler.ParseTelemetry(resp.Header, now)
				if tel.Requests.Limit != 1 || tel.Requests.Remaining != 0 || tel.RetryAt.IsZero() {
					t.Errorf("%s: telemetry %+v from %v", c.path, tel, resp.Header)
				}
				m := decodeMap(t, b)
				if strings.HasPrefix(c.path, "/messages") {
					if path(m, "type") != "error" || path(m, "error", "type") != "rate_limit_error" || path(m, "error", "message") == "" ||
						resp.Header.Get("request-id") == "" {
						t.Errorf("messages 429 body %s", b)
					}
					if strings.Contains(hdrs, "x-ratelimit-") || !strings.Contains(hdrs, "anthropic-ratelimit-requests-remaining") {
						t.Errorf("messages 429 headers %s", hdrs)
					}
					if ra := resp.Header.Get("retry-after"); ra == "" || strings.Contains(ra, ".") || resp.Header.Get("retry-after-ms") != "" {
						t.Errorf("messages 429 retry headers %v", resp.Header)
					}
					if log := e.Log(); len(log) != 2 || log[1].Status != 429 || log[1].Wire != WireMessages {
						t.Errorf("log %+v", log)
					}
					continue
				}
				var er ErrorResponse
				if json.Unmarshal(b, &er) != nil || er.Error.Message == "" || er.Error.Type == "" {
					t.Errorf("responses 429 body %s", b)
				}
				if p != ProviderAnthropic && !strings.Contains(hdrs, "x-ratelimit-remaining-requests") {
					t.Errorf("responses 429 headers %s", hdrs)
				}
				if p == ProviderClassic && resp.Header.Get("retry-after-ms") == "" {
					t.Errorf("classic responses 429 without retry-after-ms: %v", resp.Header)
				}
				if log := e.Log(); len(log) != 2 || log[1].Status != 429 || log[1].LimitedBy != "requests" || log[1].Stream != c.stream {
					t.Errorf("log %+v", log)
				}
			}
		})
	}
}

// TestWireHostileInput: malformed and mistyped bodies get each wire's 400, never a
// panic; a body past the size limit gets Anthropic's 413 on the Messages API.
func TestWireHostileInput(t *testing.T) {
	e, _, base := startServer(t, Config{})
	for _, c := range []struct{ path, body, want string }{
		{"/responses", `{"model":`, "could not parse"},
		{"/responses", `[1,2]`, "could not parse"},
		{"/responses", `{"model":"m","input":5}`, "input"},
		{"/responses", `{"model":"m","input":[5]}`, "input[0]"},
		{"/responses", `{"model":"m","input":[{"role":"user","content":7}]}`, "input[0].content"},
		{"/responses", `{"model":"m","input":[{"role":"wizard","content":"x"}]}`, "wizard"},
		{"/responses", `{"model":"m","input":[{"content":"x"}]}`, "input[0].role"},
		{"/responses", `{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f"}]}`, "input[0].arguments"},
		{"/responses", `{"model":"m","input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}`, "No tool call found"},
		{"/responses", `{"model":"m","input":"x","tools":[{"type":"function"}]}`, "tools[0].name"},
		{"/responses", `{"model":"m","input":"x","tools":[7]}`, "tools[0]"},
		{"/responses", `{"model":"m","input":"x","max_output_tokens":"many"}`, "could not parse"},
		{"/responses", `{"model":"m","input":"x","max_output_tokens":0}`, "max_tokens"},
		{"/responses", `{"model":"m","input":"x","text":{"format":{"type":"yaml"}}}`, "yaml"},
		{"/responses", `{"model":"m","input":"x","instructions":{"a":1}}`, "instructions"},
		{"/responses", `{"model":"m"}`, "input"},
		{"/responses", `{"model":"m","input":"x","tool_choice":"sometimes"}`, "tool_choice"},
		{"/messages", `{"model":`, "JSON body"},
		{"/messages", `{"model":"m","max_tokens":"x","messages":[]}`, "JSON body"},
		{"/messages", `{"model":"m","max_tokens":5,"messages":"hi"}`, "JSON body"},
		{"/messages", `{"model":"m","max_tokens":5,"messages":[]}`, "at least one message"},
		{"/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[7]}]}`, "content block 0"},
		{"/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, "content block 0"},
		{"/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"robot","content":"x"}]}`, "messages.0.role"},
		{"/messages", `{"model":"m","max_tokens":5,"system":9,"messages":[{"role":"user","content":"x"}]}`, "JSON body"},
		{"/messages", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{"/messages", `{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "model: Field required"},
		{"/messages", `{"model":"m","max_tokens":5,"tools":[{"description":"no name"}],"messages":[{"role":"user","content":"x"}]}`, "tools.0.custom.name"},
		{"/messages", `{"model":"m","max_tokens":5,"tool_choice":{"type":"maybe"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice"},
		{"/messages", `{"model":"m","max_tokens":5,"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice.tool.name"},
		{"/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`, "tool_use.id"},
		{"/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":7}]}`, "JSON body"},
	} {
		resp, b := post(t, base+c.path, c.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s: %d %s, want 400 naming %q", c.path, c.body, resp.StatusCode, b, c.want)
			continue
		}
		m := decodeMap(t, b)
		if strings.HasPrefix(c.path, "/messages") {
			if path(m, "type") != "error" || path(m, "error", "type") != "invalid_request_error" {
				t.Errorf("%s %s: not Anthropic's error shape: %s", c.path, c.body, b)
			}
		} else if path(m, "error", "type") != "invalid_request_error" || path(m, "error", "message") == nil {
			t.Errorf("%s %s: not OpenAI's error shape: %s", c.path, c.body, b)
		}
	}
	// Deep nesting is read once, not once per level: namespaces do not nest, nor do tool
	// results.
	deep := func(open, close string, n int) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	for _, c := range []struct{ path, body string }{
		{"/responses", `{"model":"m","input":"x","tools":[` + deep(`{"type":"namespace","name":"n","tools":[`, `]}`, 3000) + `]}`},
		{"/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[` + deep(`{"type":"tool_result","content":[`, `]}`, 3000) + `]}]}]}`},
	} {
		if resp, b := post(t, base+c.path, c.body); resp.StatusCode != 200 {
			t.Errorf("%s, deeply nested: %d %s", c.path, resp.StatusCode, b)
		}
	}

	// A body past the limit (lowered for the test), streamed without being held in memory.
	defer func(n int64) { maxBody = n }(maxBody)
	maxBody = 1 << 16
	for _, p := range []string{"/v1/messages", "/v1/responses"} {
		body := io.MultiReader(strings.NewReader(`{"model":"`), endless('a'))
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, p, body)
		rec := httptest.NewRecorder()
		NewServer(e).Handler().ServeHTTP(rec, req)
		want := http.StatusBadRequest
		if p == "/v1/messages" {
			want = http.StatusRequestEntityTooLarge
		}
		if rec.Code != want || !strings.Contains(rec.Body.String(), "error") {
			t.Errorf("%s with a huge body: %d %s", p, rec.Code, rec.Body.String())
		}
	}
	if n := len(e.Log()); n != 5 {
		// Refusals made before the engine are not logged; the engine's own are (max_output_tokens
		// 0, max_tokens 0, tool_choice "sometimes"), and so are the two deep requests.
		t.Errorf("%d records, want 5", n)
	}
}

// endless is a reader of one byte forever.
type endless byte

func (b endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
