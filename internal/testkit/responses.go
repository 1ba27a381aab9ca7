package testkit

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// The Responses API wire (POST /v1/responses), which Codex CLI and OpenAI's Agents SDK
// speak: a request is translated into a ChatRequest, submitted to the engine like any
// chat completion, and its result translated back into a response object or the
// Responses API's stream of events.

// responsesKept bounds the stored conversations previous_response_id can name: the
// most recently used this many responses.
const responsesKept = 4096

// ResponsesRequest is a POST /v1/responses body. Input is a string (one user message)
// or an array of items: messages (role user, assistant, system or developer; content a
// string or input_text/output_text parts), function_call, function_call_output,
// custom_tool_call and custom_tool_call_output items; other items (reasoning,
// item_reference, web_search_call, ...) are accepted and ignored. Tools of type
// "function" are offered to the engine, and so are the function tools of a "namespace"
// tool (Codex groups MCP servers' tools that way), under their own names; other types
// (web_search, custom, local_shell, mcp, ...) are accepted and ignored. Fields the
// engine does not model are ignored.
type ResponsesRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input,omitempty"`
	Instructions       json.RawMessage   `json:"instructions,omitempty"`
	Tools              []json.RawMessage `json:"tools,omitempty"`
	ToolChoice         json.RawMessage   `json:"tool_choice,omitempty"`
	MaxOutputTokens    *int              `json:"max_output_tokens,omitempty"`
	Stream             bool              `json:"stream,omitempty"`
	PreviousResponseID string            `json:"previous_response_id,omitempty"`
	Store              *bool             `json:"store,omitempty"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls,omitempty"`
	Temperature        *float64          `json:"temperature,omitempty"`
	TopP               *float64          `json:"top_p,omitempty"`
	Text               json.RawMessage   `json:"text,omitempty"`
	Reasoning          json.RawMessage   `json:"reasoning,omitempty"`
	Metadata           json.RawMessage   `json:"metadata,omitempty"`
	User               string            `json:"user,omitempty"`
}

// ResponseObject is a response: the non-streamed answer, and what response.created,
// response.in_progress and response.completed carry. Request fields are echoed the way
// OpenAI echoes them, with its defaults when the request left them out.
type ResponseObject struct {
	ID                 string               `json:"id"`
	Object             string               `json:"object"` // "response"
	CreatedAt          int64                `json:"created_at"`
	Status             string               `json:"status"` // in_progress, completed or incomplete
	Background         bool                 `json:"background"`
	Error              *APIError            `json:"error"`
	IncompleteDetails  *IncompleteDetails   `json:"incomplete_details"`
	Instructions       json.RawMessage      `json:"instructions"`
	MaxOutputTokens    *int                 `json:"max_output_tokens"`
	Model              string               `json:"model"`
	Output             []ResponseOutputItem `json:"output"`
	ParallelToolCalls  bool                 `json:"parallel_tool_calls"`
	PreviousResponseID *string              `json:"previous_response_id"`
	Reasoning          json.RawMessage      `json:"reasoning"`
	ServiceTier        string               `json:"service_tier"`
	Store              bool                 `json:"store"`
	Temperature        float64              `json:"temperature"`
	Text               json.RawMessage      `json:"text"`
	ToolChoice         json.RawMessage      `json:"tool_choice"`
	Tools              []json.RawMessage    `json:"tools"`
	TopP               float64              `json:"top_p"`
	Truncation         string               `json:"truncation"`
	Usage              *ResponseUsage       `json:"usage"`
	User               *string              `json:"user"`
	Metadata           json.RawMessage      `json:"metadata"`
}

// IncompleteDetails says why a response is incomplete: "max_output_tokens".
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// ResponseOutputItem is one output item: a "message" (ID msg_…, Role assistant, one
// output_text part) or a "function_call" (ID fc_…, CallID call_…, Name, Arguments, and
// the Namespace of a tool offered in one).
type ResponseOutputItem struct {
	Type      string               `json:"type"`
	ID        string               `json:"id"`
	Status    string               `json:"status"`
	Role      string               `json:"role,omitempty"`
	Content   []ResponseOutputText `json:"content,omitempty"`
	CallID    string               `json:"call_id,omitempty"`
	Namespace string               `json:"namespace,omitempty"`
	Name      string               `json:"name,omitempty"`
	Arguments string               `json:"arguments,omitempty"`
}

