package proxy

import (
	"strings"
	"testing"
)

func TestSSEParsing(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"He said \\\"hi\\\"\"}}],\"usage\":null}\r\n\r\n" +
		": a comment\n\n" +
		"event: message\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n" +
		"data: {\"choices\":[],\"usage\": {\"prompt_tokens\":12,\"completion_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n" +
		"data: not json\n\n" +
		"data: [DONE]\n\n"
	for _, size := range []int{1, 3, 7, 64, len(stream)} {
		var (
			res   relayed
			lines sseLines
		)
		for i := 0; i < len(stream); i += size {
			lines.feed([]byte(stream[i:min(i+size, len(stream))]), &res)
		}
		lines.end(&res)
		if len(res.ids) != 1 || res.ids[0] != "call_1" {
			t.Errorf("reads of %d: ids %v", size, res.ids)
		}
		if res.use == nil || res.use.PromptTokens != 12 || res.use.CompletionTokens != 7 {
			t.Fatalf("reads of %d: usage %+v", size, res.use)
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

func TestSSELineBound(t *testing.T) {
	var (
		res   relayed
		lines sseLines
	)
	huge := "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"lost\"}]}}]," + strings.Repeat("x", 2*maxLine) + "\n\n"
	for i := 0; i < len(huge); i += 4096 {
		lines.feed([]byte(huge[i:min(i+4096, len(huge))]), &res)
	}
	lines.feed([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"kept\"}]}}]}\n\n"), &res)
	if len(res.ids) != 1 || res.ids[0] != "kept" || cap(lines.part) > 2*maxLine {
		t.Fatalf("an overlong line was kept or broke the next one: ids %v, buffer %d", res.ids, cap(lines.part))
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
