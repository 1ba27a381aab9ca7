package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	openai "github.com/sashabaranov/go-openai"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
)

// OpenAIConfig configures an OpenAI-compatible chat-completions backend (OpenAI, Groq,
// vLLM, SGLang, Ollama, llama.cpp server, the testkit fake engine).
type OpenAIConfig struct {
	ID      string // registry id; default "openai"
	BaseURL string // e.g. https://api.openai.com/v1; default go-openai's (OpenAI's)
	APIKey  string
	Model   string // default model when a request names none
	// Prices in currency units per million tokens; when both are zero no cost is reported.
	PriceInPerMTok  float64
	PriceOutPerMTok float64
	// Tools resolves the tool names an agent asks for (nil: agents with tools fail).
	Tools ToolResolver
	// MaxTurns bounds an agent's tool loop (0: DefaultMaxTurns).
	MaxTurns int
	// NoStream turns streaming off (for endpoints that cannot stream).
	NoStream bool
	// HTTPClient is the client requests go through (default a plain &http.Client{}). Its
	// transport is wrapped, never modified, to capture response headers.
	HTTPClient *http.Client
	// StructuredOutput is how a schema is asked for: "json_schema" (the response format),
	// "instructions" (the schema in the system prompt, JSON extracted from the reply), or
	// "" / "auto": the response format, and instructions from the first 400 that says the
	// endpoint has no such format.
	StructuredOutput string
	// Replicas are further base URLs serving the same model; the scheduler picks one per
	// turn (keeping a run on the replica that holds its KV cache while load allows).
	Replicas []string
}

// ToolResolver gives the tools an agent asks for by name.
type ToolResolver interface {
	// Resolve may start what serves the tools (an MCP server); ctx bounds that.
	Resolve(ctx context.Context, names []string) ([]tools.Tool, error)
}

// OpenAI is the "openai" backend: chat completions through go-openai, with the agent's
// tool loop.
//
// Retries: go-openai v1.43.0 has no retry loop of its own (a request is sent once and any
// non-2xx status comes back as an error), so the scheduler is the only retry loop. Every
// response's headers — 200, 429, 5xx — are captured by a wrapping http.RoundTripper,
// since go-openai does not expose them: on success they are in Result.Header, on an HTTP
// failure in the returned *HTTPError, which the scheduler reads via StatusCode/Header.
type OpenAI struct {
	cfg OpenAIConfig
	// noSchemaFormat holds the models for which the endpoint said it has no json_schema
	// response format (StructuredOutput auto): later calls ask with instructions at once.
	noSchemaFormat sync.Map // model → struct{}
	// maxTokensOnly holds the endpoints (base URL and model) that refused
	// max_completion_tokens: they are sent the older max_tokens instead.
	maxTokensOnly sync.Map         // base URL + "\x00" + model → struct{}
	client        *openai.Client   // the main endpoint
	peers         []*openai.Client // the client of each replica, [0] = client
	bases         []string
}

// NewOpenAI returns an OpenAI backend for cfg.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.ID == "" {
		cfg.ID = "openai"
	}
	if cfg.PriceInPerMTok < 0 || cfg.PriceOutPerMTok < 0 {
		return nil, fmt.Errorf("openai backend %q: prices must not be negative", cfg.ID)
	}
	cc := openai.DefaultConfig(cfg.APIKey)
	if cfg.BaseURL != "" {
		cc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	}
	cfg.BaseURL = cc.BaseURL
	base := cfg.HTTPClient
	if base == nil {
		base = &http.Client{}
	}
	hc := *base // shallow copy: the caller's client is left alone
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc.Transport = &captureTransport{next: next}
	cc.HTTPClient = &hc
	o := &OpenAI{cfg: cfg, client: openai.NewClientWithConfig(cc), bases: []string{cc.BaseURL}}
	o.peers = append(o.peers, o.client)
	for _, u := range cfg.Replicas {
		rc := cc
		rc.BaseURL = strings.TrimRight(u, "/")
		o.peers = append(o.peers, openai.NewClientWithConfig(rc))
		o.bases = append(o.bases, rc.BaseURL)
	}
	return o, nil
}

