package testkit

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

func TestMessagesRoundTrip(t *testing.T) {
	e, _, base := startServer(t, Config{KeepRequests: true, DefaultMaxTokens: 6, Limits: Limits{RPM: 100, TPM: 100000}})
	// Fields the engine does not model, blocks it ignores and server tools are accepted.
	body := `{"model":"claude-test","max_tokens":64000,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],` +
		`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}},` +
		`{"type":"text","text":"Say hello","cache_control":{"type":"ephemeral"}}]}],` +
		`"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":5},{"type":"bash_20250124","name":"bash"}],` +
		`"metadata":{"user_id":"user-7"},"temperature":1,"thinking":{"type":"enabled","budget_tokens":1024},` +
		`"stop_sequences":["END"],"context_management":{"edits":[]},"output_config":{"effort":"high"},"top_k":5}`
	resp, b := post(t, base+"/messages?beta=true", body, "anthropic-version", "2023-06-01", "x-luft-run-id", "run-9", "x-luft-class", "interactive")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	m := decodeMap(t, b)
	id, _ := path(m, "id").(string)
	text, _ := path(m, "content", 0, "text").(string)
	if path(m, "type") != "message" || path(m, "role") != "assistant" || path(m, "model") != "claude-test" ||
		!strings.HasPrefix(id, "msg_") || path(m, "stop_reason") != "end_turn" || path(m, "stop_sequence") != nil ||
		path(m, "content", 0, "type") != "text" || CountTokens(text) != 6 {
		t.Fatalf("message shape: %s", b)
	}
	// max_tokens is the cap Anthropic requires, not a wish: the length is the engine's.
	if path(m, "usage", "input_tokens") != 9.0 || path(m, "usage", "output_tokens") != 6.0 ||
		path(m, "usage", "cache_read_input_tokens") != 0.0 || path(m, "usage", "cache_creation_input_tokens") != 0.0 {
		t.Fatalf("usage: %v", path(m, "usage"))
	}
	// Anthropic's headers, from the engine's buckets, and no x-ratelimit-*.
	if hs := strings.Join(rateHeaders(resp.Header), " "); strings.Contains(hs, "x-ratelimit") || !strings.HasPrefix(resp.Header.Get("request-id"), "req_") {
		t.Fatalf("headers %v", resp.Header)
	}
	tel := scheduler.ParseTelemetry(resp.Header, time.Now())
	if tel.Requests.Limit != 100 || tel.Requests.Remaining != 99 || tel.Tokens.Limit != 100000 ||
		resp.Header.Get("anthropic-ratelimit-tokens-remaining") != "35991" { // 100000 - 9 - 64000, exact
		t.Fatalf("telemetry %+v from %v", tel, resp.Header)
	}
	r := e.Log()[0]
	if r.Wire != WireMessages || r.ID != id || r.Caller != "user-7" || r.Run != "run-9" || r.Class != "interactive" ||
		r.MaxTokens != 64000 || len(r.Tools) != 0 || len(r.Messages) != 2 || r.Messages[0].Content != "Be brief." ||
		r.Messages[1].Content != "Say hello" || r.ChargedTokens != 9+64000 {
		t.Fatalf("record %+v", r)
	}
	var typed MessagesResponse
	if err := json.Unmarshal(b, &typed); err != nil || typed.Content[0].Text != text || typed.Usage.OutputTokens != 6 {
		t.Fatalf("typed decode: %v %+v", err, typed)
	}
	// A smaller cap cuts the answer: stop_reason max_tokens.
	resp, b = post(t, base+"/messages", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "x-luft-caller", "bob")
	if m := decodeMap(t, b); resp.StatusCode != 200 || path(m, "stop_reason") != "max_tokens" || path(m, "usage", "output_tokens") != 2.0 {
		t.Fatalf("capped: %s", b)
	}
	if r := e.Log()[1]; r.Caller != "bob" || r.FinishReason != "length" {
		t.Fatalf("record %+v", r)
	}
}

