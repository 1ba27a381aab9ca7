package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// chunked reads s in pieces of size bytes, as a network read would.
type chunked struct {
	s    string
	size int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := min(c.size, len(c.s), len(p))
	copy(p, c.s[:n])
	c.s = c.s[n:]
	return n, nil
}

// relayOf passes stream through wr's relay in reads of size bytes and returns what the
// client got before the turn's end was recorded, what was held back, and what was read.
func relayOf(t *testing.T, wr *wire, stream string, size int) (sent, held string, res relayed) {
	t.Helper()
	rec := httptest.NewRecorder()
	tu := &turn{wire: wr, w: rec, startErr: make(chan error, 1)}
	tu.startErr <- nil
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(&chunked{s: stream, size: size})}
	res = tu.relay(resp)
	if res.err != nil {
		t.Fatalf("reads of %d: %v", size, res.err)
	}
	return rec.Body.String(), string(tu.held), res
}

var sizes = []int{1, 3, 7, 64, 1 << 20}

func TestSSEParsing(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"He said \\\"hi\\\"\"}}],\"usage\":null}\r\n\r\n" +
		": a comment\n\n" +
		"event: message\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n" +
		"data: {\"choices\":[],\"usage\": {\"prompt_tokens\":12,\"completion_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n" +
		"data: not json\n\n"
	done := "data: [DONE]\n\n"
	for _, size := range sizes {
		sent, held, res := relayOf(t, chatWire, stream+done, size)
		if sent != stream || held != done {
			t.Errorf("reads of %d: sent %q, held %q", size, sent, held)
		}
		if len(res.ids) != 1 || res.ids[0] != "call_1" {
			t.Errorf("reads of %d: ids %v", size, res.ids)
		}
		u := res.usage(99)
		if u.Input != 12 || u.Output != 7 || u.Cached != 4 {
			t.Errorf("reads of %d: usage %+v", size, u)
		}
		// The text as escaped, `He said \"hi\"` (14), then the tool call's name f and
		// its arguments decoded, {} and {"a":1} (7).
		if want := 14 + 1 + 2 + 7; res.outBytes != want {
			t.Errorf("reads of %d: %d bytes of output, want %d", size, res.outBytes, want)
		}
	}
}

func TestResponsesStream(t *testing.T) {
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_a\",\"name\":\"shell\",\"arguments\":\"\"}}\n\n" +
		"event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{\\\"cmd\\\":1}\"}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hello\"}\n\n"
	done := "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"output\":[{\"type\":\"function_call\",\"call_id\":\"call_a\"}],\"usage\":{\"input_tokens\":30,\"output_tokens\":9,\"input_tokens_details\":{\"cached_tokens\":16}}}}\n\n"
	for _, size := range sizes {
		sent, held, res := relayOf(t, responsesWire, stream+done, size)
		if sent != stream || held != done {
			t.Errorf("reads of %d: sent %q, held %q", size, sent, held)
		}
		if strings.Join(res.ids, ",") != "resp_1,call_a" {
			t.Errorf("reads of %d: ids %v", size, res.ids)
		}
		if u := res.usage(99); u.Input != 30 || u.Output != 9 || u.Cached != 16 {
			t.Errorf("reads of %d: usage %+v", size, u)
		}
		if want := len(`{\"cmd\":1}`) + len("hello"); res.outBytes != want {
			t.Errorf("reads of %d: %d bytes of output, want %d", size, res.outBytes, want)
		}
	}
	// Without event: lines the closing data line is known by its type.
	bare := "data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n"
	end := "data: {\"type\": \"response.incomplete\",\"response\":{\"id\":\"resp_2\"}}\n\n"
	if sent, held, _ := relayOf(t, responsesWire, bare+end, 5); sent != bare || held != end {
		t.Errorf("bare stream: sent %q, held %q", sent, held)
	}
}

func TestMessagesStream(t *testing.T) {
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":20,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":5,\"output_tokens\":1}}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi \\\"there\\\"\"}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\":\\\"ls\\\"}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":42}}\n\n"
	done := "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, size := range sizes {
		sent, held, res := relayOf(t, messagesWire, stream+done, size)
		if sent != stream || held != done {
			t.Errorf("reads of %d: sent %q, held %q", size, sent, held)
		}
		if strings.Join(res.ids, ",") != "toolu_1" {
			t.Errorf("reads of %d: ids %v", size, res.ids)
		}
		if u := res.usage(99); u.Input != 125 || u.Output != 42 || u.Cached != 100 {
			t.Errorf("reads of %d: usage %+v", size, u)
		}
		if want := len(`Hi \"there\"`) + len(`{\"command\":\"ls\"}`); res.outBytes != want {
			t.Errorf("reads of %d: %d bytes of output, want %d", size, res.outBytes, want)
		}
	}
}

// A line longer than the relay keeps passes through whole, unread, and the next is
// read as usual.
func TestSSELineBound(t *testing.T) {
	huge := "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"lost\"}]}}]," + strings.Repeat("x", 2*maxLine) + "\n\n"
	next := "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"kept\"}]}}]}\n\n"
	sent, held, res := relayOf(t, chatWire, huge+next+"data: [DONE]\n\n", 4096)
	if sent != huge+next || held != "data: [DONE]\n\n" {
		t.Fatalf("sent %d bytes (want %d), held %q", len(sent), len(huge+next), held)
	}
	if len(res.ids) != 1 || res.ids[0] != "kept" {
		t.Fatalf("an overlong line was read or broke the next one: ids %v", res.ids)
	}
}

