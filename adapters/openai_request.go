package adapters

import (
	"encoding/json"

	"github.com/luft-run/luft/agent"
	openai "github.com/sashabaranov/go-openai"
)

// withSchemaInstructions asks for structured output in the system message: the schema
// between <json-schema> tags and the instruction to answer with JSON only.
func withSchemaInstructions(msgs []openai.ChatCompletionMessage, schema []byte) []openai.ChatCompletionMessage {
	text := "When you give your final answer, reply with only a JSON value that matches the JSON Schema " +
		"between the tags, with no other text.\n<json-schema>\n" + string(schema) + "\n</json-schema>"
	out := append([]openai.ChatCompletionMessage(nil), msgs...)
	if len(out) > 0 && out[0].Role == openai.ChatMessageRoleSystem {
		out[0].Content += "\n\n" + text
		return out
	}
	return append([]openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleSystem, Content: text}}, out...)
}

func (o *OpenAI) schemaFormatGone(model string) bool {
	_, gone := o.noSchemaFormat.Load(model)
	return gone
}

// outputCap sets the request's output cap for the endpoint base serving model:
// max_completion_tokens, or max_tokens where that endpoint refused the newer field. It
// notes in cp where the request goes and which field it carries.
func (o *OpenAI) outputCap(cp *capture, creq *openai.ChatCompletionRequest, base string) {
	cp.endpoint = base + "\x00" + creq.Model
	n := max(creq.MaxCompletionTokens, creq.MaxTokens)
	creq.MaxCompletionTokens, creq.MaxTokens = 0, 0
	if n == 0 {
		return
	}
	if _, old := o.maxTokensOnly.Load(cp.endpoint); old {
		creq.MaxTokens = n
		return
	}
	creq.MaxCompletionTokens, cp.completionCap = n, true
}

// estimateMessages is a rough prompt size of a conversation and its tool declarations.
func estimateMessages(msgs []openai.ChatCompletionMessage, ts []openai.Tool) int {
	n := 0
	for _, m := range msgs {
		n += 4 + EstimateTokens(m.Content)
		for _, tc := range m.ToolCalls {
			n += EstimateTokens(tc.Function.Name) + EstimateTokens(tc.Function.Arguments)
		}
	}
	for _, t := range ts {
		if t.Function != nil {
			b, _ := json.Marshal(t.Function)
			n += EstimateTokens(string(b))
		}
	}
	return n
}

// transcriptOf is the conversation kept for session_id: its system, user and assistant
// text, with the final answer; tool calls and their results are left out.
func transcriptOf(msgs []openai.ChatCompletionMessage, answer string) []agent.Message {
	out := make([]agent.Message, 0, len(msgs)+1)
	for _, m := range msgs {
		switch {
		case m.Role == openai.ChatMessageRoleSystem, m.Role == openai.ChatMessageRoleUser,
			m.Role == openai.ChatMessageRoleAssistant && len(m.ToolCalls) == 0:
			out = append(out, agent.Message{Role: m.Role, Content: m.Content})
		}
	}
	return append(out, agent.Message{Role: openai.ChatMessageRoleAssistant, Content: answer})
}

// chatProbe is the smallest completion: one token.
func chatProbe(model string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: model, MaxCompletionTokens: 1,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "ping"}}}
}
