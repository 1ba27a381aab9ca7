package testkit

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

func TestResponsesRoundTrip(t *testing.T) {
	e, _, base := startServer(t, Config{KeepRequests: true, Limits: Limits{RPM: 100, TPM: 10000}})
	// Fields the engine does not model, items it ignores and hosted tools are accepted.
	body := `{"model":"gpt-test","instructions":"Be brief.","input":[` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Say hello"},{"type":"input_image","image_url":"data:x"}]},` +
		`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"opaque"},{"type":"item_reference","id":"msg_0"}],` +
		`"max_output_tokens":6,"store":true,"parallel_tool_calls":false,"reasoning":{"effort":"low","summary":"auto"},` +
		`"text":{"verbosity":"low"},"include":["reasoning.encrypted_content"],"metadata":{"k":"v"},"prompt_cache_key":"abc",` +
		`"service_tier":"auto","truncation":"auto","safety_identifier":"u1","client_metadata":{"x":1},` +
		`"tools":[{"type":"web_search","external_web_access":true},{"type":"custom","name":"apply_patch","format":{"type":"grammar"}},{"type":"local_shell"}]}`
	resp, b := post(t, base+"/responses", body, "x-luft-caller", "alice", "x-luft-run-id", "run-9", "x-luft-class", "interactive")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	m := decodeMap(t, b)
	id, _ := path(m, "id").(string)
	if path(m, "object") != "response" || !strings.HasPrefix(id, "resp_") || path(m, "status") != "completed" ||
		path(m, "model") != "gpt-test" || path(m, "instructions") != "Be brief." || path(m, "parallel_tool_calls") != false ||
		path(m, "tool_choice") != "auto" || path(m, "metadata", "k") != "v" || path(m, "store") != true ||
		path(m, "error") != nil || path(m, "incomplete_details") != nil || path(m, "previous_response_id") != nil {
		t.Fatalf("response shape: %s", b)
	}
	if tools, _ := path(m, "tools").([]any); len(tools) != 3 {
		t.Fatalf("tools not echoed: %s", b)
	}
	if out, _ := path(m, "output").([]any); len(out) != 1 {
		t.Fatalf("output: %s", b)
	}
	item := path(m, "output", 0)
	text, _ := path(item, "content", 0, "text").(string)
	if path(item, "type") != "message" || path(item, "role") != "assistant" || path(item, "status") != "completed" ||
		!strings.HasPrefix(path(item, "id").(string), "msg_") || path(item, "content", 0, "type") != "output_text" ||
		path(item, "content", 0, "annotations") == nil || CountTokens(text) != 6 {
		t.Fatalf("message item: %s", b)
	}
	// <|system|> Be brie f. <|user|> Say hell o <|assistant|> = 9 tokens, as on chat.
	if path(m, "usage", "input_tokens") != 9.0 || path(m, "usage", "output_tokens") != 6.0 || path(m, "usage", "total_tokens") != 15.0 ||
		path(m, "usage", "input_tokens_details", "cached_tokens") != 0.0 || path(m, "usage", "output_tokens_details", "reasoning_tokens") != 0.0 {
		t.Fatalf("usage: %v", path(m, "usage"))
	}
	tel := scheduler.ParseTelemetry(resp.Header, time.Now())
	if tel.Requests.Limit != 100 || tel.Requests.Remaining != 99 || tel.Tokens.Remaining != 10000-15 {
		t.Fatalf("telemetry %+v", tel)
	}
	log := e.Log()
	if len(log) != 1 {
		t.Fatalf("log %+v", log)
	}
	r := log[0]
	if r.Wire != WireResponses || r.ID != id || r.Caller != "alice" || r.Run != "run-9" || r.Class != "interactive" ||
		r.MaxTokens != 6 || len(r.Tools) != 0 || len(r.Messages) != 2 || r.Messages[0].Role != "system" ||
		r.Messages[0].Content != "Be brief." || r.Messages[1].Content != "Say hello" {
		t.Fatalf("record %+v", r)
	}
	var typed ResponseObject
	if err := json.Unmarshal(b, &typed); err != nil || typed.Usage == nil || typed.Output[0].Content[0].Text != text {
		t.Fatalf("typed decode: %v %+v", err, typed)
	}
}

