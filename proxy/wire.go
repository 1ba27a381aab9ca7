package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/luft-run/luft/agent"
)

// The proxy speaks three wires. Chat completions and the Responses API are OpenAI's,
// served by the upstreams of type openai; Anthropic Messages is served by the upstreams of
// type anthropic. A wire says how to read a request (its model, its size, the tool-call
// ids it echoes, whether it continues a tool loop), how to read an answer and a stream
// (usage, the ids it hands out), which event closes a stream, and how errors look to its
// clients. Everything else — admission, retries, runs, records — is the same for all.

// Families of upstreams: which wires an upstream serves.
const (
	FamilyOpenAI    = "openai"    // chat completions and the Responses API
	FamilyAnthropic = "anthropic" // Anthropic Messages
)

// wire is one API the proxy serves.
type wire struct {
	name     string // chat, responses, messages
	endpoint string // the path after an upstream's base URL
	family   string
	// parse reads a request body; the error says what is wrong with it.
	parse func(body []byte) (request, error)
	// answer reads a whole 200 answer.
	answer func(b []byte, res *relayed)
	// event reads one line of a stream.
	event func(line []byte, res *relayed)
	// terminal reports whether a line of a stream (or the start of one) begins the event
	// that closes it: that event is held back until the turn's end is recorded.
	terminal func(line []byte) bool
	// fail writes an error in the wire's shape.
	fail func(w http.ResponseWriter, status int, typ, code, msg string)
	// streamError is the event that ends a stream in place of its closing one.
	streamError func(code, msg string) []byte
}

// request is what the proxy reads of a request; the body itself goes upstream as it
// came.
type request struct {
	model  string
	stream bool
	maxOut int      // the completion cap the request sets, 0 = none
	estIn  int      // the prompt's size in tokens, roughly
	echoed []string // tool-call (and response) ids it carries, the most recent first
	cont   bool     // it continues a tool loop: its last input is a tool's result
	// chained: the request names a previous response whose conversation the upstream
	// prepends (Responses previous_response_id), so its prompt is larger than its body.
	chained bool
}

// wires are the wires the proxy serves.
var wires = []*wire{chatWire, responsesWire, messagesWire}

// path is the wire's endpoint on the proxy.
func (wr *wire) path() string { return "/v1" + wr.endpoint }

// maxEchoed bounds the ids of one request looked up to find its run.
const maxEchoed = 64

// tokensOf is a size in bytes as tokens, roughly: four bytes a token.
func tokensOf(n int) int { return (n + 3) / 4 }

// ---- chat completions ----

