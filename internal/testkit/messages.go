package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
)

// The Anthropic Messages API wire (POST /v1/messages), which Claude Code and the
// Anthropic SDKs speak: a request is translated into a ChatRequest, submitted to the
// engine like any chat completion (with Anthropic's rate-limit headers, see WithWire),
// and its result translated back into a message or Anthropic's stream of events.

// MessagesRequest is a POST /v1/messages (or /v1/messages/count_tokens) body. System is
// a string or text blocks; each message's content a string or blocks (text, tool_use,
// tool_result; image, document, thinking and the rest are accepted and ignored). Tools
// with a type other than "custom" are Anthropic's server tools, accepted and ignored.
// Fields the engine does not model are ignored.
type MessagesRequest struct {
	Model         string               `json:"model"`
	MaxTokens     *int                 `json:"max_tokens"`
	System        AnthropicContent     `json:"system,omitempty"`
	Messages      []AnthropicMessage   `json:"messages"`
	Tools         []AnthropicTool      `json:"tools,omitempty"`
	ToolChoice    *AnthropicToolChoice `json:"tool_choice,omitempty"`
	Stream        bool                 `json:"stream,omitempty"`
	Temperature   *float64             `json:"temperature,omitempty"`
	TopP          *float64             `json:"top_p,omitempty"`
	StopSequences []string             `json:"stop_sequences,omitempty"`
	Metadata      *struct {
		UserID string `json:"user_id,omitempty"`
	} `json:"metadata,omitempty"`
}

// AnthropicMessage is one messages[] entry: role user or assistant (or system, which
// Claude Code sends between turns).
type AnthropicMessage struct {
	Role    string           `json:"role"`
	Content AnthropicContent `json:"content"`
}

// AnthropicContent is a list of content blocks; on input a string is one text block.
type AnthropicContent []AnthropicBlock

// UnmarshalJSON reads a string, null, or an array of blocks. Blocks of types the engine
// does not read keep only their type, whatever their other members; a tool result's
// content keeps only its text blocks.
func (c *AnthropicContent) UnmarshalJSON(b []byte) error {
	out, err := readBlocks(b, true)
	*c = out
	return err
}