// target is where one send goes: the replica the scheduler chose, or the fallback
// backend's endpoint and model when it routed the turn to an OpenAI-compatible fallback.
func (o *OpenAI) target(ctx context.Context, model string) (*openai.Client, string, string) {
	r := RouteOf(ctx)
	t := o
	if f, ok := r.Fallback.(*OpenAI); ok {
		t = f
		if f.cfg.Model != "" {
			model = f.cfg.Model
		}
	}
	i := r.Replica
	if i < 0 || i >= len(t.peers) {
		i = 0
	}
	return t.peers[i], t.bases[i], model
}

// ID returns the configured registry id.
func (o *OpenAI) ID() string { return o.cfg.ID }

// HTTPError is an HTTP failure from the endpoint. StatusCode and Header make it readable
// by scheduler.HTTPStatus, which learns rate limits and retry delays from it.
type HTTPError struct {
	Status int
	// Headers are the response headers. (A field named Header could not coexist with the
	// Header() method scheduler.HTTPStatus needs.)
	Headers http.Header
	Body    string // the raw response body
	BaseURL string
	Message string // the provider's error message, when the body had one
	err     error  // the transport error, when Status is 0
}

// QuotaError is an HTTP 429 whose provider says the key's quota or credit is used up
// (OpenAI's insufficient_quota). It is not a rate limit: no wait makes it pass, so it has
// no StatusCode method on purpose (the scheduler, which retries 429s, does not see one)
// and it is Permanent (the runtime's own retries skip it too): the call fails at once.
type QuotaError struct {
	ID   string // the backend's registry id
	HTTP *HTTPError
}

func (e *QuotaError) Error() string {
	msg := e.HTTP.Message
	if msg == "" {
		msg = snippet(e.HTTP.Body, 300)
	}
	return fmt.Sprintf("openai backend %q: %s has no quota left for this key (HTTP 429 insufficient_quota: %s); "+
		"this is not a rate limit and waiting will not help: add credit or raise the quota with the provider, or use another key, then resume the run",
		e.ID, e.HTTP.BaseURL, msg)
}

// Permanent reports that retrying cannot help.
func (e *QuotaError) Permanent() bool { return true }

// Unwrap returns the transport error of a request that got no response.
func (e *HTTPError) Unwrap() error { return e.err }

func (e *HTTPError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("openai backend: no response from %s: %s", e.BaseURL, e.Message)
	}
	msg := e.Message
	if msg == "" {
		msg = snippet(e.Body, 300)
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("openai backend: HTTP %d from %s: %s", e.Status, e.BaseURL, msg)
}

// StatusCode returns the HTTP status.
func (e *HTTPError) StatusCode() int { return e.Status }

// Header returns the response headers (retry-after, x-ratelimit-*).
func (e *HTTPError) Header() http.Header { return e.Headers }