// chatRequest is what the proxy reads of a chat completions body.
type chatRequest struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Messages            []chatMessage   `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  []toolCallRef   `json:"tool_calls"`
}

type toolCallRef struct {
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// estimate is the turn's prompt size in tokens, roughly: four bytes a token, four
// tokens of framing per message, and the tool declarations.
func (c *chatRequest) estimate() int {
	n := tokensOf(len(c.Tools))
	for _, m := range c.Messages {
		n += 4 + tokensOf(len(m.Content))
		for _, tc := range m.ToolCalls {
			n += tokensOf(len(tc.Function.Name) + len(tc.Function.Arguments))
		}
	}
	return n
}

// echoed returns the tool_call ids the messages carry, the most recent first, and
// whether the last message is a tool result.
func (c *chatRequest) echoed() (ids []string, cont bool) {
	if n := len(c.Messages); n > 0 {
		role := c.Messages[n-1].Role
		cont = role == "tool" || role == "function"
	}
	for i := len(c.Messages) - 1; i >= 0 && len(ids) < maxEchoed; i-- {
		m := c.Messages[i]
		if m.ToolCallID != "" {
			ids = append(ids, m.ToolCallID)
		}
		for j := len(m.ToolCalls) - 1; j >= 0 && len(ids) < maxEchoed; j-- {
			if m.ToolCalls[j].ID != "" {
				ids = append(ids, m.ToolCalls[j].ID)
			}
		}
	}
	return ids, cont
}

var chatWire = &wire{
	name: "chat", endpoint: "/chat/completions", family: FamilyOpenAI,
	parse: func(body []byte) (request, error) {
		var c chatRequest
		if err := json.Unmarshal(body, &c); err != nil {
			return request{}, fmt.Errorf("the request body is not a valid chat completions request: %w", err)
		}
		if c.Model == "" || len(c.Messages) == 0 {
			return request{}, errors.New("a chat completions request needs model and a non-empty messages array")
		}
		r := request{model: c.Model, stream: c.Stream, estIn: c.estimate()}
		if c.MaxCompletionTokens != nil && *c.MaxCompletionTokens > 0 {
			r.maxOut = *c.MaxCompletionTokens
		} else if c.MaxTokens != nil && *c.MaxTokens > 0 {
			r.maxOut = *c.MaxTokens
		}
		r.echoed, r.cont = c.echoed()
		return r, nil
	},
	answer:      parseAnswer,
	event:       parseEvent,
	terminal:    func(line []byte) bool { return bytes.Equal(bytes.TrimRight(line, "\r"), doneMark) },
	fail:        writeError,
	streamError: openAIStreamError,
}

// doneMark is the data line that closes an OpenAI chat stream.
var doneMark = []byte("data: [DONE]")

// openAIStreamError is a chat stream's error chunk.
func openAIStreamError(code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "server_error", "param": nil, "code": code}})
	return append(append([]byte("data: "), b...), "\n\n"...)
}

// ---- the Responses API ----

// responsesRequest is what the proxy reads of a POST /v1/responses body.
type responsesRequest struct {
	Model              string          `json:"model"`
	Stream             bool            `json:"stream"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Instructions       json.RawMessage `json:"instructions"`
	Input              json.RawMessage `json:"input"`
	Tools              json.RawMessage `json:"tools"`
	PreviousResponseID string          `json:"previous_response_id"`
}

// responsesItem is what the proxy reads of one input item.
type responsesItem struct {
	Type   string `json:"type"`
	Role   string `json:"role"`
	CallID string `json:"call_id"`
}

var responsesWire = &wire{
	name: "responses", endpoint: "/responses", family: FamilyOpenAI,
	parse: func(body []byte) (request, error) {
		var q responsesRequest
		if err := json.Unmarshal(body, &q); err != nil {
			return request{}, fmt.Errorf("the request body is not a valid Responses API request: %w", err)
		}
		if q.Model == "" {
			return request{}, errors.New("a Responses API request needs model")
		}
		r := request{model: q.Model, stream: q.Stream, chained: q.PreviousResponseID != ""}
		if q.MaxOutputTokens != nil && *q.MaxOutputTokens > 0 {
			r.maxOut = *q.MaxOutputTokens
		}
		r.estIn = tokensOf(len(q.Instructions) + len(q.Tools))
		in := bytes.TrimSpace(q.Input)
		switch {
		case len(in) == 0 || bytes.Equal(in, []byte("null")):
			if !r.chained {
				return request{}, errors.New("a Responses API request needs input (a string or an array of items) or previous_response_id")
			}
		case in[0] == '"':
			r.estIn += 4 + tokensOf(len(in))
		case in[0] == '[':
			var items []json.RawMessage
			if err := json.Unmarshal(in, &items); err != nil {
				return request{}, fmt.Errorf("the request's input is not an array of items: %w", err)
			}
			parsed := make([]responsesItem, len(items))
			for i, raw := range items {
				r.estIn += 4 + tokensOf(len(raw))
				if err := json.Unmarshal(raw, &parsed[i]); err != nil {
					return request{}, fmt.Errorf("input item %d is not an object: %w", i, err)
				}
			}
			if n := len(parsed); n > 0 {
				t := parsed[n-1].Type
				r.cont = t == "function_call_output" || strings.HasSuffix(t, "_call_output")
			}
			for i := len(parsed) - 1; i >= 0 && len(r.echoed) < maxEchoed; i-- {
				if id := parsed[i].CallID; id != "" {
					r.echoed = append(r.echoed, id)
				}
			}
		default:
			return request{}, errors.New("the request's input must be a string or an array of items")
		}
		if r.chained {
			// The response it continues is its run's last turn, whatever ids follow.
			r.echoed = append([]string{q.PreviousResponseID}, r.echoed...)
		}
		return r, nil
	},
	answer:      parseResponsesAnswer,
	event:       parseResponsesEvent,
	terminal:    responsesTerminal,
	fail:        writeError,
	streamError: responsesStreamError,
}