// TestResponsesStream: the first events go out when prefill ends, the rest when
// decoding ends, in the Responses API's order, numbered from 0, without [DONE]; the
// usage of response.completed is the log's.
func TestResponsesStream(t *testing.T) {
	c, e, base := virtualServer(t, Config{PrefillOverhead: time.Second, DecodePerToken: time.Second,
		ToolRules: []ToolRule{{Match: "look", Calls: []ScriptedCall{{Name: "a", Arguments: `{"x":1}`}, {Name: "b"}}}}})
	resp, first, rest := streamOnClock(t, c, base+"/responses", `{"model":"m","input":"tell me a story","max_output_tokens":5,"stream":true}`, 2)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	all := append(first, rest...)
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta+", "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if got := eventNames(all); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	var text strings.Builder
	for i, ev := range all {
		if ev.Data["sequence_number"] != float64(i) {
			t.Fatalf("event %d (%s) has sequence_number %v", i, ev.Event, ev.Data["sequence_number"])
		}
		if ev.Event == "response.output_text.delta" {
			text.WriteString(ev.Data["delta"].(string))
		}
	}
	created := first[0].Data["response"]
	if path(created, "status") != "in_progress" || path(created, "usage") != nil || path(created, "output") == nil {
		t.Fatalf("response.created: %v", created)
	}
	done := all[len(all)-1].Data["response"]
	r := e.Log()[0]
	if path(done, "status") != "completed" || path(done, "id") != r.ID || path(done, "output", 0, "content", 0, "text") != text.String() ||
		path(all[len(all)-4].Data, "text") != text.String() || CountTokens(text.String()) != 5 {
		t.Fatalf("text %q, final %v", text.String(), done)
	}
	if path(done, "usage", "input_tokens") != float64(r.PromptTokens) || path(done, "usage", "output_tokens") != float64(r.OutputTokens) ||
		path(done, "usage", "total_tokens") != float64(r.PromptTokens+r.OutputTokens) ||
		path(done, "usage", "input_tokens_details", "cached_tokens") != float64(r.CachedTokens) || !r.Stream || r.Wire != WireResponses {
		t.Fatalf("usage %v, record %+v", path(done, "usage"), r)
	}
	if r.FirstToken.Sub(r.Arrival) != time.Second || r.Finish.Sub(r.FirstToken) != 5*time.Second {
		t.Fatalf("record times %+v", r)
	}

	// Function calls: each an output item added with empty arguments, one arguments
	// delta, the arguments done and the item done.
	_, first, rest = streamOnClock(t, c, base+"/responses", `{"model":"m","input":"look around","stream":true,`+
		`"tools":[{"type":"function","name":"a"},{"type":"function","name":"b"}]}`, 2)
	all = append(first, rest...)
	want = []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	if got := eventNames(all); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v\nwant   %v", got, want)
	}
	added, args, doneArgs, itemDone := all[2].Data, all[3].Data, all[4].Data, all[5].Data
	if path(added, "item", "type") != "function_call" || path(added, "item", "arguments") != "" || path(added, "item", "name") != "a" ||
		path(added, "item", "status") != "in_progress" || path(args, "delta") != `{"x":1}` || path(doneArgs, "arguments") != `{"x":1}` ||
		path(args, "item_id") != path(added, "item", "id") || path(itemDone, "item", "status") != "completed" ||
		path(itemDone, "item", "call_id") != path(added, "item", "call_id") || path(all[9].Data, "item", "arguments") != "{}" ||
		path(all[6].Data, "output_index") != 1.0 {
		t.Fatalf("function call events: %v %v %v %v", added, args, doneArgs, itemDone)
	}
	if out := path(all[10].Data, "response", "output"); len(out.([]any)) != 2 || path(out, 0, "call_id") == path(out, 1, "call_id") {
		t.Fatalf("final output %v", out)
	}
}