// TestMessagesStream: message_start and a ping when prefill ends, the blocks and the
// closing events when decoding ends; message_delta's usage is the log's.
func TestMessagesStream(t *testing.T) {
	c, e, base := virtualServer(t, Config{PrefillOverhead: time.Second, DecodePerToken: time.Second, DefaultMaxTokens: 5,
		ToolRules: []ToolRule{{Match: "look", Calls: []ScriptedCall{{Name: "a", Arguments: `{"x":1}`}, {Name: "b", Arguments: "", Verbatim: true}}}}})
	resp, first, rest := streamOnClock(t, c, base+"/messages", `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"tell me a story"}]}`, 2)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.Header.Get("request-id") == "" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	all := append(first, rest...)
	want := []string{"message_start", "ping", "content_block_start", "content_block_delta+", "content_block_stop", "message_delta", "message_stop"}
	if got := eventNames(all); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	r := e.Log()[0]
	start := first[0].Data["message"]
	if path(start, "id") != r.ID || path(start, "type") != "message" || path(start, "role") != "assistant" ||
		path(start, "stop_reason") != nil || path(start, "usage", "output_tokens") != 1.0 ||
		path(start, "usage", "input_tokens") != float64(r.PromptTokens-r.CachedTokens) {
		t.Fatalf("message_start %v", start)
	}
	var text strings.Builder
	for _, ev := range all {
		if ev.Event == "content_block_delta" {
			if path(ev.Data, "delta", "type") != "text_delta" || path(ev.Data, "index") != 0.0 {
				t.Fatalf("delta %v", ev.Data)
			}
			text.WriteString(path(ev.Data, "delta", "text").(string))
		}
	}
	delta := all[len(all)-2].Data
	if CountTokens(text.String()) != 5 || path(delta, "delta", "stop_reason") != "end_turn" ||
		path(delta, "usage", "output_tokens") != float64(r.OutputTokens) ||
		path(delta, "usage", "input_tokens") != float64(r.PromptTokens-r.CachedTokens) ||
		path(delta, "usage", "cache_read_input_tokens") != float64(r.CachedTokens) || r.Wire != WireMessages || !r.Stream {
		t.Fatalf("text %q, message_delta %v, record %+v", text.String(), delta, r)
	}

	// Tool use blocks: start with an empty input, one input_json_delta with the whole
	// input (an object, even for arguments that are not one), stop.
	_, first, rest = streamOnClock(t, c, base+"/messages", `{"model":"m","max_tokens":100,"stream":true,"tools":[{"name":"a","input_schema":{"type":"object"}},{"name":"b","input_schema":{"type":"object"}}],`+
		`"messages":[{"role":"user","content":"look around"}]}`, 2)
	all = append(first, rest...)
	want = []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if got := eventNames(all); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	blk, d, blk2, d2 := all[2].Data, all[3].Data, all[5].Data, all[6].Data
	id, _ := path(blk, "content_block", "id").(string)
	if path(blk, "content_block", "type") != "tool_use" || path(blk, "content_block", "name") != "a" || !strings.HasPrefix(id, "toolu_") ||
		path(blk, "content_block", "input") == nil || path(d, "delta", "type") != "input_json_delta" || path(d, "delta", "partial_json") != `{"x":1}` ||
		path(blk2, "index") != 1.0 || path(d2, "delta", "partial_json") != "{}" || path(all[8].Data, "delta", "stop_reason") != "tool_use" {
		t.Fatalf("tool use events %v %v %v %v %v", blk, d, blk2, d2, all[8].Data)
	}
}