// responsesUsage is the usage of a Responses API answer.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	OutputTokens       int `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (u *responsesUsage) usage() *agent.Usage {
	a := &agent.Usage{Input: u.InputTokens, Output: u.OutputTokens}
	if u.InputTokensDetails != nil {
		a.Cached = u.InputTokensDetails.CachedTokens
	}
	return a
}

// responseJSON is what the proxy reads of a response object.
type responseJSON struct {
	ID     string               `json:"id"`
	Output []responsesOutputRef `json:"output"`
	Usage  *responsesUsage      `json:"usage"`
}

type responsesOutputRef struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Arguments string `json:"arguments"`
	Input     string `json:"input"` // a custom tool's call
	Content   []struct {
		Text string `json:"text"`
	} `json:"content"`
}

// collect adds the response's usage, output size and ids to res; withOutput counts its
// output too (a whole answer; a stream counted it from its deltas).
func (a *responseJSON) collect(res *relayed, withOutput bool) {
	if a.Usage != nil {
		res.use = a.Usage.usage()
	}
	if a.ID != "" && !res.hasID(a.ID) {
		res.ids = append(res.ids, a.ID)
	}
	for _, o := range a.Output {
		if o.CallID != "" && !res.hasID(o.CallID) {
			res.ids = append(res.ids, o.CallID)
		}
		if withOutput {
			res.outBytes += len(o.Arguments) + len(o.Input)
			for _, c := range o.Content {
				res.outBytes += len(c.Text)
			}
		}
	}
}

func parseResponsesAnswer(b []byte, res *relayed) {
	var a responseJSON
	if json.Unmarshal(b, &a) != nil {
		res.outBytes = len(b)
		return
	}
	a.collect(res, true)
}

// responsesEvent is what the proxy reads of one event of a Responses stream.
type responsesEvent struct {
	Type     string              `json:"type"`
	Response *responseJSON       `json:"response"`
	Item     *responsesOutputRef `json:"item"`
}

// deltaKey starts the text of a Responses or Messages delta event.
var deltaKey = []byte(`"delta":"`)

func parseResponsesEvent(line []byte, res *relayed) {
	data, ok := dataOf(line)
	if !ok {
		return
	}
	if bytes.Contains(data[:min(len(data), 64)], []byte(`.delta"`)) {
		// Text and arguments come a few characters at a time: counted without decoding.
		res.outBytes += stringLen(data, deltaKey)
		return
	}
	var ev responsesEvent
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if ev.Response != nil {
		ev.Response.collect(res, false)
	}
	if ev.Item != nil && ev.Item.CallID != "" && !res.hasID(ev.Item.CallID) {
		res.ids = append(res.ids, ev.Item.CallID)
	}
}

// The events that close a Responses stream.
var responsesEnds = [][]byte{[]byte("response.completed"), []byte("response.incomplete"), []byte("response.failed")}

func responsesTerminal(line []byte) bool {
	return namesEvent(line, responsesEnds)
}