// Run carries out one agent call: a chat completion, or, when the agent has tools, a
// tool loop — model turn, tool calls, their results, the next turn — until the model
// answers without calling a tool or MaxTurns is reached. Every model turn goes through
// call.Do, so the scheduler admits each one (the second and later as continuations).
// With call.Progress set and streaming on, replies are streamed and reported as they come.
func (o *OpenAI) Run(ctx context.Context, req agent.Request, call Call) (agent.Result, error) {
	model := req.Model
	if model == "" {
		model = o.cfg.Model
	}
	if model == "" {
		return agent.Result{}, fmt.Errorf("openai backend %q: no model: set model in the agent call (agent{model=...}) or a default model in the backend's configuration", o.cfg.ID)
	}
	toolset, err := o.resolveTools(ctx, req.Tools)
	if err != nil {
		return agent.Result{}, err
	}
	session, _ := callSessionID(req, "openai", call.Key)
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
		return agent.Result{}, fmt.Errorf("openai backend %q: session_id %q is not a session of this run "+
			"(pass the session_id an earlier agent call of the run returned)", o.cfg.ID, req.SessionID)
	}
	msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: req.Prompt})
	// The conversation as the session keeps it: without schema instructions, which belong
	// to this call only.
	kept := slices.Clone(msgs)
	// max_completion_tokens, not the deprecated max_tokens (which OpenAI's reasoning
	// models refuse); an endpoint that refuses it gets max_tokens (see outputCap).
	creq := openai.ChatCompletionRequest{Model: model, MaxCompletionTokens: req.MaxTokens}
	zeroTemp := false
	if req.Temperature != nil {
		creq.Temperature = float32(*req.Temperature)
		// go-openai drops temperature 0 (omitempty); the transport puts it back.
		zeroTemp = *req.Temperature == 0
	}
	var schemaJSON []byte
	if req.Schema != nil {
		raw, err := json.Marshal(req.Schema)
		if err != nil {
			return agent.Result{}, fmt.Errorf("openai backend %q: encoding schema: %w", o.cfg.ID, err)
		}
		schemaJSON = raw
		switch mode := o.cfg.StructuredOutput; {
		case mode == "instructions" || (mode == "" || mode == "auto") && o.schemaFormatGone(model):
			msgs = withSchemaInstructions(msgs, raw)
		default:
			creq.ResponseFormat = &openai.ChatCompletionResponseFormat{
				Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
					Name: "output", Strict: false, Schema: json.RawMessage(raw),
				},
			}
		}
	}
	byName := map[string]tools.Tool{}
	for _, t := range toolset {
		sp := t.Spec()
		byName[sp.Name] = t
		params := sp.Parameters
		if params == nil {
			params = map[string]any{"type": "object", "properties": map[string]any{}}
		}
		creq.Tools = append(creq.Tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: sp.Name, Description: sp.Description, Parameters: params,
		}})
	}

	res := agent.Result{Backend: o.cfg.ID, Model: model, SessionID: session, Attempts: 1}
	maxTurns := o.cfg.MaxTurns
	if maxTurns <= 0 {
		maxTurns = DefaultMaxTurns
	}
	stream := call.Progress != nil && !o.cfg.NoStream
	var (
		cost   float64
		priced bool // a serving backend has prices: the call has a cost
	)
	price := func(res *agent.Result) {
		if priced {
			c := cost
			res.Cost = &c
		}
	}
	for turn := 1; ; turn++ {
		if turn > maxTurns {
			res.Status = agent.StatusError
			res.Error = fmt.Sprintf("the agent took %d model turns without a final answer (the backend's max_turns; raise it in luft.toml or give the agent a narrower task)", maxTurns)
			price(&res)
			return res, nil
		}
		creq.Messages = msgs
		var (
			reply turnReply
			last  http.Header
			sent  *capture
		)
		err := call.Do(ctx, TurnCost{Input: estimateMessages(msgs, creq.Tools), MaxOutput: req.MaxTokens},
			func(ctx context.Context) TurnReport {
				cp := &capture{zeroTemperature: zeroTemp}
				var err error
				if stream {
					reply, err = o.streamTurn(ctx, cp, creq, call)
				} else {
					reply, err = o.plainTurn(ctx, cp, creq)
				}
				u := reply.usage
				last, sent = cp.header, cp
				res.Usage = res.Usage.Add(u)
				// Each turn is priced by the backend that served it (a fallback's own prices).
				if by := o.servedBy(ctx); by.cfg.PriceInPerMTok != 0 || by.cfg.PriceOutPerMTok != 0 {
					cost += (float64(u.Input)*by.cfg.PriceInPerMTok + float64(u.Output)*by.cfg.PriceOutPerMTok) / 1e6
					priced = true
				}
				return TurnReport{Usage: u, Header: cp.header, Err: err}
			})
		res.Header = last
		if err != nil && creq.ResponseFormat != nil && schemaFormatRefused(err) && o.cfg.StructuredOutput != "json_schema" {
			// The endpoint has no json_schema response format: ask with instructions from
			// now on. The refused request used no model turn.
			o.noSchemaFormat.Store(model, struct{}{})
			creq.ResponseFormat = nil
			msgs = withSchemaInstructions(msgs, schemaJSON)
			turn--
			continue
		}
		if err != nil && sent != nil && sent.completionCap && maxCompletionRefused(err) {
			// The endpoint knows only max_tokens: send that from now on. The refused
			// request used no model turn.
			o.maxTokensOnly.Store(sent.endpoint, struct{}{})
			turn--
			continue
		}
		if err != nil {
			price(&res)
			return res, err
		}
		if reply.model != "" {
			res.Model = reply.model
		}
		if reply.finish == openai.FinishReasonLength {
			// The reply was cut at the output cap: a partial answer (or a partial tool
			// call) is not a success, and with a schema it is no JSON either.
			res.Status, res.Text, res.Output = agent.StatusError, reply.msg.Content, reply.msg.Content
			res.Error = truncatedError(o.cfg.ID, req.MaxTokens, turn, req.Schema != nil)
			call.Report(Update{Kind: "truncated", Text: res.Error})
			price(&res)
			return res, nil
		}
		if len(reply.msg.ToolCalls) == 0 {
			res.Status = agent.StatusOK
			res.Text = reply.msg.Content
			res.Output = res.Text
			if req.Schema != nil {
				var v any
				if json.Unmarshal([]byte(res.Text), &v) == nil {
					res.Output = v
				}
			}
			if !stream {
				call.Report(Update{Kind: "message", Text: res.Text})
			}
			res.Transcript = transcriptOf(kept, res.Text)
			price(&res)
			return res, nil
		}
		calls := slices.Clone(reply.msg.ToolCalls)
		for i := range calls {
			// arguments is a required string in the echoed call; go-openai omits an
			// empty one, which OpenAI refuses.
			if strings.TrimSpace(calls[i].Function.Arguments) == "" {
				calls[i].Function.Arguments = "{}"
			}
			if calls[i].Type == "" {
				calls[i].Type = openai.ToolTypeFunction
			}
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: reply.msg.Content, ToolCalls: calls})
		for _, tc := range reply.msg.ToolCalls {
			out, terr := runTool(ctx, byName, turn, tc, call)
			if terr != nil {
				res.Status, res.Error = agent.StatusError, terr.Error()
				price(&res)
				return res, terr
			}
			if ctx.Err() != nil {
				price(&res)
				return res, ctx.Err()
			}
			// A tool message carries no name: the official types have none for it.
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: out})
		}
	}
}

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