// MarshalJSON writes the members of the item's type, empty ones too: a streamed
// message starts with content [] and a function call with arguments "", which clients
// append to.
func (it ResponseOutputItem) MarshalJSON() ([]byte, error) {
	if it.Type == "function_call" {
		return json.Marshal(struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			CallID    string `json:"call_id"`
			Namespace string `json:"namespace,omitempty"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Status    string `json:"status"`
		}{it.Type, it.ID, it.CallID, it.Namespace, it.Name, it.Arguments, it.Status})
	}
	content := it.Content
	if content == nil {
		content = []ResponseOutputText{}
	}
	return json.Marshal(struct {
		Type    string               `json:"type"`
		ID      string               `json:"id"`
		Status  string               `json:"status"`
		Role    string               `json:"role"`
		Content []ResponseOutputText `json:"content"`
	}{it.Type, it.ID, it.Status, it.Role, content})
}

// ResponseOutputText is a message's output_text part.
type ResponseOutputText struct {
	Type        string `json:"type"` // "output_text"
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

func outputText(text string) ResponseOutputText {
	return ResponseOutputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

// ResponseUsage is a response's token accounting. InputTokens counts the whole prompt,
// cached tokens included (InputTokensDetails.CachedTokens says how many).
type ResponseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func responseUsage(rec Record) *ResponseUsage {
	u := &ResponseUsage{InputTokens: rec.PromptTokens, OutputTokens: rec.OutputTokens,
		TotalTokens: rec.PromptTokens + rec.OutputTokens}
	u.InputTokensDetails.CachedTokens = rec.CachedTokens
	return u
}

// responsesError is a 400 in the Responses API's words.
func responsesError(param, code, format string, args ...any) *APIError {
	e := &APIError{Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = strptr(param)
	}
	if code != "" {
		e.Code = strptr(code)
	}
	return e
}

// partsText is the text of a string or of an array of content parts: input_text,
// output_text and text parts, and a refusal's words; images, files and audio are
// ignored. Parts are joined by newlines.
func partsText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or an array of content parts")
	}
	var texts []string
	for i, p := range parts {
		var part struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return "", fmt.Errorf("part %d: want an object with a type", i)
		}
		var body struct {
			Text    string `json:"text"`
			Refusal string `json:"refusal"`
		}
		switch part.Type {
		case "input_text", "output_text", "text", "refusal":
			if err := json.Unmarshal(p, &body); err != nil {
				return "", fmt.Errorf("part %d (%s): %v", i, part.Type, err)
			}
			texts = append(texts, body.Text+body.Refusal)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// responsesItem holds the members of the input items the engine reads.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Input     *string         `json:"input"`
	Output    json.RawMessage `json:"output"`
}

// chatRequest translates the request into the engine's: instructions as a system
// message, then prior (the stored conversation previous_response_id names), then the
// input items. It returns where the request's own input starts in the messages.
func (req *ResponsesRequest) chatRequest(prior []Message) (*ChatRequest, int, *APIError) {
	c := &ChatRequest{Model: req.Model, MaxTokens: req.MaxOutputTokens, Temperature: req.Temperature,
		TopP: req.TopP, ParallelToolCalls: req.ParallelToolCalls, Stream: req.Stream, User: req.User}
	instr, err := partsText(req.Instructions)
	if err != nil {
		return nil, 0, responsesError("instructions", "invalid_type", "Invalid type for 'instructions': %v.", err)
	}
	if instr != "" {
		c.Messages = append(c.Messages, Message{Role: "system", Content: Content(instr)})
	}
	c.Messages = append(c.Messages, prior...)
	start := len(c.Messages)
	if apiErr := c.addInput(req.Input, start); apiErr != nil {
		return nil, 0, apiErr
	}
	if len(c.Messages) == 0 {
		return nil, 0, responsesError("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	for i, raw := range req.Tools {
		tools, _, apiErr := responsesTool(raw, fmt.Sprintf("tools[%d]", i))
		if apiErr != nil {
			return nil, 0, apiErr
		}
		c.Tools = append(c.Tools, tools...)
	}
	c.ToolChoice = responsesToolChoice(req.ToolChoice)
	rf, apiErr := responsesFormat(req.Text)
	if apiErr != nil {
		return nil, 0, apiErr
	}
	c.ResponseFormat = rf
	return c, start, nil
}

// addInput appends the input's items as chat messages; a function call joins the
// assistant message before it when that came from this input too (parallel calls, or
// text and calls in one turn).
func (c *ChatRequest) addInput(raw json.RawMessage, start int) *APIError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return responsesError("input", "invalid_type", "Invalid 'input': %v.", err)
		}
		c.Messages = append(c.Messages, Message{Role: "user", Content: Content(s)})
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return responsesError("input", "invalid_type", "Invalid type for 'input': expected a string or an array of input items.")
	}
	for i, rawItem := range items {
		var it responsesItem
		if err := json.Unmarshal(rawItem, &it); err != nil {
			var head struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(rawItem, &head) == nil && !knownItem(head.Type) {
				continue // an item the engine ignores, whatever its members
			}
			return responsesError(fmt.Sprintf("input[%d]", i), "invalid_type", "Invalid 'input[%d]': %v.", i, err)
		}
		if apiErr := c.addItem(&it, i, start); apiErr != nil {
			return apiErr
		}
	}
	return nil
}

// knownItem reports whether the engine reads items of this type.
func knownItem(typ string) bool {
	switch typ {
	case "", "message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output":
		return true
	}
	return false
}

func (c *ChatRequest) addItem(it *responsesItem, i, start int) *APIError {
	param := func(m string) string { return fmt.Sprintf("input[%d].%s", i, m) }
	missing := func(m string) *APIError {
		return responsesError(param(m), "missing_required_parameter", "Missing required parameter: '%s'.", param(m))
	}
	switch it.Type {
	case "", "message":
		switch it.Role {
		case "user", "assistant", "system", "developer":
		case "":
			return missing("role")
		default:
			return responsesError(param("role"), "invalid_value",
				"Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", it.Role)
		}
		text, err := partsText(it.Content)
		if err != nil {
			return responsesError(param("content"), "invalid_type", "Invalid 'input[%d].content': %v.", i, err)
		}
		c.Messages = append(c.Messages, Message{Role: it.Role, Content: Content(text)})
	case "function_call", "custom_tool_call":
		args := it.Arguments
		if it.Type == "custom_tool_call" {
			args = it.Input
		}
		switch {
		case it.CallID == "":
			return missing("call_id")
		case it.Name == "":
			return missing("name")
		case args == nil && it.Type == "function_call":
			return missing("arguments")
		case args == nil:
			return missing("input")
		}
		call := ToolCall{ID: it.CallID, Type: "function", Function: FunctionCall{Name: it.Name, Arguments: *args}}
		if n := len(c.Messages); n > start && c.Messages[n-1].Role == "assistant" {
			c.Messages[n-1].ToolCalls = append(c.Messages[n-1].ToolCalls, call)
			return nil
		}
		c.Messages = append(c.Messages, Message{Role: "assistant", ToolCalls: []ToolCall{call}})
	case "function_call_output", "custom_tool_call_output":
		if it.CallID == "" {
			return missing("call_id")
		}
		if !c.called(it.CallID) {
			return responsesError("input", "", "No tool call found for function call output with call_id %s.", it.CallID)
		}
		out, err := partsText(it.Output)
		if err != nil {
			return responsesError(param("output"), "invalid_type", "Invalid 'input[%d].output': %v.", i, err)
		}
		c.Messages = append(c.Messages, Message{Role: "tool", ToolCallID: it.CallID, Content: Content(out)})
	}
	return nil
}

// called reports whether an assistant message so far made the call id.
func (c *ChatRequest) called(id string) bool {
	for _, m := range c.Messages {
		for _, tc := range m.ToolCalls {
			if tc.ID == id {
				return true
			}
		}
	}
	return false
}

// responsesTool translates the tool at param: a function tool (flat: type, name,
// description, parameters, strict) into one chat tool, a namespace into its function
// tools (namespace names it); other types into none.
func responsesTool(raw json.RawMessage, param string) (tools []Tool, namespace string, apiErr *APIError) {
	var t struct {
		Type        string            `json:"type"`
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Parameters  json.RawMessage   `json:"parameters"`
		Strict      *bool             `json:"strict"`
		Tools       []json.RawMessage `json:"tools"`
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, "", responsesError(param, "invalid_type", "Invalid '%s': expected an object with a type.", param)
	}
	if head.Type != "function" && head.Type != "namespace" {
		return nil, "", nil
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, "", responsesError(param, "invalid_type", "Invalid '%s': %v.", param, err)
	}
	if t.Name == "" {
		return nil, "", responsesError(param+".name", "missing_required_parameter", "Missing required parameter: '%s.name'.", param)
	}
	if head.Type == "function" {
		return []Tool{{Type: "function", Function: FunctionDef{Name: t.Name, Description: t.Description,
			Parameters: t.Parameters, Strict: t.Strict}}}, "", nil
	}
	for i, inner := range t.Tools {
		if err := json.Unmarshal(inner, &head); err != nil || head.Type != "function" {
			continue // namespaces do not nest: only their function tools count
		}
		sub, _, apiErr := responsesTool(inner, fmt.Sprintf("%s.tools[%d]", param, i))
		if apiErr != nil {
			return nil, "", apiErr
		}
		tools = append(tools, sub...)
	}
	return tools, t.Name, nil
}

// namespaces maps the name of each function tool offered only in a namespace to the
// first namespace that offers it.
func (req *ResponsesRequest) namespaces() map[string]string {
	m := map[string]string{}
	top := map[string]bool{}
	for _, raw := range req.Tools {
		tools, ns, _ := responsesTool(raw, "")
		for _, t := range tools {
			switch name := t.Function.Name; {
			case ns == "":
				top[name] = true
			case m[name] == "":
				m[name] = ns
			}
		}
	}
	for name := range top {
		delete(m, name)
	}
	return m
}

// responsesToolChoice translates tool_choice: the strings as they are, a function by
// name into chat's nesting, allowed_tools into its mode; a hosted tool the engine does
// not have is left to the model (auto).
func responsesToolChoice(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return raw // a string (validated by the engine), or none
	}
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
		Mode string `json:"mode"`
	}
	_ = json.Unmarshal(raw, &obj)
	switch {
	case obj.Type == "function" && obj.Name != "":
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": obj.Name}})
		return b
	case obj.Type == "allowed_tools" && obj.Mode == "required":
		return json.RawMessage(`"required"`)
	}
	return nil
}

// responsesFormat translates text.format into a response_format.
func responsesFormat(raw json.RawMessage) (*ResponseFormat, *APIError) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var text struct {
		Format *struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		} `json:"format"`
	}
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, responsesError("text", "invalid_type", "Invalid 'text': %v.", err)
	}
	f := text.Format
	switch {
	case f == nil || f.Type == "text":
		return nil, nil
	case f.Type == "json_object":
		return &ResponseFormat{Type: "json_object"}, nil
	case f.Type == "json_schema":
		if f.Name == "" {
			return nil, responsesError("text.format.name", "missing_required_parameter", "Missing required parameter: 'text.format.name'.")
		}
		return &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: f.Name,
			Description: f.Description, Schema: f.Schema, Strict: f.Strict}}, nil
	}
	return nil, responsesError("text.format.type", "invalid_value",
		"Invalid value: '%s'. Supported values are: 'text', 'json_object', and 'json_schema'.", f.Type)
}

// object is the response to req: in progress (chat nil) or final, with the output
// items and usage of the engine's answer.
func (req *ResponsesRequest) object(rec Record, chat *ChatResponse) *ResponseObject {
	o := &ResponseObject{
		ID: rec.ID, Object: "response", CreatedAt: rec.Arrival.Unix(), Status: "in_progress",
		Instructions: orJSON(req.Instructions, "null"), MaxOutputTokens: req.MaxOutputTokens, Model: req.Model,
		Output: []ResponseOutputItem{}, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		Reasoning: orJSON(req.Reasoning, `{"effort":null,"summary":null}`), ServiceTier: "default",
		Store: req.Store == nil || *req.Store, Temperature: 1, TopP: 1,
		Text: orJSON(req.Text, `{"format":{"type":"text"}}`), ToolChoice: orJSON(req.ToolChoice, `"auto"`),
		Tools: req.Tools, Truncation: "disabled", Metadata: orJSON(req.Metadata, "{}"),
	}
	if o.Tools == nil {
		o.Tools = []json.RawMessage{}
	}
	if req.PreviousResponseID != "" {
		o.PreviousResponseID = strptr(req.PreviousResponseID)
	}
	if req.Temperature != nil {
		o.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		o.TopP = *req.TopP
	}
	if req.User != "" {
		o.User = strptr(req.User)
	}
	if chat == nil {
		return o
	}
	ch := chat.Choices[0]
	o.Status = "completed"
	itemStatus := "completed"
	if ch.FinishReason == "length" {
		o.Status, itemStatus = "incomplete", "incomplete"
		o.IncompleteDetails = &IncompleteDetails{Reason: "max_output_tokens"}
	}
	if ch.Message.Content != "" || len(ch.Message.ToolCalls) == 0 {
		o.Output = append(o.Output, ResponseOutputItem{Type: "message", ID: "msg_" + strings.TrimPrefix(rec.ID, "resp_"),
			Status: itemStatus, Role: "assistant", Content: []ResponseOutputText{outputText(string(ch.Message.Content))}})
	}
	ns := req.namespaces()
	for _, tc := range ch.Message.ToolCalls {
		o.Output = append(o.Output, ResponseOutputItem{Type: "function_call", ID: "fc_" + strings.TrimPrefix(tc.ID, "call_"),
			Status: "completed", CallID: tc.ID, Namespace: ns[tc.Function.Name], Name: tc.Function.Name,
			Arguments: tc.Function.Arguments})
	}
	o.Usage = responseUsage(rec)
	return o
}

// orJSON is raw, or def when raw is empty.
func orJSON(raw json.RawMessage, def string) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage(def)
	}
	return raw
}

// responses serves POST /v1/responses.
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	s.keepHeaders(r)
	var req ResponsesRequest
	if _, err := readBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, APIError{
			Message: "We could not parse the JSON body of your request: " + err.Error(),
			Type:    "invalid_request_error",
		})
		return
	}
	var parent *storedResponse
	if req.PreviousResponseID != "" {
		var ok bool
		if parent, ok = s.stored.get(req.PreviousResponseID); !ok {
			writeError(w, http.StatusBadRequest, *responsesError("previous_response_id", "previous_response_not_found",
				"Previous response with id '%s' not found.", req.PreviousResponseID))
			return
		}
	}
	chat, start, apiErr := req.chatRequest(parent.conversation())
	if apiErr != nil {
		writeError(w, http.StatusBadRequest, *apiErr)
		return
	}
	opts, err := s.callOptions(r, chat, WireResponses)
	if err != nil {
		writeError(w, http.StatusNotFound, APIError{Message: err.Error(), Type: "invalid_request_error"})
		return
	}
	if req.Stream {
		s.streamResponse(w, r, &req, chat, opts, func(res *Result) { s.remember(&req, chat, start, parent, res) })
		return
	}
	res, err := s.engine.Do(r.Context(), chat, opts...)
	if err != nil {
		return // the client went away
	}
	maps.Copy(w.Header(), res.Header)
	if res.Status != http.StatusOK {
		writeJSON(w, res.Status, res.Error)
		return
	}
	s.remember(&req, chat, start, parent, res)
	writeJSON(w, http.StatusOK, req.object(res.Record, res.Response))
}

// remember stores the response's conversation, unless the request said store: false:
// its own input and its output, after its parent's.
func (s *Server) remember(req *ResponsesRequest, chat *ChatRequest, start int, parent *storedResponse, res *Result) {
	if req.Store != nil && !*req.Store {
		return
	}
	msgs := slices.Clone(chat.Messages[start:])
	msgs = append(msgs, res.Response.Choices[0].Message)
	s.stored.put(res.Record.ID, &storedResponse{parent: parent, msgs: msgs})
}

// streamResponse answers a streamed request with the Responses API's events:
// response.created and response.in_progress when prefill ends, then per output item
// response.output_item.added, its content (a message's content_part.added,
// output_text.delta…, output_text.done, content_part.done; a function call's
// function_call_arguments.delta and .done) and response.output_item.done, and last
// response.completed (response.incomplete when cut at max_output_tokens) with the
// usage. kept runs before that last event, so a client that chains on it finds the
// response stored.
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, req *ResponsesRequest, chat *ChatRequest, opts []CallOption, kept func(*Result)) {
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["sequence_number"] = seq
		seq++
		writeEvent(w, typ, fields)
	}
	res := s.await(r, chat, opts, func(partial *Result) {
		startSSE(w, partial.Header)
		o := req.object(partial.Record, nil)
		ev("response.created", map[string]any{"response": o})
		ev("response.in_progress", map[string]any{"response": o})
		flush(w)
	})
	switch {
	case res == nil:
		return
	case res.Status != http.StatusOK:
		maps.Copy(w.Header(), res.Header)
		writeJSON(w, res.Status, res.Error)
		return
	}
	o := req.object(res.Record, res.Response)
	for i, item := range o.Output {
		at := map[string]any{"item_id": item.ID, "output_index": i}
		with := func(kv ...any) map[string]any {
			m := maps.Clone(at)
			for k := 0; k+1 < len(kv); k += 2 {
				m[kv[k].(string)] = kv[k+1]
			}
			return m
		}
		added := item
		added.Status = "in_progress"
		switch item.Type {
		case "message":
			added.Content = nil
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			ev("response.content_part.added", with("content_index", 0, "part", outputText("")))
			text := item.Content[0].Text
			for _, piece := range splitKeepSpace(text) {
				ev("response.output_text.delta", with("content_index", 0, "delta", piece, "logprobs", []any{}))
			}
			ev("response.output_text.done", with("content_index", 0, "text", text, "logprobs", []any{}))
			ev("response.content_part.done", with("content_index", 0, "part", item.Content[0]))
		case "function_call":
			added.Arguments = ""
			ev("response.output_item.added", map[string]any{"output_index": i, "item": added})
			ev("response.function_call_arguments.delta", with("delta", item.Arguments))
			ev("response.function_call_arguments.done", with("name", item.Name, "arguments", item.Arguments))
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	kept(res)
	last := "response.completed"
	if o.Status == "incomplete" {
		last = "response.incomplete"
	}
	ev(last, map[string]any{"response": o})
	flush(w)
}

// storedResponse is one stored response's part of its conversation: the messages its
// request added (its input, after the instructions and its parent's conversation) and
// its answer. A chain of responses shares its parents' parts.
type storedResponse struct {
	parent *storedResponse
	msgs   []Message
}

// conversation is the whole stored conversation up to and including r (none for nil).
func (r *storedResponse) conversation() []Message {
	var chain []*storedResponse
	for p := r; p != nil; p = p.parent {
		chain = append(chain, p)
	}
	var out []Message
	for i := len(chain) - 1; i >= 0; i-- {
		out = append(out, chain[i].msgs...)
	}
	return out
}

// responseStore is a bounded LRU of stored responses by id. A response evicted while
// a later one in its chain is kept still serves that one's conversation.
type responseStore struct {
	mu   sync.Mutex
	max  int
	byID map[string]*list.Element
	lru  *list.List // of *storedEntry, most recently used first
}

type storedEntry struct {
	id   string
	resp *storedResponse
}

func newResponseStore(n int) *responseStore {
	return &responseStore{max: n, byID: map[string]*list.Element{}, lru: list.New()}
}

func (st *responseStore) get(id string) (*storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	el, ok := st.byID[id]
	if !ok {
		return nil, false
	}
	st.lru.MoveToFront(el)
	return el.Value.(*storedEntry).resp, true
}

func (st *responseStore) put(id string, r *storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if el, ok := st.byID[id]; ok {
		el.Value.(*storedEntry).resp = r
		st.lru.MoveToFront(el)
		return
	}
	st.byID[id] = st.lru.PushFront(&storedEntry{id: id, resp: r})
	for st.lru.Len() > st.max {
		old := st.lru.Remove(st.lru.Back()).(*storedEntry)
		delete(st.byID, old.id)
	}
}