// namesEvent reports whether line is the event: line of one of names, or a data: line
// whose JSON object begins with a type that is one of them.
func namesEvent(line []byte, names [][]byte) bool {
	line = bytes.TrimRight(line, "\r")
	if v, ok := bytes.CutPrefix(line, []byte("event:")); ok {
		v = bytes.TrimSpace(v)
		for _, n := range names {
			if bytes.Equal(v, n) {
				return true
			}
		}
		return false
	}
	data, ok := dataOf(line)
	if !ok {
		return false
	}
	rest, ok := bytes.CutPrefix(data, []byte("{"))
	if !ok {
		return false
	}
	rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " "), []byte(`"type"`))
	if !ok {
		return false
	}
	rest, ok = bytes.CutPrefix(bytes.TrimLeft(rest, " "), []byte(":"))
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, " ")
	for _, n := range names {
		if v, ok := bytes.CutPrefix(rest, []byte(`"`)); ok && bytes.HasPrefix(v, n) && bytes.HasPrefix(v[len(n):], []byte(`"`)) {
			return true
		}
	}
	return false
}

// responsesStreamError is the Responses stream's error event.
func responsesStreamError(code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "code": code, "message": msg, "param": nil})
	return append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
}

// ---- Anthropic Messages ----

// messagesRequest is what the proxy reads of a POST /v1/messages body.
type messagesRequest struct {
	Model     string          `json:"model"`
	Stream    bool            `json:"stream"`
	MaxTokens *int            `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools json.RawMessage `json:"tools"`
}

// contentBlock is what the proxy reads of one content block.
type contentBlock struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	ToolUseID string `json:"tool_use_id"`
}

// parseMessages reads a Messages request.
func parseMessages(body []byte) (request, error) {
	var q messagesRequest
	if err := json.Unmarshal(body, &q); err != nil {
		return request{}, fmt.Errorf("the request body is not a valid Messages request: %w", err)
	}
	if q.Model == "" || len(q.Messages) == 0 {
		return request{}, errors.New("a Messages request needs model and a non-empty messages array")
	}
	r := request{model: q.Model, stream: q.Stream, estIn: tokensOf(len(q.System) + len(q.Tools))}
	if q.MaxTokens != nil && *q.MaxTokens > 0 {
		r.maxOut = *q.MaxTokens
	}
	for i := len(q.Messages) - 1; i >= 0; i-- {
		m := q.Messages[i]
		r.estIn += 4 + tokensOf(len(m.Content))
		c := bytes.TrimSpace(m.Content)
		if len(c) > 0 && c[0] != '[' && c[0] != '"' && !bytes.Equal(c, []byte("null")) {
			return request{}, fmt.Errorf("message %d: content is neither a string nor an array of blocks", i)
		}
		if len(c) == 0 || c[0] != '[' || len(r.echoed) >= maxEchoed {
			continue
		}
		var blocks []contentBlock
		if err := json.Unmarshal(c, &blocks); err != nil {
			return request{}, fmt.Errorf("message %d: content is neither a string nor an array of blocks: %w", i, err)
		}
		for j := len(blocks) - 1; j >= 0; j-- {
			b := blocks[j]
			if i == len(q.Messages)-1 && m.Role == "user" && b.Type == "tool_result" {
				r.cont = true
			}
			for _, id := range [...]string{b.ToolUseID, b.ID} {
				if id != "" && len(r.echoed) < maxEchoed {
					r.echoed = append(r.echoed, id)
				}
			}
		}
	}
	return r, nil
}

var messagesWire = &wire{
	name: "messages", endpoint: "/messages", family: FamilyAnthropic,
	parse:       parseMessages,
	answer:      parseMessagesAnswer,
	event:       parseMessagesEvent,
	terminal:    func(line []byte) bool { return namesEvent(line, messagesEnds) },
	fail:        writeAnthropicError,
	streamError: messagesStreamError,
}

var messagesEnds = [][]byte{[]byte("message_stop")}

// messagesUsage is the usage of a Messages answer (in a stream: message_start's, then
// message_delta's running output count).
type messagesUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

// into sets what u says in a: Anthropic counts cache reads and writes apart from the
// input; luft's input is the whole prompt.
func (u *messagesUsage) into(a *agent.Usage) {
	in, read, made := u.InputTokens != nil, u.CacheReadInputTokens != nil, u.CacheCreationInputTokens != nil
	sum := 0
	for _, p := range [...]*int{u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens} {
		if p != nil {
			sum += *p
		}
	}
	// A message_delta that says 0 input (some Anthropic-compatible servers) does not
	// undo what message_start said.
	if (in || read || made) && (sum > 0 || a.Input == 0) {
		a.Input, a.Cached = 0, 0
		for _, p := range [...]*int{u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens} {
			if p != nil {
				a.Input += *p
			}
		}
		if read {
			a.Cached = *u.CacheReadInputTokens
		}
	}
	if u.OutputTokens != nil {
		a.Output = *u.OutputTokens
	}
}

// messageJSON is what the proxy reads of a message (an answer, or message_start's).
type messageJSON struct {
	ID      string `json:"id"`
	Content []struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Text  string          `json:"text"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage *messagesUsage `json:"usage"`
}