// schemaFormatRefused reports whether err is an endpoint's 400 saying it has no
// json_schema response format — not one refusing this call's schema (OpenAI's "Invalid
// schema for response_format"), which instructions would not cure.
func schemaFormatRefused(err error) bool {
	text, ok := badRequestText(err)
	if !ok || !strings.Contains(text, "response_format") && !strings.Contains(text, "json_schema") || strings.Contains(text, "invalid schema") {
		return false
	}
	return containsAny(text, "support", "unknown", "unrecognized", "not allowed", "not permitted", "extra", "unexpected", "must be one of", "is not one of")
}

// maxCompletionRefused reports whether err is an endpoint's 400 saying it does not know
// max_completion_tokens (older servers and API versions), as opposed to one saying the
// value is too large ("supports at most ..."), which max_tokens would not cure.
func maxCompletionRefused(err error) bool {
	text, ok := badRequestText(err)
	return ok && strings.Contains(text, "max_completion_tokens") &&
		containsAny(text, "unsupported", "not supported", "unknown", "unrecognized", "not allowed", "not permitted", "extra", "unexpected")
}

// badRequestText is the lower-cased message and body of an HTTP 400.
func badRequestText(err error) (string, bool) {
	var he *HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
		return "", false
	}
	return strings.ToLower(he.Message + " " + he.Body), true
}