// readBlocks reads content: a string, null or an array of blocks; nested is whether a
// tool_use or tool_result block may be among them (not inside a tool result).
func readBlocks(b []byte, nested bool) (AnthropicContent, error) {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil, nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		return AnthropicContent{{Type: "text", Text: s}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return nil, fmt.Errorf("content: want a string or an array of content blocks")
	}
	out := make(AnthropicContent, 0, len(raws))
	for i, raw := range raws {
		var blk AnthropicBlock
		var head struct {
			Type      string          `json:"type"`
			Text      string          `json:"text"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
			IsError   bool            `json:"is_error"`
		}
		if err := json.Unmarshal(raw, &struct {
			Type *string `json:"type"`
		}{&head.Type}); err != nil {
			return nil, fmt.Errorf("content block %d: want an object with a type", i)
		}
		blk.Type = head.Type
		switch {
		case head.Type == "text", nested && (head.Type == "tool_use" || head.Type == "tool_result"):
			if err := json.Unmarshal(raw, &head); err != nil {
				return nil, fmt.Errorf("content block %d (%s): %v", i, head.Type, err)
			}
			blk = AnthropicBlock{Type: head.Type, Text: head.Text, ID: head.ID, Name: head.Name, Input: head.Input,
				ToolUseID: head.ToolUseID, IsError: head.IsError}
			if len(head.Content) > 0 {
				inner, err := readBlocks(head.Content, false)
				if err != nil {
					return nil, fmt.Errorf("content block %d (%s): %v", i, head.Type, err)
				}
				blk.Content = inner
			}
		}
		out = append(out, blk)
	}
	return out, nil
}

// text is the content's text blocks joined by newlines.
func (c AnthropicContent) text() string {
	var texts []string
	for _, b := range c {
		if b.Type == "text" {
			texts = append(texts, b.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// AnthropicBlock is one content block: text (Text), tool_use (ID, Name, Input) or
// tool_result (ToolUseID, Content, IsError).
type AnthropicBlock struct {
	Type      string           `json:"type"`
	Text      string           `json:"text,omitempty"`
	ID        string           `json:"id,omitempty"`
	Name      string           `json:"name,omitempty"`
	Input     json.RawMessage  `json:"input,omitempty"`
	ToolUseID string           `json:"tool_use_id,omitempty"`
	Content   AnthropicContent `json:"content,omitempty"`
	IsError   bool             `json:"is_error,omitempty"`
}

// AnthropicTool is a tools[] entry: a custom tool (no type, or "custom") with its
// input_schema, or a server tool (web_search_20250305, bash_20250124, ...).
type AnthropicTool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// AnthropicToolChoice is tool_choice: auto, any, tool (with Name) or none.
type AnthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// MessagesResponse is a message: the non-streamed answer, and what message_start
// carries (with empty content).
type MessagesResponse struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"` // "message"
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []AnthropicBlock `json:"content"`
	StopReason   *string          `json:"stop_reason"` // end_turn, tool_use or max_tokens
	StopSequence *string          `json:"stop_sequence"`
	Usage        AnthropicUsage   `json:"usage"`
}

// AnthropicUsage is a message's token accounting, in Anthropic's terms: InputTokens
// are the prompt tokens not read from the cache, CacheReadInputTokens those that were
// (their sum is the Record's PromptTokens); nothing is written to a cache explicitly.
type AnthropicUsage struct {
	InputTokens              int    `json:"input_tokens"`
	CacheCreationInputTokens int    `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int    `json:"cache_read_input_tokens"`
	OutputTokens             int    `json:"output_tokens"`
	ServiceTier              string `json:"service_tier,omitempty"`
}

func anthropicUsage(rec Record, output int) AnthropicUsage {
	return AnthropicUsage{InputTokens: rec.PromptTokens - rec.CachedTokens, CacheReadInputTokens: rec.CachedTokens,
		OutputTokens: output, ServiceTier: "standard"}
}

// AnthropicTokenCount is the POST /v1/messages/count_tokens answer.
type AnthropicTokenCount struct {
	InputTokens int `json:"input_tokens"`
}

// AnthropicErrorResponse is Anthropic's error body.
type AnthropicErrorResponse struct {
	Type      string         `json:"type"` // "error"
	Error     AnthropicError `json:"error"`
	RequestID string         `json:"request_id,omitempty"`
}

// AnthropicError is the error member: Type is invalid_request_error, not_found_error,
// request_too_large, rate_limit_error, overloaded_error or api_error.
type AnthropicError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// AnthropicModel is one GET /v1/models entry for an Anthropic client.
type AnthropicModel struct {
	Type        string `json:"type"` // "model"
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

// AnthropicModelList is the GET /v1/models body for an Anthropic client.
type AnthropicModelList struct {
	Data    []AnthropicModel `json:"data"`
	HasMore bool             `json:"has_more"`
	FirstID string           `json:"first_id"`
	LastID  string           `json:"last_id"`
}

func anthropicModel(id string) AnthropicModel {
	return AnthropicModel{Type: "model", ID: id, DisplayName: id, CreatedAt: "2023-11-14T22:13:20Z"}
}

// writeAnthropicError writes an error in Anthropic's shape, with its request-id.
func writeAnthropicError(w http.ResponseWriter, status int, typ, msg, requestID string) {
	if requestID != "" {
		w.Header().Set("request-id", requestID)
	}
	writeJSON(w, status, AnthropicErrorResponse{Type: "error", Error: AnthropicError{Type: typ, Message: msg}, RequestID: requestID})
}

// anthropicBad is a 400 in Anthropic's words.
type anthropicBad struct{ msg string }

func badf(format string, args ...any) *anthropicBad {
	return &anthropicBad{msg: fmt.Sprintf(format, args...)}
}

// chatRequest translates the request into the engine's: the system prompt as a system
// message; an assistant message's text as its content and its tool_use blocks as tool
// calls (the input as JSON arguments); a user message's tool_result blocks as tool
// messages, each answering a tool_use of the message before. Text sent beside tool
// results (Claude Code's reminders) joins the last tool message rather than opening a
// user turn: the user message a ToolRule matches stays the one that started the turn.
func (req *MessagesRequest) chatRequest() (*ChatRequest, *anthropicBad) {
	c := &ChatRequest{Model: req.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature,
		TopP: req.TopP, Stream: req.Stream, maxIsCap: true}
	if req.Metadata != nil {
		c.User = req.Metadata.UserID
	}
	if sys := req.System.text(); sys != "" {
		c.Messages = append(c.Messages, Message{Role: "system", Content: Content(sys)})
	}
	if len(req.Messages) == 0 {
		return nil, badf("messages: at least one message is required")
	}
	var pending []string // tool_use ids the next message must answer
	pendingAt := -1
	for i, m := range req.Messages {
		if len(pending) > 0 && m.Role != "user" {
			return nil, unanswered(pendingAt, pending)
		}
		switch m.Role {
		case "assistant":
			msg, bad := assistantMessage(m, i)
			if bad != nil {
				return nil, bad
			}
			c.Messages = append(c.Messages, msg)
			pending, pendingAt = nil, i
			for _, tc := range msg.ToolCalls {
				pending = append(pending, tc.ID)
			}
		case "user":
			msgs, left, bad := userMessages(m, i, pending)
			if bad != nil {
				return nil, bad
			}
			if len(left) > 0 {
				return nil, unanswered(pendingAt, left)
			}
			pending = nil
			c.Messages = append(c.Messages, msgs...)
		case "system":
			// Claude Code sends system messages between the turns.
			c.Messages = append(c.Messages, Message{Role: "system", Content: Content(m.Content.text())})
		default:
			return nil, badf("messages.%d.role: Input should be 'user', 'assistant' or 'system'", i)
		}
	}
	if len(pending) > 0 {
		return nil, unanswered(pendingAt, pending)
	}
	for i, t := range req.Tools {
		if t.Type != "" && t.Type != "custom" {
			continue // a server tool: the engine has none
		}
		if t.Name == "" {
			return nil, badf("tools.%d.custom.name: Field required", i)
		}
		c.Tools = append(c.Tools, Tool{Type: "function", Function: FunctionDef{Name: t.Name,
			Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
		case "any":
			c.ToolChoice = json.RawMessage(`"required"`)
		case "none":
			c.ToolChoice = json.RawMessage(`"none"`)
		case "tool":
			if tc.Name == "" {
				return nil, badf("tool_choice.tool.name: Field required")
			}
			c.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		default:
			return nil, badf("tool_choice: Input tag '%s' found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'", tc.Type)
		}
		if tc.DisableParallelToolUse {
			c.ParallelToolCalls = new(false)
		}
	}
	return c, nil
}

func unanswered(at int, ids []string) *anthropicBad {
	return badf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
		"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", at, strings.Join(ids, ", "))
}

// assistantMessage translates messages[i], an assistant message.
func assistantMessage(m AnthropicMessage, i int) (Message, *anthropicBad) {
	msg := Message{Role: "assistant", Content: Content(m.Content.text())}
	for k, b := range m.Content {
		if b.Type != "tool_use" {
			continue
		}
		switch {
		case b.ID == "":
			return msg, badf("messages.%d.content.%d.tool_use.id: Field required", i, k)
		case b.Name == "":
			return msg, badf("messages.%d.content.%d.tool_use.name: Field required", i, k)
		}
		args := "{}"
		var buf bytes.Buffer
		if len(b.Input) > 0 && json.Compact(&buf, b.Input) == nil {
			args = buf.String()
		}
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: b.ID, Type: "function", Function: FunctionCall{Name: b.Name, Arguments: args}})
	}
	return msg, nil
}

// userMessages translates messages[i], a user message: its tool results, or its text.
// It returns the ids of pending (the tool uses of the message before) left unanswered.
func userMessages(m AnthropicMessage, i int, pending []string) (out []Message, left []string, bad *anthropicBad) {
	left = slices.Clone(pending)
	for k, b := range m.Content {
		if b.Type != "tool_result" {
			continue
		}
		j := slices.Index(left, b.ToolUseID)
		if j < 0 {
			return nil, nil, badf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
				"Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, k, b.ToolUseID)
		}
		left = slices.Delete(left, j, j+1)
		out = append(out, Message{Role: "tool", ToolCallID: b.ToolUseID, Content: Content(b.Content.text())})
	}
	text := m.Content.text()
	if len(out) == 0 {
		return []Message{{Role: "user", Content: Content(text)}}, left, nil
	}
	if text != "" {
		last := &out[len(out)-1]
		last.Content = Content(strings.TrimPrefix(string(last.Content)+"\n"+text, "\n"))
	}
	return out, left, nil
}

// toolUseID is the Anthropic id of an engine tool call: toolu_ and its hex.
func toolUseID(id string) string { return "toolu_" + strings.TrimPrefix(id, "call_") }

// stopReason is Anthropic's name for the engine's finish reason.
func stopReason(finish string) string {
	switch finish {
	case "tool_calls":
		return "tool_use"
	case "length":
		return "max_tokens"
	}
	return "end_turn"
}

// toolInput is a tool call's arguments as an Anthropic input, which is always an
// object: arguments that are not one (a scripted call's "", say) become {}.
func toolInput(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, []byte(args))
	return buf.Bytes()
}

// messageResponse is the message the engine's answer becomes: a text block when it has
// text, then a tool_use block per call.
func messageResponse(model string, res *Result) *MessagesResponse {
	ch := res.Response.Choices[0]
	m := &MessagesResponse{ID: res.Record.ID, Type: "message", Role: "assistant", Model: model,
		Content: []AnthropicBlock{}, StopReason: strptr(stopReason(ch.FinishReason)),
		Usage: anthropicUsage(res.Record, res.Record.OutputTokens)}
	if ch.Message.Content != "" {
		m.Content = append(m.Content, AnthropicBlock{Type: "text", Text: string(ch.Message.Content)})
	}
	for _, tc := range ch.Message.ToolCalls {
		m.Content = append(m.Content, AnthropicBlock{Type: "tool_use", ID: toolUseID(tc.ID), Name: tc.Function.Name,
			Input: toolInput(tc.Function.Arguments)})
	}
	return m
}

// requestID is the request-id header of the engine's request seq.
func requestID(seq int64) string { return fmt.Sprintf("req_fake%08d", seq) }

// unloggedID numbers the request ids of Anthropic requests answered without the
// engine's log: refused before it, or counted.
var unloggedID atomic.Int64

func unlogged() string { return fmt.Sprintf("req_fakex%08d", unloggedID.Add(1)) }

// readMessages decodes and translates a Messages API body, writing the 400 (or 413)
// itself when it cannot; needMax refuses a body without max_tokens.
func readMessages(w http.ResponseWriter, r *http.Request, needMax bool) (*MessagesRequest, *ChatRequest, bool) {
	fail := func(status int, typ, msg string) (*MessagesRequest, *ChatRequest, bool) {
		writeAnthropicError(w, status, typ, msg, unlogged())
		return nil, nil, false
	}
	var req MessagesRequest
	if tooLarge, err := readBody(w, r, &req); tooLarge {
		return fail(http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
	} else if err != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", "There was an issue with the JSON body of your request: "+err.Error())
	}
	if needMax && req.MaxTokens == nil {
		return fail(http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
	}
	if req.Model == "" {
		return fail(http.StatusBadRequest, "invalid_request_error", "model: Field required")
	}
	chat, bad := req.chatRequest()
	if bad != nil {
		return fail(http.StatusBadRequest, "invalid_request_error", bad.msg)
	}
	return &req, chat, true
}

// messages serves POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	s.keepHeaders(r)
	req, chat, ok := readMessages(w, r, true)
	if !ok {
		return
	}
	opts, err := s.callOptions(r, chat, WireMessages)
	if err != nil {
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", err.Error(), "")
		return
	}
	if req.Stream {
		s.streamMessage(w, r, req, chat, opts)
		return
	}
	res, err := s.engine.Do(r.Context(), chat, opts...)
	if err != nil {
		return // the client went away
	}
	if res.Status != http.StatusOK {
		anthropicFailure(w, req.Model, res, requestID(res.Record.Seq))
		return
	}
	maps.Copy(w.Header(), res.Header)
	w.Header().Set("request-id", requestID(res.Record.Seq))
	writeJSON(w, http.StatusOK, messageResponse(req.Model, res))
}

// anthropicFailure writes an engine refusal in Anthropic's shape: 400
// invalid_request_error, 404 not_found_error, 429 rate_limit_error, and the engine's
// 503 (its queue is full) as Anthropic's 529 overloaded_error.
func anthropicFailure(w http.ResponseWriter, model string, res *Result, requestID string) {
	maps.Copy(w.Header(), res.Header)
	status, typ, msg := res.Status, "api_error", res.Error.Error.Message
	switch res.Status {
	case http.StatusBadRequest:
		typ = "invalid_request_error"
	case http.StatusNotFound:
		typ = "not_found_error"
		if c := res.Error.Error.Code; c != nil && *c == "model_not_found" {
			msg = "model: " + model
		}
	case http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case http.StatusServiceUnavailable:
		status, typ, msg = 529, "overloaded_error", "Overloaded"
	default:
		status = http.StatusInternalServerError
	}
	writeAnthropicError(w, status, typ, msg, requestID)
}

// streamMessage answers a streamed request with Anthropic's events: message_start
// (usage with the input tokens, output_tokens 1) and a ping when prefill ends, then
// per content block content_block_start, its deltas (text_delta, or one
// input_json_delta with the tool's whole input) and content_block_stop, then
// message_delta (stop_reason and the final usage) and message_stop.
func (s *Server) streamMessage(w http.ResponseWriter, r *http.Request, req *MessagesRequest, chat *ChatRequest, opts []CallOption) {
	ev := func(typ string, fields map[string]any) { writeEvent(w, typ, fields) }
	res := s.await(r, chat, opts, func(partial *Result) {
		partial.Header.Set("request-id", requestID(partial.Record.Seq))
		startSSE(w, partial.Header)
		start := MessagesResponse{ID: partial.Record.ID, Type: "message", Role: "assistant", Model: req.Model,
			Content: []AnthropicBlock{}, Usage: anthropicUsage(partial.Record, 1)}
		ev("message_start", map[string]any{"message": start})
		ev("ping", map[string]any{})
		flush(w)
	})
	switch {
	case res == nil:
		return
	case res.Status != http.StatusOK:
		anthropicFailure(w, req.Model, res, requestID(res.Record.Seq))
		return
	}
	m := messageResponse(req.Model, res)
	for i, b := range m.Content {
		switch b.Type {
		case "text":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			for _, piece := range splitKeepSpace(b.Text) {
				ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			ev("content_block_start", map[string]any{"index": i, "content_block": map[string]any{
				"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			ev("content_block_delta", map[string]any{"index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(b.Input)}})
		}
		ev("content_block_stop", map[string]any{"index": i})
	}
	ev("message_delta", map[string]any{"delta": map[string]any{"stop_reason": m.StopReason, "stop_sequence": nil}, "usage": m.Usage})
	ev("message_stop", map[string]any{})
	flush(w)
}

// countTokens serves POST /v1/messages/count_tokens: the prompt tokens the request
// would have, as the engine counts them. It is neither rate limited nor logged.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	_, chat, ok := readMessages(w, r, false)
	if !ok {
		return
	}
	if status, apiErr := s.engine.validate(chat, callOpts{replica: -1}); apiErr != nil {
		anthropicFailure(w, chat.Model, &Result{Status: status, Header: http.Header{}, Error: &ErrorResponse{Error: *apiErr}}, unlogged())
		return
	}
	writeJSON(w, http.StatusOK, AnthropicTokenCount{InputTokens: renderPrompt(chat, s.engine.cfg.BlockSize).tokens})
}
