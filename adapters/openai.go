package adapters

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	openai "github.com/sashabaranov/go-openai"
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

// servedBy is the backend whose endpoint a send goes to: o, or the fallback the
// scheduler routed the turn to.
func (o *OpenAI) servedBy(ctx context.Context) *OpenAI {
	if f, ok := RouteOf(ctx).Fallback.(*OpenAI); ok {
		return f
	}
	return o
}

// BaseURL returns the endpoint's base URL.
func (o *OpenAI) BaseURL() string { return o.cfg.BaseURL }

// DefaultModel is the model of calls that name none (the scheduler's lane).
func (o *OpenAI) DefaultModel() string { return o.cfg.Model }