func containsAny(s string, words ...string) bool {
	return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
}

// truncatedError explains a reply the endpoint cut at the output cap (finish_reason
// "length").
func truncatedError(id string, maxTokens, turn int, schema bool) string {
	limit := "the model's own output limit"
	if maxTokens > 0 {
		limit = fmt.Sprintf("max_tokens=%d", maxTokens)
	}
	what := "the reply"
	if schema {
		what = "the structured reply (so its JSON is incomplete)"
	}
	return fmt.Sprintf("openai backend %q: %s was cut off at %s in model turn %d (finish_reason \"length\"); "+
		"raise max_tokens in the agent call or ask for a shorter answer", id, what, limit, turn)
}

// DefaultMaxTurns bounds an agent's tool loop when the backend sets no max_turns.
const DefaultMaxTurns = 20

// maxToolOutput bounds one tool result sent back to the model.
const maxToolOutput = 64 << 10

// runTool runs one tool call of the model through call.RunTool (which replays it when a
// retried or resumed call asks for it again) and returns the text the model gets back. A
// tool's failure is a result the model reads ("error: ..."), not a failed agent call; an
// *tools.ApprovalError, or a failure to journal the call, comes back as an error.
func runTool(ctx context.Context, byName map[string]tools.Tool, turn int, tc openai.ToolCall, call Call) (string, error) {
	call.Report(Update{Kind: "tool_call", Text: tc.Function.Name + " " + snippet(tc.Function.Arguments, 120)})
	t, ok := byName[tc.Function.Name]
	if !ok {
		out := fmt.Sprintf("error: there is no tool %q; the tools you have are: %s", tc.Function.Name,
			strings.Join(slices.Sorted(maps.Keys(byName)), ", "))
		call.Report(Update{Kind: "tool_result", Text: out})
		return out, nil
	}
	args := json.RawMessage(tc.Function.Arguments)
	if strings.TrimSpace(tc.Function.Arguments) == "" {
		args = json.RawMessage("{}")
	}
	out, replayed, err := call.RunTool(ctx, ToolCall{Turn: turn, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
		Ask: tools.NeedsApproval(t, args)},
		func(ctx context.Context) (string, error) {
			out, err := t.Call(ctx, args)
			if err != nil {
				var ae *tools.ApprovalError
				if errors.As(err, &ae) {
					return "", err
				}
				out = "error: " + err.Error()
			}
			if len(out) > maxToolOutput {
				out = out[:maxToolOutput] + "\n[output cut at 64 KiB]"
			}
			return out, nil
		})
	if err != nil {
		return "", err
	}
	note := ""
	if replayed {
		note = " (recorded result: the tool ran in an earlier attempt and is not run again)"
	}
	call.Report(Update{Kind: "tool_result", Text: snippet(out, 200) + note})
	return out, nil
}

// resolveTools returns the tools an agent asked for.
func (o *OpenAI) resolveTools(ctx context.Context, names []string) ([]tools.Tool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if o.cfg.Tools == nil {
		return nil, fmt.Errorf("openai backend %q: the agent asks for tools %s but none are configured "+
			"(add a [tools] table or [mcp_servers] to luft.toml)", o.cfg.ID, strings.Join(names, ", "))
	}
	ts, err := o.cfg.Tools.Resolve(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("openai backend %q: %w", o.cfg.ID, err)
	}
	return ts, nil
}

