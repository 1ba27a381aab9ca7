package testkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// The wire types below follow the OpenAI chat-completions API closely enough for the
// official SDKs, go-openai and luft's own adapter; fields the engine does not model
// (logprobs, n > 1, audio) are omitted or refused.

// ChatRequest is a POST /v1/chat/completions body.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Tools               []Tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	N                   *int            `json:"n,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	ResponseFormat      *ResponseFormat `json:"response_format,omitempty"`
	User                string          `json:"user,omitempty"`
	// Priority is vLLM's extension (lower first); accepted and recorded, not honoured.
	Priority *int `json:"priority,omitempty"`

	// maxIsCap makes MaxTokens a cap on the generated length instead of the length
	// (the Messages wire's max_tokens, which every request must send).
	maxIsCap bool
}

// StreamOptions asks for a final usage chunk.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// ResponseFormat is text, json_object or json_schema.
type ResponseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is the json_schema member of a response_format.
type JSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Message is one chat message. Content is a string on the wire; an array of content
// parts is accepted on input (its text parts are concatenated) and an empty content is
// sent as null, as OpenAI does for an assistant message that only calls tools.
type Message struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Refusal    *string    `json:"refusal,omitempty"`
}

// Content is a message's text.
type Content string

// MarshalJSON writes the text, or null when it is empty.
func (c Content) MarshalJSON() ([]byte, error) {
	if c == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(c))
}

// UnmarshalJSON reads a string, null, or an array of content parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content(s)
		return nil
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var texts []string
		for _, p := range parts {
			if p.Type == "text" || p.Type == "input_text" {
				texts = append(texts, p.Text)
			}
		}
		*c = Content(strings.Join(texts, "\n"))
		return nil
	}
	return errors.New("content must be a string, null or an array of content parts")
}

// Tool is one tools[] entry.
type Tool struct {
	Type     string      `json:"type"`
	Function FunctionDef `json:"function"`
}

// FunctionDef declares a function tool.
type FunctionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is an assistant's call of a function tool. Index is set in stream deltas only.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
	// missingArguments is set when a request's call had no arguments member, which
	// OpenAI refuses in an assistant message's tool calls.
	missingArguments bool
}

// UnmarshalJSON reads a function call, noting a missing arguments member; arguments
// must be a string (a JSON object there is refused, as OpenAI does).
func (f *FunctionCall) UnmarshalJSON(b []byte) error {
	var raw struct {
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*f = FunctionCall{Name: raw.Name, missingArguments: raw.Arguments == nil}
	if raw.Arguments != nil {
		f.Arguments = *raw.Arguments
	}
	return nil
}

// ChatResponse is a non-streamed chat completion.
type ChatResponse struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint,omitempty"`
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`
}

// Choice is the single choice the engine returns.
type Choice struct {
	Index        int             `json:"index"`
	Message      Message         `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs"`
}

// Usage is the token accounting of one completion.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails reports the prompt tokens served from the prefix cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// ChatChunk is one streamed "chat.completion.chunk" event.
type ChatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage,omitempty"`
}

// ChunkChoice is a choice in a stream chunk.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is the increment a chunk carries.
type Delta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ErrorResponse is OpenAI's error body.
type ErrorResponse struct {
	Error APIError `json:"error"`
}

// APIError is the error member of an ErrorResponse. For a rate limit Type names the
// exhausted dimension ("requests" or "tokens") and Code is "rate_limit_exceeded", as
// OpenAI and Groq send them.
type APIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Model is one GET /v1/models entry.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the GET /v1/models body.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

func strptr(s string) *string { return &s }