func parseMessagesAnswer(b []byte, res *relayed) {
	var m messageJSON
	if json.Unmarshal(b, &m) != nil {
		res.outBytes = len(b)
		return
	}
	if m.Usage != nil {
		res.use = &agent.Usage{}
		m.Usage.into(res.use)
	}
	for _, c := range m.Content {
		res.outBytes += len(c.Text)
		if c.Type == "tool_use" {
			res.outBytes += len(c.Input)
			if c.ID != "" {
				res.ids = append(res.ids, c.ID)
			}
		}
	}
}

// messagesEvent is what the proxy reads of one event of a Messages stream.
type messagesEvent struct {
	Type         string         `json:"type"`
	Message      *messageJSON   `json:"message"`
	ContentBlock *contentBlock  `json:"content_block"`
	Usage        *messagesUsage `json:"usage"`
}

// Keys of a Messages stream's deltas.
var (
	textKey    = []byte(`"text":"`)
	partialKey = []byte(`"partial_json":"`)
)

func parseMessagesEvent(line []byte, res *relayed) {
	data, ok := dataOf(line)
	if !ok {
		return
	}
	if bytes.Contains(data[:min(len(data), 48)], []byte(`"content_block_delta"`)) {
		res.outBytes += stringLen(data, textKey) + stringLen(data, partialKey)
		return
	}
	var ev messagesEvent
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if ev.Message != nil && ev.Message.Usage != nil {
		if res.use == nil {
			res.use = &agent.Usage{}
		}
		ev.Message.Usage.into(res.use)
	}
	if ev.Usage != nil {
		if res.use == nil {
			res.use = &agent.Usage{}
		}
		ev.Usage.into(res.use)
	}
	if b := ev.ContentBlock; b != nil && b.Type == "tool_use" && b.ID != "" {
		res.ids = append(res.ids, b.ID)
	}
}

// messagesStreamError is a Messages stream's error event; luft's code leads the message,
// as in writeAnthropicError.
func messagesStreamError(code, msg string) []byte {
	if code != "" {
		msg = code + ": " + msg
	}
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": msg}})
	return append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
}

// anthropicErrorType is the Anthropic error type of an HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	default:
		if status >= 400 && status < 500 {
			return "invalid_request_error"
		}
		return "api_error"
	}
}

// writeAnthropicError writes an Anthropic-style error body; luft's code leads the
// message, since the shape has no field for it.
func writeAnthropicError(w http.ResponseWriter, status int, _, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if code != "" {
		msg = code + ": " + msg
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": anthropicErrorType(status), "message": msg}})
}

// ---- shared ----

// dataOf is the payload of a stream's data: line holding a JSON object.
func dataOf(line []byte) ([]byte, bool) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return nil, false
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return nil, false
	}
	return data, true
}

// stringLen is the length of the first string value after key in data, as it is
// escaped.
func stringLen(data, key []byte) int {
	i := bytes.Index(data, key)
	if i < 0 {
		return 0
	}
	rest := data[i+len(key):]
	for j := 0; j < len(rest); j++ {
		switch rest[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return len(rest)
}
