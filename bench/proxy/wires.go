package main

import (
	"encoding/json"
	"fmt"

	"github.com/luft-run/luft/internal/testkit"
)

// The wires an agent may speak: the same conversation as a chat completions request,
// a Responses API request (the system prompt as instructions, tool calls and results
// as function_call and function_call_output items, the whole input sent every turn, as
// Codex and the Agents SDK do), or an Anthropic Messages request (tool_use and
// tool_result blocks; max_tokens is required there, so it is sent, above every
// completion the engine draws).
const (
	wireChat      = "chat"
	wireResponses = "responses"
	wireMessages  = "messages"
)

// wires are the wires in the order the tables show them.
var wires = []string{wireChat, wireResponses, wireMessages}

// messagesMaxTokens is the max_tokens a Messages agent sends (the engine's completions
// are at most 600 tokens).
const messagesMaxTokens = 1024

// endpoint is the path of a wire's turns after the base URL.
func endpoint(wire string) string {
	switch wire {
	case wireResponses:
		return "/responses"
	case wireMessages:
		return "/messages"
	}
	return "/chat/completions"
}

// encode is the body of a turn of msgs with tools on wire.
func encode(wire string, msgs []testkit.Message, tools []testkit.Tool) ([]byte, error) {
	switch wire {
	case wireResponses:
		var instructions string
		var input []map[string]any
		for _, m := range msgs {
			switch {
			case m.Role == "system":
				instructions = string(m.Content)
			case m.Role == "tool":
				input = append(input, map[string]any{"type": "function_call_output", "call_id": m.ToolCallID, "output": string(m.Content)})
			case len(m.ToolCalls) > 0:
				if m.Content != "" {
					input = append(input, map[string]any{"role": "assistant", "content": string(m.Content)})
				}
				for _, tc := range m.ToolCalls {
					input = append(input, map[string]any{"type": "function_call", "call_id": tc.ID, "name": tc.Function.Name, "arguments": tc.Function.Arguments})
				}
			default:
				input = append(input, map[string]any{"role": m.Role, "content": string(m.Content)})
			}
		}
		var ts []map[string]any
		for _, t := range tools {
			ts = append(ts, map[string]any{"type": "function", "name": t.Function.Name, "description": t.Function.Description, "parameters": t.Function.Parameters})
		}
		return json.Marshal(map[string]any{"model": model, "instructions": instructions, "input": input, "tools": ts})
	case wireMessages:
		var system string
		var out []map[string]any
		add := func(role string, block map[string]any) {
			if n := len(out); n > 0 && out[n-1]["role"] == role {
				out[n-1]["content"] = append(out[n-1]["content"].([]map[string]any), block)
				return
			}
			out = append(out, map[string]any{"role": role, "content": []map[string]any{block}})
		}
		for _, m := range msgs {
			switch {
			case m.Role == "system":
				system = string(m.Content)
			case m.Role == "tool":
				add("user", map[string]any{"type": "tool_result", "tool_use_id": m.ToolCallID, "content": string(m.Content)})
			case m.Role == "assistant":
				if m.Content != "" {
					add("assistant", map[string]any{"type": "text", "text": string(m.Content)})
				}
				for _, tc := range m.ToolCalls {
					add("assistant", map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Function.Name, "input": json.RawMessage(orEmpty(tc.Function.Arguments))})
				}
			default:
				add("user", map[string]any{"type": "text", "text": string(m.Content)})
			}
		}
		var ts []map[string]any
		for _, t := range tools {
			ts = append(ts, map[string]any{"name": t.Function.Name, "description": t.Function.Description, "input_schema": t.Function.Parameters})
		}
		return json.Marshal(map[string]any{"model": model, "max_tokens": messagesMaxTokens, "system": system, "messages": out, "tools": ts})
	}
	return json.Marshal(testkit.ChatRequest{Model: model, Messages: msgs, Tools: tools})
}

func orEmpty(args string) string {
	if args == "" || !json.Valid([]byte(args)) {
		return "{}"
	}
	return args
}

// decode reads the assistant's message from a 200 answer on wire.
func decode(wire string, b []byte) (testkit.Message, error) {
	msg := testkit.Message{Role: "assistant"}
	switch wire {
	case wireResponses:
		var r struct {
			Output []struct {
				Type      string `json:"type"`
				CallID    string `json:"call_id"`
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
				Content   []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"output"`
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Output) == 0 {
			return msg, fmt.Errorf("unreadable Responses answer %.200q: %v", b, err)
		}
		for _, o := range r.Output {
			switch o.Type {
			case "function_call":
				tc := testkit.ToolCall{ID: o.CallID, Type: "function"}
				tc.Function.Name, tc.Function.Arguments = o.Name, o.Arguments
				msg.ToolCalls = append(msg.ToolCalls, tc)
			case "message":
				for _, c := range o.Content {
					msg.Content += testkit.Content(c.Text)
				}
			}
		}
		return msg, nil
	case wireMessages:
		var r struct {
			Content []struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Text  string          `json:"text"`
				Input json.RawMessage `json:"input"`
			} `json:"content"`
		}
		if err := json.Unmarshal(b, &r); err != nil || len(r.Content) == 0 {
			return msg, fmt.Errorf("unreadable Messages answer %.200q: %v", b, err)
		}
		for _, c := range r.Content {
			switch c.Type {
			case "tool_use":
				tc := testkit.ToolCall{ID: c.ID, Type: "function"}
				tc.Function.Name, tc.Function.Arguments = c.Name, string(c.Input)
				msg.ToolCalls = append(msg.ToolCalls, tc)
			case "text":
				msg.Content += testkit.Content(c.Text)
			}
		}
		return msg, nil
	}
	var cr testkit.ChatResponse
	if err := json.Unmarshal(b, &cr); err != nil || len(cr.Choices) == 0 {
		return msg, fmt.Errorf("unreadable answer %.200q: %v", b, err)
	}
	return cr.Choices[0].Message, nil
}