// What follows a closing event is held with it, and a stream cut inside a line still
// gives the client what came.
func TestStreamAfterEnd(t *testing.T) {
	s := "data: {\"choices\":[]}\n\ndata: [DONE]\n\ndata: {\"choices\":[]}\n\n"
	if sent, held, _ := relayOf(t, chatWire, s, 9); sent != "data: {\"choices\":[]}\n\n" || held != "data: [DONE]\n\ndata: {\"choices\":[]}\n\n" {
		t.Errorf("sent %q, held %q", sent, held)
	}
	cut := "data: {\"choices\":[]}\n\ndata: {\"cho"
	if sent, held, _ := relayOf(t, chatWire, cut, 4); sent != cut || held != "" {
		t.Errorf("cut stream: sent %q, held %q", sent, held)
	}
}

func TestEstimateAndEcho(t *testing.T) {
	req := chatRequest{Messages: []chatMessage{
		{Role: "user", Content: []byte(`"hello world, twenty chars"`)},
		{Role: "assistant", ToolCalls: []toolCallRef{{ID: "a"}, {ID: "b"}}},
		{Role: "tool", ToolCallID: "a", Content: []byte(`"x"`)},
		{Role: "tool", ToolCallID: "b", Content: []byte(`"y"`)},
	}}
	ids, cont := req.echoed()
	if strings.Join(ids, ",") != "b,a,b,a" || !cont {
		t.Fatalf("echoed %v, continuation %v", ids, cont)
	}
	if n := req.estimate(); n < 20 || n > 40 {
		t.Fatalf("estimate %d", n)
	}
	req.Messages = append(req.Messages, chatMessage{Role: "user", Content: []byte(`"next"`)})
	if _, cont := req.echoed(); cont {
		t.Fatal("a user message after tool results is not a continuation")
	}
}

func TestParseWires(t *testing.T) {
	r, err := responsesWire.parse([]byte(`{"model":"m","instructions":"be brief","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"max_output_tokens":50,"stream":true}`))
	if err != nil || r.model != "m" || !r.stream || r.maxOut != 50 || !r.cont || strings.Join(r.echoed, ",") != "c1,c1" || r.chained || r.estIn < 10 {
		t.Errorf("responses: %+v, %v", r, err)
	}
	r, err = responsesWire.parse([]byte(`{"model":"m","previous_response_id":"resp_9","input":[{"type":"function_call_output","call_id":"c2","output":"ok"}]}`))
	if err != nil || !r.chained || !r.cont || strings.Join(r.echoed, ",") != "resp_9,c2" {
		t.Errorf("chained responses: %+v, %v", r, err)
	}
	if r, err = responsesWire.parse([]byte(`{"model":"m","input":"just text"}`)); err != nil || r.cont || r.estIn < 4 {
		t.Errorf("text input: %+v, %v", r, err)
	}
	r, err = messagesWire.parse([]byte(`{"model":"claude","max_tokens":1024,"system":[{"type":"text","text":"sys"}],"messages":[{"role":"user","content":"run ls"},{"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt"}]}]}`))
	if err != nil || r.model != "claude" || r.maxOut != 1024 || !r.cont || strings.Join(r.echoed, ",") != "toolu_1,toolu_1" {
		t.Errorf("messages: %+v, %v", r, err)
	}
	if r, err = messagesWire.parse([]byte(`{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)); err != nil || r.cont {
		t.Errorf("messages, text blocks: %+v, %v", r, err)
	}
	for _, bad := range []struct {
		wr   *wire
		body string
	}{
		{responsesWire, `{"input":"x"}`},
		{responsesWire, `{"model":"m"}`},
		{responsesWire, `{"model":"m","input":42}`},
		{responsesWire, `{"model":"m","input":[1,2]}`},
		{responsesWire, `[]`},
		{messagesWire, `{"model":"m","messages":[]}`},
		{messagesWire, `{"model":"m","messages":[{"role":"user","content":[7]}]}`},
		{messagesWire, `{"model":"m","messages":{}}`},
		{chatWire, `{"model":"m"}`},
	} {
		if _, err := bad.wr.parse([]byte(bad.body)); err == nil {
			t.Errorf("%s accepted %s", bad.wr.name, bad.body)
		}
	}
}

// A stream that goes on past its closing event is not held without bound: past
// maxParsed what was held goes to the client and the rest passes through.
func TestStreamHeldBounded(t *testing.T) {
	line := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("x", 1000) + "\"}}]}\n\n"
	more := strings.Repeat(line, 2*maxParsed/len(line))
	sent, held, _ := relayOf(t, chatWire, "data: [DONE]\n\n"+more, 32<<10)
	if len(held) > maxParsed || len(sent)+len(held) != len("data: [DONE]\n\n"+more) {
		t.Fatalf("held %d bytes, sent %d of %d", len(held), len(sent), len("data: [DONE]\n\n"+more))
	}
}
