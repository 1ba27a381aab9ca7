package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

// startServer runs an engine on the real clock with zero latency behind a loopback
// server.
func startServer(t *testing.T, cfg Config) (*Engine, *Server, string) {
	t.Helper()
	e := NewEngine(cfg)
	s := NewServer(e)
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasSuffix(base, "/v1") || s.URL() != base {
		t.Fatalf("base URL %q", base)
	}
	return e, s, base
}

func post(t *testing.T, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return m
}

// path walks decoded JSON: keys for objects, ints for arrays.
func path(v any, steps ...any) any {
	for _, s := range steps {
		switch k := s.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func TestHTTPChatCompletion(t *testing.T) {
	e, _, base := startServer(t, Config{Limits: Limits{RPM: 100, TPM: 10000}})
	body := `{"model":"gpt-test","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Say hello"}]}],"max_tokens":6,"temperature":0.2,"stream":false}`
	resp, b := post(t, base+"/chat/completions", body, "x-luft-caller", "alice", "x-luft-run-id", "run-9", "x-luft-class", "interactive")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	m := decodeMap(t, b)
	if path(m, "object") != "chat.completion" || path(m, "model") != "gpt-test" || path(m, "id") == nil ||
		path(m, "choices", 0, "message", "role") != "assistant" || path(m, "choices", 0, "finish_reason") != "stop" ||
		path(m, "choices", 0, "index") != 0.0 {
		t.Fatalf("response shape: %s", b)
	}
	content, _ := path(m, "choices", 0, "message", "content").(string)
	if CountTokens(content) != 6 {
		t.Fatalf("content %q", content)
	}
	// <|system|> Be brie f. <|user|> Say hell o <|assistant|> = 9 tokens.
	if path(m, "usage", "prompt_tokens") != 9.0 || path(m, "usage", "completion_tokens") != 6.0 ||
		path(m, "usage", "total_tokens") != 15.0 || path(m, "usage", "prompt_tokens_details", "cached_tokens") != 0.0 {
		t.Fatalf("usage: %v", path(m, "usage"))
	}
	tel := scheduler.ParseTelemetry(resp.Header, time.Now())
	if tel.Requests.Limit != 100 || tel.Requests.Remaining != 99 || tel.Tokens.Limit != 10000 || tel.Tokens.Remaining != 10000-15 {
		t.Fatalf("telemetry %+v", tel)
	}
	log := e.Log()
	if len(log) != 1 || log[0].Caller != "alice" || log[0].Run != "run-9" || log[0].Class != "interactive" || log[0].Status != 200 {
		t.Fatalf("log %+v", log)
	}

	// The typed client side decodes the same body.
	var typed ChatResponse
	if err := json.Unmarshal(b, &typed); err != nil || typed.Usage.PromptTokensDetails == nil {
		t.Fatalf("typed decode: %v", err)
	}
}

func TestHTTPToolCallRoundTrip(t *testing.T) {
	_, _, base := startServer(t, Config{ToolRules: []ToolRule{{
		Match: "weather", Calls: []ScriptedCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}, Reply: "Cold.",
	}}})
	tools := `[{"type":"function","function":{"name":"get_weather","description":"Weather by city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	body := `{"model":"m","tools":` + tools + `,"tool_choice":"auto","messages":[{"role":"user","content":"weather in Oslo?"}]}`
	resp, b := post(t, base+"/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	m := decodeMap(t, b)
	msg := path(m, "choices", 0, "message")
	if path(m, "choices", 0, "finish_reason") != "tool_calls" || path(msg, "content") != nil ||
		path(msg, "tool_calls", 0, "type") != "function" || path(msg, "tool_calls", 0, "function", "name") != "get_weather" ||
		path(msg, "tool_calls", 0, "function", "arguments") != `{"city":"Oslo"}` {
		t.Fatalf("tool call response: %s", b)
	}
	id, _ := path(msg, "tool_calls", 0, "id").(string)
	assistant, _ := json.Marshal(msg)

	body2 := `{"model":"m","tools":` + tools + `,"messages":[{"role":"user","content":"weather in Oslo?"},` +
		string(assistant) + `,{"role":"tool","tool_call_id":"` + id + `","content":"-3C"}]}`
	resp, b = post(t, base+"/chat/completions", body2)
	m = decodeMap(t, b)
	if resp.StatusCode != 200 || path(m, "choices", 0, "message", "content") != "Cold." || path(m, "choices", 0, "finish_reason") != "stop" {
		t.Fatalf("after the tool: %d %s", resp.StatusCode, b)
	}
	// The second turn's prompt extends the first: its cache hit is reported.
	if c, _ := path(m, "usage", "prompt_tokens_details", "cached_tokens").(float64); c == 0 {
		t.Fatalf("no cached tokens on the continuation: %s", b)
	}
}

// sse reads a text/event-stream body into its data payloads.
func sse(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		out = append(out, data)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHTTPStreaming(t *testing.T) {
	_, _, base := startServer(t, Config{
		PrefillPerToken: time.Microsecond, DecodePerToken: time.Microsecond,
		ToolRules: []ToolRule{{Match: "look", Calls: []ScriptedCall{{Name: "a", Arguments: `{"x":1}`}, {Name: "b"}}}},
	})
	plain := `{"model":"m","messages":[{"role":"user","content":"tell me a story"}],"max_tokens":12}`
	_, b := post(t, base+"/chat/completions", plain)
	want, _ := path(decodeMap(t, b), "choices", 0, "message", "content").(string)

	streamed := strings.TrimSuffix(plain, "}") + `,"stream":true,"stream_options":{"include_usage":true}}`
	resp, b := post(t, base+"/chat/completions", streamed)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header)
	}
	if tel := scheduler.ParseTelemetry(resp.Header, time.Now()); !tel.Empty() {
		t.Fatalf("no limits configured, yet telemetry %+v", tel)
	}
	events := sse(t, strings.NewReader(string(b)))
	if events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %v", events)
	}
	var text strings.Builder
	var finish string
	var usage *Usage
	for i, ev := range events[:len(events)-1] {
		var c ChatChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "chat.completion.chunk" || c.ID == "" {
			t.Fatalf("chunk %d: %s", i, ev)
		}
		if i == 0 && (len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant") {
			t.Fatalf("first chunk carries no role: %s", ev)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			if len(c.Choices) != 0 || i != len(events)-2 {
				t.Fatalf("usage chunk must be last with no choices: %s", ev)
			}
			usage = c.Usage
		}
	}
	if text.String() != want || finish != "stop" {
		t.Fatalf("streamed %q (%s), non-streamed %q", text.String(), finish, want)
	}
	if usage == nil || usage.CompletionTokens != 12 || usage.PromptTokens != 7 || usage.PromptTokensDetails == nil {
		t.Fatalf("usage %+v", usage)
	}

	// Tool calls stream as an id/name delta, then the arguments, per call index.
	resp, b = post(t, base+"/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"look around"}]}`)
	calls := map[int]*ToolCall{}
	finish = ""
	for _, ev := range sse(t, strings.NewReader(string(b))) {
		if ev == "[DONE]" {
			continue
		}
		var c ChatChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			t.Fatal("usage sent without include_usage")
		}
		for _, ch := range c.Choices {
			for _, d := range ch.Delta.ToolCalls {
				tc := calls[*d.Index]
				if tc == nil {
					tc = &ToolCall{}
					calls[*d.Index] = tc
				}
				if d.ID != "" {
					tc.ID, tc.Type, tc.Function.Name = d.ID, d.Type, d.Function.Name
				}
				tc.Function.Arguments += d.Function.Arguments
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	if resp.StatusCode != 200 || finish != "tool_calls" || len(calls) != 2 ||
		calls[0].Function.Name != "a" || calls[0].Function.Arguments != `{"x":1}` ||
		calls[1].Function.Name != "b" || calls[1].Function.Arguments != "{}" || calls[1].ID == "" {
		t.Fatalf("streamed tool calls: %d %s %+v", resp.StatusCode, finish, calls)
	}
}

func TestHTTPRateLimited(t *testing.T) {
	e, _, base := startServer(t, Config{Limits: Limits{RPM: 1, TPM: 1000}})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
	if resp, b := post(t, base+"/chat/completions", body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for _, stream := range []bool{false, true} {
		bd := body
		if stream {
			bd = strings.TrimSuffix(body, "}") + `,"stream":true}`
		}
		resp, b := post(t, base+"/chat/completions", bd)
		now := time.Now()
		if resp.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("stream=%v: %d %s", stream, resp.StatusCode, b)
		}
		var er ErrorResponse
		if err := json.Unmarshal(b, &er); err != nil || er.Error.Type != "requests" || er.Error.Code == nil || *er.Error.Code != "rate_limit_exceeded" {
			t.Fatalf("error body %s", b)
		}
		tel := scheduler.ParseTelemetry(resp.Header, now)
		if tel.RetryAt.IsZero() || tel.RetryAt.Sub(now) > 3*time.Minute || tel.Requests.Limit != 1 || tel.Requests.Remaining != 0 {
			t.Fatalf("stream=%v: telemetry %+v", stream, tel)
		}
		if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After-Ms") == "" {
			t.Fatalf("no retry headers: %v", resp.Header)
		}
	}
	if st := e.Stats(); st.Rejected != 2 || st.Completed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHTTPReplicasModelsAndErrors(t *testing.T) {
	e, s, base := startServer(t, Config{Replicas: 2, Models: []string{"m1", "m2"}})
	body := `{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	if resp, b := post(t, s.ReplicaURL(1)+"/chat/completions", body); resp.StatusCode != 200 || resp.Header.Get("x-fake-replica") != "1" {
		t.Fatalf("pinned: %d %s", resp.StatusCode, b)
	}
	if e.Log()[0].Replica != 1 {
		t.Fatal("the replica URL did not pin the request")
	}
	if resp, _ := post(t, s.ReplicaURL(7)+"/chat/completions", body); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown replica: %d", resp.StatusCode)
	}

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/models", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list ModelList
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || list.Object != "list" || len(list.Data) != 2 || list.Data[1].ID != "m2" || list.Data[0].Object != "model" {
		t.Fatalf("models: %v %+v", err, list)
	}

	for _, c := range []struct {
		url, body string
		status    int
		errType   string
	}{
		{base + "/chat/completions", `{"model":`, 400, "invalid_request_error"},
		{base + "/chat/completions", `{"model":"m9","messages":[{"role":"user","content":"x"}]}`, 404, "invalid_request_error"},
		{base + "/chat/completions", `{"model":"m1","messages":[{"role":"user","content":7}]}`, 400, "invalid_request_error"},
		{base + "/completions", `{}`, 404, "invalid_request_error"},
	} {
		resp, b := post(t, c.url, c.body)
		var er ErrorResponse
		if resp.StatusCode != c.status || json.Unmarshal(b, &er) != nil || er.Error.Type != c.errType || er.Error.Message == "" {
			t.Errorf("%s %s: %d %s", c.url, c.body, resp.StatusCode, b)
		}
	}

	for _, p := range []string{"/health", "/metrics"} {
		u := strings.TrimSuffix(base, "/v1") + p
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || (p == "/metrics" && !strings.Contains(string(b), `vllm:num_requests_running{replica="1"} 0`)) {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, b)
		}
	}
}

func TestHTTPStructuredOutput(t *testing.T) {
	_, _, base := startServer(t, Config{})
	body := `{"model":"m","messages":[{"role":"user","content":"extract"}],"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}}}}`
	resp, b := post(t, base+"/chat/completions", body)
	content, _ := path(decodeMap(t, b), "choices", 0, "message", "content").(string)
	var v map[string]any
	if resp.StatusCode != 200 || json.Unmarshal([]byte(content), &v) != nil || v["name"] == nil || v["age"] == nil {
		t.Fatalf("%d content %q", resp.StatusCode, content)
	}
}

func TestHTTPClientGoneFreesSlot(t *testing.T) {
	c := NewVirtualClock(t0)
	logged := make(chan struct{}, 1)
	e := NewEngine(Config{Slots: 1, DecodePerToken: time.Second, Clock: c, Log: signalWriter(logged)})
	s := NewServer(e)
	base, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":100}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	// The request is running once its prefill timer is registered; the virtual clock
	// never moves, so it can only end by the client going away.
	if err := c.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("request completed on a frozen clock")
	}
	<-logged // the handler noticed and abandoned the request
	if r := e.Log()[0]; r.Status != 499 || e.Stats().Replicas[0].Busy != 0 {
		t.Fatalf("record %+v, stats %+v", r, e.Stats())
	}
}

func TestStartRefusesNonLoopback(t *testing.T) {
	s := NewServer(NewEngine(Config{}))
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "nonsense"} {
		if _, err := s.Start(addr); err == nil {
			s.Close()
			t.Fatalf("Start(%q) succeeded", addr)
		}
	}
	for host, want := range map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true, "[::1]": true, "127.1.2.3": true, "": false, "example.com": false} {
		if IsLoopback(host) != want {
			t.Errorf("IsLoopback(%q) != %v", host, want)
		}
	}
}