// TestMessagesToolRounds: tool_use blocks with toolu_ ids, answered by tool_result
// blocks, two rounds, then the rule's reply. Text sent beside tool results does not open
// a new user turn.
func TestMessagesToolRounds(t *testing.T) {
	e, _, base := startServer(t, Config{KeepRequests: true, ToolRules: []ToolRule{{FirstOffered: true, Rounds: 2, Reply: "All done.",
		Calls: []ScriptedCall{{Name: "exec_command", Arguments: `{"cmd":"ls"}`}, {Name: "Bash", Arguments: `{"command":"ls","description":"list"}`}}}}})
	tools := `[{"name":"Read","description":"read","input_schema":{"type":"object"}},{"name":"Bash","description":"run","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}]`
	msgs := []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "<system-reminder>context</system-reminder>"}, map[string]any{"type": "text", "text": "list the files"}}}}
	var ids []string
	for round := range 3 {
		ms, _ := json.Marshal(msgs)
		resp, b := post(t, base+"/messages", `{"model":"m","max_tokens":1000,"tools":`+tools+`,"messages":`+string(ms)+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("round %d: %d %s", round, resp.StatusCode, b)
		}
		m := decodeMap(t, b)
		if round == 2 {
			if path(m, "stop_reason") != "end_turn" || path(m, "content", 0, "text") != "All done." {
				t.Fatalf("after two rounds: %s", b)
			}
			break
		}
		use := path(m, "content", 0)
		id, _ := path(use, "id").(string)
		if path(m, "stop_reason") != "tool_use" || path(use, "type") != "tool_use" || path(use, "name") != "Bash" ||
			path(use, "input", "command") != "ls" || !strings.HasPrefix(id, "toolu_") {
			t.Fatalf("round %d: %s", round, b)
		}
		ids = append(ids, id)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": path(m, "content")},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": id, "content": []any{map[string]any{"type": "text", "text": "a.txt"}}, "is_error": false},
				map[string]any{"type": "text", "text": "<system-reminder>still here</system-reminder>"}}})
	}
	if ids[0] == ids[1] {
		t.Fatalf("both rounds used %s", ids[0])
	}
	log := e.Log()
	last := log[2].Messages
	if len(last) != 5 || last[0].Content != "<system-reminder>context</system-reminder>\nlist the files" ||
		last[1].ToolCalls[0].ID != ids[0] || last[1].ToolCalls[0].Function.Arguments != `{"command":"ls","description":"list"}` ||
		last[2].Role != "tool" || last[2].ToolCallID != ids[0] || last[2].Content != "a.txt\n<system-reminder>still here</system-reminder>" ||
		last[4].ToolCallID != ids[1] {
		t.Fatalf("the engine saw %+v", last)
	}
	if log[1].CachedTokens == 0 {
		t.Error("the second round's prompt did not extend the first's")
	}

	// Anthropic's pairing rules: a tool_result answers the message before, and every
	// tool_use is answered by the next message.
	use := `{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]}`
	for _, c := range []struct{ msgs, want string }{
		{`[{"role":"user","content":"hi"},` + use + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"x"}]}]`, "unexpected `tool_use_id`"},
		{`[{"role":"user","content":"hi"},` + use + `,{"role":"user","content":"and?"}]`, "without `tool_result`"},
		{`[{"role":"user","content":"hi"},` + use + `]`, "without `tool_result`"},
		{`[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}]`, "unexpected `tool_use_id`"},
	} {
		resp, b := post(t, base+"/messages", `{"model":"m","max_tokens":10,"messages":`+c.msgs+`}`)
		if m := decodeMap(t, b); resp.StatusCode != 400 || path(m, "error", "type") != "invalid_request_error" || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s", c.msgs, resp.StatusCode, b)
		}
	}
	// Claude Code's system messages between turns, and thinking blocks, are accepted.
	resp, b := post(t, base+"/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"system","content":"agents"},`+
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"redacted_thinking","data":"x"},{"type":"text","text":"Hello."}]},{"role":"user","content":"bye"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got := e.Log()[len(e.Log())-1].Messages; len(got) != 4 || got[1].Role != "system" || got[2].Content != "Hello." {
		t.Fatalf("the engine saw %+v", got)
	}
}

