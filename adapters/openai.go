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
	msgs, err := o.conversation(req, call)
	if err != nil {
		return agent.Result{}, err
	}
	c := &chatCall{o: o, req: req, call: call, model: model, msgs: msgs,
		// The conversation as the session keeps it: without schema instructions, which
		// belong to this call only.
		kept:   slices.Clone(msgs),
		stream: call.Progress != nil && !o.cfg.NoStream,
		res:    agent.Result{Backend: o.cfg.ID, Model: model, SessionID: session, Attempts: 1},
	}
	if err := c.buildRequest(toolset); err != nil {
		return agent.Result{}, err
	}
	return c.loop(ctx)
}

// chatCall is one agent call under way: its request, its conversation so far and the
// result it builds up, turn by turn.
type chatCall struct {
	o     *OpenAI
	req   agent.Request
	call  Call
	model string // the model asked for (the reply may name another)

	creq       openai.ChatCompletionRequest
	msgs       []openai.ChatCompletionMessage // the conversation sent
	kept       []openai.ChatCompletionMessage // the conversation the session keeps
	schemaJSON []byte                         // the schema, when the call has one
	zeroTemp   bool                           // temperature 0, which go-openai drops
	byName     map[string]tools.Tool
	stream     bool

	res    agent.Result
	cost   float64
	priced bool // a serving backend has prices: the call has a cost
}

// loop runs model turns until the model answers without a tool call, the reply is cut
// at the output cap, or MaxTurns is reached.
func (c *chatCall) loop(ctx context.Context) (agent.Result, error) {
	maxTurns := c.o.cfg.MaxTurns
	if maxTurns <= 0 {
		maxTurns = DefaultMaxTurns
	}
	for turn := 1; ; turn++ {
		if turn > maxTurns {
			c.res.Status = agent.StatusError
			c.res.Error = fmt.Sprintf("the agent took %d model turns without a final answer (the backend's max_turns; raise it in luft.toml or give the agent a narrower task)", maxTurns)
			return c.result(), nil
		}
		reply, sent, err := c.send(ctx)
		if err != nil && c.downgrade(err, sent) {
			turn-- // the refused request used no model turn
			continue
		}
		if err != nil {
			return c.result(), err
		}
		if reply.model != "" {
			c.res.Model = reply.model
		}
		if reply.finish == openai.FinishReasonLength {
			return c.truncated(reply, turn), nil
		}
		if len(reply.msg.ToolCalls) == 0 {
			return c.answer(reply), nil
		}
		if err := c.runToolCalls(ctx, turn, reply.msg); err != nil {
			return c.result(), err
		}
	}
}

// send is one model turn through call.Do: the scheduler admits it, and its usage,
// headers and cost are added to the call's. sent is the capture of the request that
// went out last.
func (c *chatCall) send(ctx context.Context) (reply turnReply, sent *capture, err error) {
	c.creq.Messages = c.msgs
	var last http.Header
	err = c.call.Do(ctx, TurnCost{Input: estimateMessages(c.msgs, c.creq.Tools), MaxOutput: c.req.MaxTokens},
		func(ctx context.Context) TurnReport {
			cp := &capture{zeroTemperature: c.zeroTemp}
			var err error
			if c.stream {
				reply, err = c.o.streamTurn(ctx, cp, c.creq, c.call)
			} else {
				reply, err = c.o.plainTurn(ctx, cp, c.creq)
			}
			u := reply.usage
			last, sent = cp.header, cp
			c.res.Usage = c.res.Usage.Add(u)
			// Each turn is priced by the backend that served it (a fallback's own prices).
			if by := c.o.servedBy(ctx); by.cfg.PriceInPerMTok != 0 || by.cfg.PriceOutPerMTok != 0 {
				c.cost += (float64(u.Input)*by.cfg.PriceInPerMTok + float64(u.Output)*by.cfg.PriceOutPerMTok) / 1e6
				c.priced = true
			}
			return TurnReport{Usage: u, Header: cp.header, Err: err}
		})
	c.res.Header = last
	return reply, sent, err
}

// downgrade reports whether err is an endpoint refusing a field of the request that an
// older form replaces, after switching the request to that form for this and later
// calls: instructions for the json_schema response format, max_tokens for
// max_completion_tokens.
func (c *chatCall) downgrade(err error, sent *capture) bool {
	if c.creq.ResponseFormat != nil && schemaFormatRefused(err) && c.o.cfg.StructuredOutput != "json_schema" {
		// The endpoint has no json_schema response format: ask with instructions from
		// now on.
		c.o.noSchemaFormat.Store(c.model, struct{}{})
		c.creq.ResponseFormat = nil
		c.msgs = withSchemaInstructions(c.msgs, c.schemaJSON)
		return true
	}
	if sent != nil && sent.completionCap && maxCompletionRefused(err) {
		// The endpoint knows only max_tokens: send that from now on.
		c.o.maxTokensOnly.Store(sent.endpoint, struct{}{})
		return true
	}
	return false
}

// truncated is the result of a reply cut at the output cap: a partial answer (or a
// partial tool call) is not a success, and with a schema it is no JSON either.
func (c *chatCall) truncated(reply turnReply, turn int) agent.Result {
	c.res.Status, c.res.Text, c.res.Output = agent.StatusError, reply.msg.Content, reply.msg.Content
	c.res.Error = truncatedError(c.o.cfg.ID, c.req.MaxTokens, turn, c.req.Schema != nil)
	c.call.Report(Update{Kind: "truncated", Text: c.res.Error})
	return c.result()
}

// answer is the result of the model's final answer: its text, and with a schema the
// JSON value it holds.
func (c *chatCall) answer(reply turnReply) agent.Result {
	c.res.Status = agent.StatusOK
	c.res.Text = reply.msg.Content
	c.res.Output = c.res.Text
	if c.req.Schema != nil {
		var v any
		if json.Unmarshal([]byte(c.res.Text), &v) == nil {
			c.res.Output = v
		}
	}
	if !c.stream {
		c.call.Report(Update{Kind: "message", Text: c.res.Text})
	}
	c.res.Transcript = transcriptOf(c.kept, c.res.Text)
	return c.result()
}

// result is the call's result as it stands, with its cost when it has one.
func (c *chatCall) result() agent.Result {
	if c.priced {
		cost := c.cost
		c.res.Cost = &cost
	}
	return c.res
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
