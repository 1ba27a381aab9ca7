package adapters

import (
	"encoding/json"
	"fmt"

	"github.com/luft-run/luft/adapters/tools"
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
	//lint:ignore SA1019 max_tokens is the field local servers and many OpenAI-compatible providers know; it is sent only where max_completion_tokens was refused
	n := max(creq.MaxCompletionTokens, creq.MaxTokens)
	//lint:ignore SA1019 cleared so that the request carries one output cap, chosen below
	creq.MaxCompletionTokens, creq.MaxTokens = 0, 0
	if n == 0 {
		return
	}
	if _, old := o.maxTokensOnly.Load(cp.endpoint); old {
		//lint:ignore SA1019 this endpoint refused max_completion_tokens: it knows only max_tokens
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

// conversation is the messages of a call's first request: its system prompt, the
// transcript of the session it continues, and its prompt.
func (o *OpenAI) conversation(req agent.Request, call Call) ([]openai.ChatCompletionMessage, error) {
	var msgs []openai.ChatCompletionMessage
	if req.System != "" {
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: req.System})
	}
	for _, m := range call.Transcript {
		if m.Role == openai.ChatMessageRoleSystem && req.System != "" {
			continue // this call's system prompt stands
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: m.Role, Content: m.Content})
	}
	if req.SessionID != "" && call.Transcript == nil {
		return nil, fmt.Errorf("openai backend %q: session_id %q is not a session of this run "+
			"(pass the session_id an earlier agent call of the run returned)", o.cfg.ID, req.SessionID)
	}
	return append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: req.Prompt}), nil
}

// buildRequest sets the call's request: its model, output cap and temperature, how it
// asks for the schema, and the tools it declares.
func (c *chatCall) buildRequest(toolset []tools.Tool) error {
	req := c.req
	// max_completion_tokens, not the deprecated max_tokens (which OpenAI's reasoning
	// models refuse); an endpoint that refuses it gets max_tokens (see outputCap).
	c.creq = openai.ChatCompletionRequest{Model: c.model, MaxCompletionTokens: req.MaxTokens}
	if req.Temperature != nil {
		c.creq.Temperature = float32(*req.Temperature)
		// go-openai drops temperature 0 (omitempty); the transport puts it back.
		c.zeroTemp = *req.Temperature == 0
	}
	if req.Schema != nil {
		raw, err := json.Marshal(req.Schema)
		if err != nil {
			return fmt.Errorf("openai backend %q: encoding schema: %w", c.o.cfg.ID, err)
		}
		c.schemaJSON = raw
		switch mode := c.o.cfg.StructuredOutput; {
		case mode == "instructions" || (mode == "" || mode == "auto") && c.o.schemaFormatGone(c.model):
			c.msgs = withSchemaInstructions(c.msgs, raw)
		default:
			c.creq.ResponseFormat = &openai.ChatCompletionResponseFormat{
				Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
					Name: "output", Strict: false, Schema: json.RawMessage(raw),
				},
			}
		}
	}
	c.byName, c.creq.Tools = toolDecls(toolset)
	return nil
}

// toolDecls is the tools of a call by name, and their declarations for the request.
func toolDecls(toolset []tools.Tool) (map[string]tools.Tool, []openai.Tool) {
	byName := map[string]tools.Tool{}
	var decls []openai.Tool
	for _, t := range toolset {
		sp := t.Spec()
		byName[sp.Name] = t
		params := sp.Parameters
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		decls = append(decls, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: sp.Name, Description: sp.Description, Parameters: params,
		}})
	}
	return byName, decls
}