// signalWriter is a log writer that signals every record written.
type signalWriter chan struct{}

func (w signalWriter) Write(p []byte) (int, error) {
	select {
	case w <- struct{}{}:
	default:
	}
	return len(p), nil
}

// The engine is as strict as OpenAI where luft's requests were found wanting: an echoed
// tool call needs its arguments string, max_completion_tokens is refused when the engine
// models an older server, and a reply longer than the cap is cut with finish_reason
// "length".
func TestWireStrictness(t *testing.T) {
	const call = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f"%s}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"x"}`
	for _, tc := range []struct {
		name   string
		cfg    Config
		body   string
		status int
		finish string
		want   string
	}{
		{name: "arguments missing", body: `{"model":"m","messages":[{"role":"user","content":"hi"},` + strings.Replace(call, "%s", "", 1) + `]}`,
			status: 400, want: "messages[1].tool_calls[0].function.arguments"},
		{name: "arguments given", body: `{"model":"m","messages":[{"role":"user","content":"hi"},` + strings.Replace(call, "%s", `,"arguments":"{}"`, 1) + `]}`,
			status: 200, finish: "stop"},
		{name: "max_completion_tokens refused", cfg: Config{NoMaxCompletionTokens: true},
			body: `{"model":"m","max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, want: "max_completion_tokens"},
		{name: "max_tokens on an older server", cfg: Config{NoMaxCompletionTokens: true},
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 200, finish: "stop"},
		{name: "reply cut at the cap", cfg: Config{ToolRules: []ToolRule{{Match: "story", Reply: "one two three four five"}}},
			body: `{"model":"m","max_completion_tokens":2,"messages":[{"role":"user","content":"story"}]}`, status: 200, finish: "length", want: `"one two"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, base := startServer(t, tc.cfg)
			resp, b := post(t, base+"/chat/completions", tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Fatalf("status %d, body %s; want %d with %q", resp.StatusCode, b, tc.status, tc.want)
			}
			if tc.finish != "" {
				if got := path(decodeMap(t, b), "choices", 0, "finish_reason"); got != tc.finish {
					t.Fatalf("finish_reason %v, want %s", got, tc.finish)
				}
			}
		})
	}
}

// TestHTTPRecordHeaders: with RecordHeaders the server keeps each chat request's headers,
// in order; without it, none.
func TestHTTPRecordHeaders(t *testing.T) {
	for _, record := range []bool{false, true} {
		s := NewServer(NewEngine(Config{Models: []string{"m1"}}))
		s.RecordHeaders = record
		base, err := s.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		for _, who := range []string{"a", "b"} {
			if resp, b := post(t, base+"/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, "x-luft-caller", who); resp.StatusCode != 200 {
				t.Fatalf("HTTP %d %s", resp.StatusCode, b)
			}
		}
		got := s.RequestHeaders()
		switch {
		case !record && len(got) != 0:
			t.Errorf("headers kept without RecordHeaders: %v", got)
		case record && (len(got) != 2 || got[0].Get("x-luft-caller") != "a" || got[1].Get("x-luft-caller") != "b" || got[0].Get("Authorization") != "Bearer sk-test"):
			t.Errorf("recorded headers %v", got)
		}
	}
}