// turnReply is what one model turn answered: its message, the model that served it, the
// usage and why it stopped.
type turnReply struct {
	msg    openai.ChatCompletionMessage
	model  string
	usage  agent.Usage
	finish openai.FinishReason
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

// plainTurn is one non-streamed completion.
func (o *OpenAI) plainTurn(ctx context.Context, cp *capture, creq openai.ChatCompletionRequest) (turnReply, error) {
	cl, base, model := o.target(ctx, creq.Model)
	creq.Model = model
	o.outputCap(cp, &creq, base)
	resp, err := cl.CreateChatCompletion(context.WithValue(ctx, captureKey{}, cp), creq)
	if err != nil {
		return turnReply{}, o.wrapErrAt(ctx, base, cp, err)
	}
	r := turnReply{model: resp.Model, usage: usageOf(resp.Usage)}
	if len(resp.Choices) == 0 {
		return r, fmt.Errorf("openai backend %q: the endpoint %s answered with no choices", o.cfg.ID, o.cfg.BaseURL)
	}
	r.msg, r.finish = resp.Choices[0].Message, resp.Choices[0].FinishReason
	return r, nil
}

// streamTurn is one streamed completion: text is reported as it arrives, tool-call
// fragments are put together by index. Usage comes in the last chunk (stream_options
// include_usage); an endpoint that sends none gets an estimate.
func (o *OpenAI) streamTurn(ctx context.Context, cp *capture, creq openai.ChatCompletionRequest, call Call) (turnReply, error) {
	creq.Stream = true
	creq.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	cl, base, target := o.target(ctx, creq.Model)
	creq.Model = target
	o.outputCap(cp, &creq, base)
	st, err := cl.CreateChatCompletionStream(context.WithValue(ctx, captureKey{}, cp), creq)
	if err != nil {
		return turnReply{}, o.wrapErrAt(ctx, base, cp, err)
	}
	defer st.Close()
	// The headers are here before the reply: the scheduler learns the limits now.
	ObserveHeaders(ctx, cp.header)
	var (
		text   strings.Builder
		calls  []openai.ToolCall
		model  string
		usage  *openai.Usage
		finish openai.FinishReason
	)
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return turnReply{model: model}, o.wrapErrAt(ctx, base, cp, err)
			}
			// The connection broke after a 200: a transport failure the scheduler retries.
			return turnReply{model: model}, &HTTPError{Status: 0, Headers: cp.header, BaseURL: base, Message: "stream broken: " + err.Error()}
		}
		if chunk.Model != "" {
			model = chunk.Model
		}
		if chunk.Usage != nil {
			usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			if ch.FinishReason != "" && ch.FinishReason != openai.FinishReasonNull {
				finish = ch.FinishReason
			}
			if ch.Delta.Content != "" {
				text.WriteString(ch.Delta.Content)
				call.Report(Update{Kind: "text", Text: ch.Delta.Content})
			}
			for _, d := range ch.Delta.ToolCalls {
				i := len(calls)
				if d.Index != nil {
					i = *d.Index
				}
				for len(calls) <= i {
					calls = append(calls, openai.ToolCall{Type: openai.ToolTypeFunction})
				}
				c := &calls[i]
				if d.ID != "" {
					c.ID = d.ID
				}
				if d.Function.Name != "" {
					c.Function.Name += d.Function.Name
				}
				c.Function.Arguments += d.Function.Arguments
			}
		}
	}
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text.String(), ToolCalls: calls}
	var u agent.Usage
	if usage != nil {
		u = usageOf(*usage)
	} else {
		u = agent.Usage{Input: estimateMessages(creq.Messages, creq.Tools), Output: EstimateTokens(msg.Content)}
	}
	return turnReply{msg: msg, model: model, usage: u, finish: finish}, nil
}