// TestMessagesToolChoice: Anthropic's tool_choice types map to the engine's.
func TestMessagesToolChoice(t *testing.T) {
	_, _, base := startServer(t, Config{})
	tools := `[{"name":"f","input_schema":{"type":"object"}},{"name":"g","input_schema":{"type":"object"}}]`
	for choice, want := range map[string]string{`{"type":"tool","name":"g"}`: "g", `{"type":"any"}`: "f", `{"type":"none"}`: "", `{"type":"auto","disable_parallel_tool_use":true}`: ""} {
		resp, b := post(t, base+"/messages", `{"model":"m","max_tokens":10,"tools":`+tools+`,"tool_choice":`+choice+`,"messages":[{"role":"user","content":"hi"}]}`)
		m := decodeMap(t, b)
		got, _ := path(m, "content", 0, "name").(string)
		if resp.StatusCode != 200 || got != want {
			t.Errorf("tool_choice %s: %d %s", choice, resp.StatusCode, b)
		}
	}
}

// TestMessagesErrors: Anthropic's error shape for what the real API refuses, and for the
// engine's refusals.
func TestMessagesErrors(t *testing.T) {
	_, _, base := startServer(t, Config{Models: []string{"claude-test"}})
	resp, b := post(t, base+"/messages", `{"model":"claude-test","messages":[{"role":"user","content":"hi"}]}`)
	m := decodeMap(t, b)
	if resp.StatusCode != 400 || path(m, "type") != "error" || path(m, "error", "type") != "invalid_request_error" ||
		path(m, "error", "message") != "max_tokens: Field required" || resp.Header.Get("request-id") == "" || path(m, "request_id") == nil {
		t.Fatalf("no max_tokens: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, base+"/messages", `{"model":"claude-nope","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if m := decodeMap(t, b); resp.StatusCode != 404 || path(m, "error", "type") != "not_found_error" || path(m, "error", "message") != "model: claude-nope" {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, strings.TrimSuffix(base, "/v1")+"/replicas/3/v1/messages", `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if m := decodeMap(t, b); resp.StatusCode != 400 || path(m, "error", "type") != "invalid_request_error" {
		t.Fatalf("unknown replica: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, strings.TrimSuffix(base, "/v1")+"/replicas/0/v1/messages", `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("x-fake-replica") != "0" {
		t.Fatalf("pinned: %d %s", resp.StatusCode, b)
	}
}

// TestMessagesOverloaded: the engine's full queue is Anthropic's 529 overloaded_error.
func TestMessagesOverloaded(t *testing.T) {
	c, e, base := virtualServer(t, Config{Slots: 1, MaxWaiting: 1, DecodePerToken: time.Second})
	// In process, one request runs and one waits: the queue is full.
	e.Submit(userReq("a", 5), func(*Result) {})
	e.Submit(userReq("b", 5), func(*Result) {})
	resp, b := post(t, base+"/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if m := decodeMap(t, b); resp.StatusCode != 529 || path(m, "error", "type") != "overloaded_error" || resp.Header.Get("request-id") == "" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	c.Run(0)
	if r := e.Log()[2]; r.Status != 503 || r.Wire != WireMessages {
		t.Fatalf("record %+v", r)
	}
}

// TestMessagesAnthropicProvider: under ProviderAnthropic the Messages API carries the
// model's input- and output-token buckets as they are on the other wires.
func TestMessagesAnthropicProvider(t *testing.T) {
	_, _, base := startServer(t, Config{Limits: Limits{Provider: ProviderAnthropic, RPM: 50, ITPM: 30000, OTPM: 8000}})
	resp, b := post(t, base+"/messages", `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for _, h := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		for _, f := range []string{"limit", "remaining", "reset"} {
			if resp.Header.Get("anthropic-ratelimit-"+h+"-"+f) == "" {
				t.Errorf("no anthropic-ratelimit-%s-%s: %v", h, f, resp.Header)
			}
		}
	}
	if tel := scheduler.ParseTelemetry(resp.Header, time.Now()); tel.InputTokens.Limit != 30000 || tel.OutputTokens.Limit != 8000 {
		t.Fatalf("telemetry %+v", tel)
	}
}

// TestMessagesCountTokens: the prompt tokens a messages call would have, not rate
// limited and not in the log.
func TestMessagesCountTokens(t *testing.T) {
	e, _, base := startServer(t, Config{Models: []string{"claude-test"}, Limits: Limits{RPM: 1}})
	req := `{"model":"claude-test","system":"Be brief.","tools":[{"name":"f","description":"does f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"Say hello"}]}`
	resp, b := post(t, base+"/messages/count_tokens?beta=true", req)
	var count AnthropicTokenCount
	if resp.StatusCode != 200 || json.Unmarshal(b, &count) != nil || count.InputTokens == 0 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b = post(t, base+"/messages", strings.Replace(req, `{"model":"claude-test",`, `{"model":"claude-test","max_tokens":3,`, 1))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if r := e.Log()[0]; len(e.Log()) != 1 || r.PromptTokens != count.InputTokens {
		t.Fatalf("counted %d, the call had %d (%d records)", count.InputTokens, r.PromptTokens, len(e.Log()))
	}
	// The one request a minute is spent; counting still works.
	resp, b = post(t, base+"/messages/count_tokens", req)
	if resp.StatusCode != 200 || len(e.Log()) != 1 {
		t.Fatalf("count after the limit: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, base+"/messages/count_tokens", `{"model":"other","messages":[{"role":"user","content":"x"}]}`)
	if m := decodeMap(t, b); resp.StatusCode != 404 || path(m, "error", "type") != "not_found_error" {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, b)
	}
}

// TestModelsPerWire: GET /v1/models in Anthropic's shape for a client that sends
// anthropic-version, OpenAI's otherwise; one model by id either way.
func TestModelsPerWire(t *testing.T) {
	_, s, base := startServer(t, Config{Models: []string{"claude-a", "claude-b"}})
	get := func(url string, header ...string) (*http.Response, map[string]any) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return resp, m
	}
	av := []string{"anthropic-version", "2023-06-01", "x-api-key", "sk-ant"}
	for _, u := range []string{base + "/models?beta=true&limit=20", s.ReplicaURL(0) + "/models"} {
		resp, m := get(u, av...)
		created, _ := path(m, "data", 0, "created_at").(string)
		if _, err := time.Parse(time.RFC3339, created); err != nil || resp.StatusCode != 200 || path(m, "data", 0, "type") != "model" ||
			path(m, "data", 1, "id") != "claude-b" || path(m, "data", 0, "display_name") == nil || path(m, "has_more") != false ||
			path(m, "first_id") != "claude-a" || path(m, "last_id") != "claude-b" || path(m, "object") != nil {
			t.Fatalf("%s: %d %v", u, resp.StatusCode, m)
		}
	}
	if _, m := get(base + "/models"); path(m, "object") != "list" || path(m, "data", 0, "object") != "model" {
		t.Fatalf("OpenAI listing %v", m)
	}
	if resp, m := get(base+"/models/claude-b", av...); resp.StatusCode != 200 || path(m, "type") != "model" || path(m, "id") != "claude-b" {
		t.Fatalf("one model: %d %v", resp.StatusCode, m)
	}
	if resp, m := get(base+"/models/gpt-9", av...); resp.StatusCode != 404 || path(m, "error", "type") != "not_found_error" {
		t.Fatalf("unknown model: %d %v", resp.StatusCode, m)
	}
	if resp, m := get(base + "/models/claude-a"); resp.StatusCode != 200 || path(m, "object") != "model" {
		t.Fatalf("OpenAI model: %d %v", resp.StatusCode, m)
	}
	if resp, m := get(base + "/models/gpt-9"); resp.StatusCode != 404 || path(m, "error", "code") != "model_not_found" {
		t.Fatalf("OpenAI unknown model: %d %v", resp.StatusCode, m)
	}
}