// TestResponsesToolRounds: a rule's calls come back as function_call items; the client
// echoes them with its function_call_output, and after the rule's rounds the engine
// answers text. Offered and FirstOffered see the flat function tools.
func TestResponsesToolRounds(t *testing.T) {
	e, _, base := startServer(t, Config{KeepRequests: true, ToolRules: []ToolRule{
		{Match: "weather", Offered: true, Rounds: 2, Calls: []ScriptedCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}, Reply: "Cold."},
		{Match: "shell", FirstOffered: true, Calls: []ScriptedCall{{Name: "Bash", Arguments: `{"command":"ls"}`},
			{Name: "exec_command", Arguments: `{"cmd":"ls"}`}}, Reply: "Listed."},
	}})
	tools := `[{"type":"function","name":"get_weather","description":"Weather by city","strict":true,` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}},{"type":"web_search"}]`
	input := []any{map[string]any{"role": "user", "content": "weather in Oslo?"}}
	var ids []string
	for round := range 3 {
		in, _ := json.Marshal(input)
		resp, b := post(t, base+"/responses", `{"model":"m","store":false,"tools":`+tools+`,"input":`+string(in)+`}`)
		if resp.StatusCode != 200 {
			t.Fatalf("round %d: %d %s", round, resp.StatusCode, b)
		}
		m := decodeMap(t, b)
		out, _ := path(m, "output").([]any)
		if round == 2 {
			if len(out) != 1 || path(out, 0, "type") != "message" || path(out, 0, "content", 0, "text") != "Cold." {
				t.Fatalf("after two rounds: %s", b)
			}
			break
		}
		call := path(out, 0)
		callID, _ := path(call, "call_id").(string)
		itemID, _ := path(call, "id").(string)
		if len(out) != 1 || path(call, "type") != "function_call" || path(call, "name") != "get_weather" ||
			path(call, "arguments") != `{"city":"Oslo"}` || path(call, "status") != "completed" ||
			!strings.HasPrefix(callID, "call_") || !strings.HasPrefix(itemID, "fc_") {
			t.Fatalf("round %d: %s", round, b)
		}
		ids = append(ids, callID)
		input = append(input, call, map[string]any{"type": "function_call_output", "call_id": callID, "output": "-3C"})
	}
	if ids[0] == ids[1] {
		t.Fatalf("both rounds called %s", ids[0])
	}
	log := e.Log()
	last := log[2].Messages
	if len(last) != 5 || last[1].ToolCalls[0].ID != ids[0] || last[2].ToolCallID != ids[0] || last[2].Content != "-3C" || last[4].ToolCallID != ids[1] {
		t.Fatalf("the engine saw %+v", last)
	}
	if log[1].CachedTokens == 0 {
		t.Error("the second round's prompt did not extend the first's")
	}
	// Offered: without the tool the rule answers at once.
	resp, b := post(t, base+"/responses", `{"model":"m","input":"weather in Oslo?","tools":[{"type":"function","name":"other"}]}`)
	if resp.StatusCode != 200 || path(decodeMap(t, b), "output", 0, "content", 0, "text") != "Cold." {
		t.Fatalf("not offered: %s", b)
	}
	// FirstOffered: the first alternative the request offers.
	resp, b = post(t, base+"/responses", `{"model":"m","input":"run shell","tools":[{"type":"function","name":"exec_command"},{"type":"function","name":"Bash"}]}`)
	if m := decodeMap(t, b); resp.StatusCode != 200 || path(m, "output", 0, "name") != "Bash" || path(m, "output", 0, "arguments") != `{"command":"ls"}` {
		t.Fatalf("first offered: %s", b)
	}
	resp, b = post(t, base+"/responses", `{"model":"m","input":"run shell","tools":[{"type":"function","name":"exec_command"}]}`)
	if m := decodeMap(t, b); resp.StatusCode != 200 || path(m, "output", 0, "name") != "exec_command" || path(m, "output", 0, "arguments") != `{"cmd":"ls"}` {
		t.Fatalf("first offered: %s", b)
	}
}

// TestResponsesNamespaceTools: the function tools of a namespace tool (Codex's MCP
// servers) are offered under their names, and a call of one names its namespace.
func TestResponsesNamespaceTools(t *testing.T) {
	_, _, base := startServer(t, Config{ToolRules: []ToolRule{{Offered: true, Calls: []ScriptedCall{{Name: "lookup", Arguments: `{"key":"k"}`}}}}})
	body := `{"model":"m","input":"find k","tools":[{"type":"function","name":"exec_command"},` +
		`{"type":"namespace","name":"mcp__fake","description":"MCP","tools":[{"type":"function","name":"lookup","parameters":{"type":"object"}}]}]}`
	resp, b := post(t, base+"/responses", body)
	m := decodeMap(t, b)
	if resp.StatusCode != 200 || path(m, "output", 0, "name") != "lookup" || path(m, "output", 0, "namespace") != "mcp__fake" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// Echoed with its namespace beside the tool's output (parts, as Codex sends an MCP
	// result), it is answered: the rule's one round is done.
	call, _ := json.Marshal(path(m, "output", 0))
	callID := path(m, "output", 0, "call_id").(string)
	resp, b = post(t, base+"/responses", strings.Replace(body, `"input":"find k"`, `"input":[{"role":"user","content":"find k"},`+
		string(call)+`,{"type":"function_call_output","call_id":"`+callID+`","output":[{"type":"input_text","text":"value"}]}]`, 1))
	if m := decodeMap(t, b); resp.StatusCode != 200 || path(m, "output", 0, "type") != "message" {
		t.Fatalf("echoed call: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesPreviousResponseID: a stored response's conversation (its input and
// output) is prepended to the request naming it, without its instructions; an unknown
// id, or one stored with store false, is a 400 previous_response_not_found.
func TestResponsesPreviousResponseID(t *testing.T) {
	e, _, base := startServer(t, Config{KeepRequests: true, ToolRules: []ToolRule{
		{Match: "weather", Calls: []ScriptedCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}, Reply: "Cold."}}})
	tools := `[{"type":"function","name":"get_weather"}]`
	resp, b := post(t, base+"/responses", `{"model":"m","instructions":"Be brief.","input":"weather in Oslo?","tools":`+tools+`}`)
	m := decodeMap(t, b)
	id1, _ := path(m, "id").(string)
	callID, _ := path(m, "output", 0, "call_id").(string)
	if resp.StatusCode != 200 || callID == "" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// Streamed, the chained turn is stored too before its response.completed.
	resp, b = post(t, base+"/responses", `{"model":"m","stream":true,"instructions":"Be terse.","previous_response_id":"`+id1+
		`","tools":`+tools+`,"input":[{"type":"function_call_output","call_id":"`+callID+`","output":"-3C"}]}`)
	evs := readEvents(t, strings.NewReader(string(b)))
	done := evs[len(evs)-1].Data["response"]
	id2, _ := path(done, "id").(string)
	if resp.StatusCode != 200 || path(done, "output", 0, "content", 0, "text") != "Cold." || path(done, "previous_response_id") != id1 {
		t.Fatalf("chained: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, base+"/responses", `{"model":"m","previous_response_id":"`+id2+`","input":"thanks","store":false}`)
	if resp.StatusCode != 200 {
		t.Fatalf("third: %d %s", resp.StatusCode, b)
	}
	id3, _ := path(decodeMap(t, b), "id").(string)
	log := e.Log()
	second, third := log[1].Messages, log[2].Messages
	if len(second) != 4 || second[0].Content != "Be terse." || second[1].Content != "weather in Oslo?" ||
		second[2].ToolCalls[0].ID != callID || second[3].Role != "tool" {
		t.Fatalf("second turn saw %+v", second)
	}
	if len(third) != 5 || third[0].Role != "user" || third[3].Content != "Cold." || third[4].Content != "thanks" {
		t.Fatalf("third turn saw %+v", third)
	}
	for _, id := range []string{"resp_nope", id3} {
		resp, b = post(t, base+"/responses", `{"model":"m","previous_response_id":"`+id+`","input":"x"}`)
		m := decodeMap(t, b)
		if resp.StatusCode != http.StatusBadRequest || path(m, "error", "code") != "previous_response_not_found" ||
			path(m, "error", "type") != "invalid_request_error" || path(m, "error", "param") != "previous_response_id" ||
			!strings.Contains(path(m, "error", "message").(string), id) {
			t.Fatalf("%s: %d %s", id, resp.StatusCode, b)
		}
	}
}

func TestResponseStoreEvicts(t *testing.T) {
	st := newResponseStore(2)
	a := &storedResponse{msgs: []Message{{Role: "user", Content: "a"}}}
	b := &storedResponse{parent: a, msgs: []Message{{Role: "assistant", Content: "b"}}}
	st.put("a", a)
	st.put("b", b)
	if _, ok := st.get("a"); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	st.put("c", &storedResponse{})
	if _, ok := st.get("b"); ok {
		t.Fatal("b survived as the least recently used")
	}
	st.put("d", &storedResponse{})
	if _, ok := st.get("a"); ok {
		t.Fatal("a survived")
	}
	if got := b.conversation(); len(got) != 2 || got[0].Content != "a" || got[1].Content != "b" {
		t.Fatalf("an evicted parent's part is lost: %+v", got)
	}
}

// TestResponsesIncomplete: a reply cut at max_output_tokens is an incomplete response,
// streamed as response.incomplete.
func TestResponsesIncomplete(t *testing.T) {
	_, _, base := startServer(t, Config{ToolRules: []ToolRule{{Match: "story", Reply: "one two three four five"}}})
	resp, b := post(t, base+"/responses", `{"model":"m","input":"story","max_output_tokens":2}`)
	m := decodeMap(t, b)
	if resp.StatusCode != 200 || path(m, "status") != "incomplete" || path(m, "incomplete_details", "reason") != "max_output_tokens" ||
		path(m, "output", 0, "content", 0, "text") != "one two" || path(m, "output", 0, "status") != "incomplete" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	_, b = post(t, base+"/responses", `{"model":"m","input":"story","max_output_tokens":2,"stream":true}`)
	evs := readEvents(t, strings.NewReader(string(b)))
	if last := evs[len(evs)-1]; last.Event != "response.incomplete" || path(last.Data, "response", "status") != "incomplete" {
		t.Fatalf("last event %+v", last)
	}
}