// servedBy is the backend whose endpoint a send goes to: o, or the fallback the
// scheduler routed the turn to.
func (o *OpenAI) servedBy(ctx context.Context) *OpenAI {
	if f, ok := RouteOf(ctx).Fallback.(*OpenAI); ok {
		return f
	}
	return o
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

func usageOf(u openai.Usage) agent.Usage {
	out := agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		out.Cached = d.CachedTokens
	}
	return out
}

// wrapErr turns go-openai's error into an *HTTPError when the endpoint answered, or a
// wrapped error naming the base URL when it could not be reached.
func (o *OpenAI) wrapErr(ctx context.Context, cp *capture, err error) error {
	return o.wrapErrAt(ctx, o.cfg.BaseURL, cp, err)
}

// wrapErrAt is wrapErr for a request to base.
func (o *OpenAI) wrapErrAt(ctx context.Context, base string, cp *capture, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("openai backend %q: request to %s: %w", o.cfg.ID, base, ctxErr)
	}
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	status := 0
	msg := ""
	switch {
	case errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0:
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0:
		status = reqErr.HTTPStatusCode
		if reqErr.Err != nil && !isJSONSyntax(reqErr.Err) {
			msg = reqErr.Err.Error()
		}
	}
	if status == 0 && cp.status >= 300 {
		status = cp.status
	}
	if status != 0 {
		h := cp.header
		if h == nil {
			h = http.Header{}
		}
		he := &HTTPError{Status: status, Headers: h, Body: cp.body, BaseURL: base, Message: msg}
		if status == http.StatusTooManyRequests && strings.Contains(cp.body+msg, "insufficient_quota") {
			return &QuotaError{ID: o.cfg.ID, HTTP: he}
		}
		return he
	}
	// No response at all (refused, reset, DNS): status 0, which the scheduler retries with
	// backoff like a 5xx and counts toward the lane's circuit breaker.
	return &HTTPError{Status: 0, Headers: http.Header{}, BaseURL: base, Message: err.Error(), err: err}
}

func isJSONSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// capture is one call's view of its HTTP exchange, filled in by captureTransport.
type capture struct {
	zeroTemperature bool
	endpoint        string // base URL and model the request went to
	completionCap   bool   // the request carried max_completion_tokens

	status int
	header http.Header
	body   string // only for non-2xx responses
}

type captureKey struct{}

// captureTransport records each response's status and headers (and an error body) into
// the capture carried by the request's context. Requests without one pass through.
type captureTransport struct{ next http.RoundTripper }

// maxErrorBody bounds how much of an error body is kept.
const maxErrorBody = 64 << 10

func (t *captureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	cp, _ := r.Context().Value(captureKey{}).(*capture)
	if cp == nil {
		return t.next.RoundTrip(r)
	}
	if cp.zeroTemperature && r.Body != nil {
		nr, err := withZeroTemperature(r)
		if err != nil {
			return nil, err
		}
		r = nr
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	cp.status = resp.StatusCode
	cp.header = resp.Header.Clone()
	if resp.StatusCode >= 300 {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		cp.body = string(b)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		if rerr != nil {
			return nil, rerr
		}
	}
	return resp, nil
}

// withZeroTemperature returns a copy of r whose JSON body has "temperature": 0.
func withZeroTemperature(r *http.Request) (*http.Request, error) {
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) == nil {
		m["temperature"] = json.RawMessage("0")
		if nb, err := json.Marshal(m); err == nil {
			b = nb
		}
	}
	nr := r.Clone(r.Context())
	nr.Body = io.NopCloser(bytes.NewReader(b))
	nr.ContentLength = int64(len(b))
	nr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return nr, nil
}

// chatProbe is the smallest completion: one token.
func chatProbe(model string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: model, MaxCompletionTokens: 1,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "ping"}}}
}

// BaseURL returns the endpoint's base URL.
func (o *OpenAI) BaseURL() string { return o.cfg.BaseURL }

// DefaultModel is the model of calls that name none (the scheduler's lane).
func (o *OpenAI) DefaultModel() string { return o.cfg.Model }
