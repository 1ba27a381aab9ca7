package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Routing is how the engine picks a replica for a request that does not name one.
type Routing int

const (
	// LeastLoaded picks the replica with the fewest running plus queued requests,
	// the lowest index on a tie.
	LeastLoaded Routing = iota
	// RoundRobin cycles through the replicas regardless of load.
	RoundRobin
)

// Config describes the modelled engine. Zero values take the defaults given.
type Config struct {
	Replicas int // default 1
	Slots    int // concurrent requests per replica (vLLM's max-num-seqs); default 1
	// MaxWaiting bounds each replica's queue; a request beyond it is answered 503.
	// 0 means unbounded.
	MaxWaiting int

	// Latency model: prefill = PrefillOverhead + uncached prompt tokens × PrefillPerToken
	// + cached prompt tokens × CachedPrefillPerToken; decode = completion tokens ×
	// DecodePerToken × the load factor. All default to zero (instant).
	PrefillPerToken       time.Duration
	CachedPrefillPerToken time.Duration
	PrefillOverhead       time.Duration
	DecodePerToken        time.Duration
	// LoadFactor is the decode-time multiplier when every slot of the replica is busy,
	// linear from 1 with one busy slot; fixed when the request starts. 0 or 1: none.
	LoadFactor float64

	// CacheTokens is each replica's prefix-cache capacity in tokens: 0 means 131072,
	// negative disables the cache. BlockSize is the cache granularity (default 16).
	CacheTokens int
	BlockSize   int

	// DefaultMaxTokens is the completion length when a request sets neither max_tokens
	// nor max_completion_tokens, and on the Messages wire, whose max_tokens every
	// request must send as a cap, the length up to that cap; default 32.
	DefaultMaxTokens int
	// Lengths, with a Median, draws heavy-tailed completion lengths instead.
	Lengths Lengths

	Routing   Routing
	Limits    Limits
	Models    []string // accepted model ids; empty accepts any and lists DefaultModel
	ToolRules []ToolRule
	Clock     Clock     // default RealClock{}
	Log       io.Writer // optional: every Record as one JSON line, when it is final
	// NoJSONSchema refuses json_schema response formats with a 400, as servers without
	// structured output do. A schema given in the prompt between <json-schema> tags is
	// still followed: the reply is an instance of it in a ```json block.
	NoJSONSchema bool
	// KeepRequests keeps each request's messages and tool names in its Record, so tests
	// can assert on what the engine received (off by default: benchmarks send many).
	KeepRequests bool
	// NoMaxCompletionTokens refuses max_completion_tokens with a 400, as servers and API
	// versions from before it do; max_tokens is still accepted.
	NoMaxCompletionTokens bool
}

// MaxCompletionTokens is the largest max_tokens the engine accepts (a larger one is a
// 400, as a provider refuses a cap beyond its model's output).
const MaxCompletionTokens = 1 << 20

// DefaultModel is the model id /v1/models lists when Config.Models is empty.
const DefaultModel = "luft-fake"

// Wire is the API a request came on: the engine serves one model behind three.
type Wire string

const (
	// WireChat is OpenAI's chat completions (POST /v1/chat/completions), and every
	// in-process Submit that names no other wire.
	WireChat Wire = "chat"
	// WireResponses is OpenAI's Responses API (POST /v1/responses).
	WireResponses Wire = "responses"
	// WireMessages is Anthropic's Messages API (POST /v1/messages). Its rate-limit
	// headers are Anthropic's, whatever the provider model (see WithWire).
	WireMessages Wire = "messages"
)

// Record is the engine's ground truth about one request: benchmark metrics come from
// here, not from the client's view. Times are on the engine's clock.
type Record struct {
	Seq int64 `json:"seq"` // arrival order, from 1
	// ID is the request's id on its wire: chatcmpl-fake…, resp_fake… (the response id a
	// later previous_response_id names) or msg_fake… (the Anthropic message id).
	ID      string `json:"id"`
	Wire    Wire   `json:"wire,omitempty"`
	Model   string `json:"model,omitempty"`
	Caller  string `json:"caller,omitempty"`
	Run     string `json:"run,omitempty"`
	Class   string `json:"class,omitempty"`
	Stream  bool   `json:"stream,omitempty"`
	Status  int    `json:"status"`          // 200, 400, 404, 429, 503, or 499 (client went away)
	Error   string `json:"error,omitempty"` // the error type: requests, tokens, invalid_request_error, ...
	Replica int    `json:"replica"`         // -1 when the request never reached one

	Arrival    time.Time `json:"arrival"`
	Start      time.Time `json:"start,omitzero"`       // a slot was assigned
	FirstToken time.Time `json:"first_token,omitzero"` // prefill finished
	Finish     time.Time `json:"finish"`

	QueueWait time.Duration `json:"queue_wait_ns"`
	Prefill   time.Duration `json:"prefill_ns"`
	Decode    time.Duration `json:"decode_ns"`

	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	OutputTokens int `json:"output_tokens"`
	// ChargedTokens is the request's token charge (prompt + max_tokens, or prompt +
	// output without max_tokens; with Limits.OutputAtEnd the output is added when the
	// request ends); for a refused request, only with Limits.ChargeRejectedTokens.
	ChargedTokens int `json:"charged_tokens"`
	ToolCalls     int `json:"tool_calls,omitempty"`

	// Messages and Tools are what the request sent, with Config.KeepRequests only, and
	// so are its max_tokens and max_completion_tokens (0: not sent).
	Messages            []Message `json:"messages,omitempty"`
	Tools               []string  `json:"tools,omitempty"`
	MaxTokens           int       `json:"max_tokens,omitempty"`
	MaxCompletionTokens int       `json:"max_completion_tokens,omitempty"`
	// FinishReason is the reply's finish_reason ("stop", "tool_calls", "length").
	FinishReason string `json:"finish_reason,omitempty"`

	RetryAfter time.Duration `json:"retry_after_ns,omitempty"` // on a 429
	// LimitedBy is, on a 429, the budget that refused it: requests, tokens, input_tokens
	// or output_tokens, whatever the error type the provider model sends; Quantum says
	// the bucket had room but its current short window (Limits.Quantum) did not.
	LimitedBy string `json:"limited_by,omitempty"`
	Quantum   bool   `json:"quantum,omitempty"`
}

// Result is the outcome of one in-process call: what the HTTP server would send.
type Result struct {
	Status   int
	Header   http.Header
	Response *ChatResponse  // when Status is 200
	Error    *ErrorResponse // otherwise
	Record   Record
}

// CallOption sets per-call facts that the HTTP server reads from the path and headers.
type CallOption func(*callOpts)

type callOpts struct {
	replica    int // -1: route
	caller     string
	run        string
	class      string
	wire       Wire
	firstToken func(*Result)
}

// OnReplica sends the call to replica i (from 0) instead of routing it.
func OnReplica(i int) CallOption { return func(o *callOpts) { o.replica = i } }

// WithCaller records the caller (fairness identity) in the log.
func WithCaller(s string) CallOption { return func(o *callOpts) { o.caller = s } }

// WithRun records the run id in the log.
func WithRun(s string) CallOption { return func(o *callOpts) { o.run = s } }

// WithClass records the scheduling class in the log.
func WithClass(s string) CallOption { return func(o *callOpts) { o.class = s } }

// WithWire records the wire the request came on (WireChat when not given). With
// WireMessages the engine's rate-limit headers are Anthropic's: for ProviderAnthropic
// its own, for the other provider models the request and token buckets as
// anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset} (exact counts, RFC 3339
// resets, as Limits.Anthropic sends them), never x-ratelimit-*; a 429 carries
// retry-after in whole seconds only. ProviderSilent stays silent on every wire.
func WithWire(w Wire) CallOption { return func(o *callOpts) { o.wire = w } }

// OnFirstToken calls f when prefill ends, before decoding (the moment a streaming server
// sends its first chunk), with the status, headers and the record so far; Response is nil.
func OnFirstToken(f func(*Result)) CallOption { return func(o *callOpts) { o.firstToken = f } }

// Stats is a snapshot of the engine's load.
type Stats struct {
	Replicas  []ReplicaStats
	Requests  int // arrived
	Completed int // answered 200
	Rejected  int // answered 429
}

// ReplicaStats is one replica's load.
type ReplicaStats struct {
	Busy         int // running requests
	Queued       int
	CachedBlocks int
}

// Engine is the modelled OpenAI-compatible engine. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	clock Clock

	mu        sync.Mutex
	replicas  []*replica
	rr        int
	limits    *limiter
	seq       int64
	log       []Record
	completed int
	rejected  int
	logErr    error
}

type replica struct {
	idx   int
	busy  int
	queue []*job
	cache *prefixCache
}

type jobState int

const (
	queued jobState = iota
	running
	finished
)

type job struct {
	req     *ChatRequest
	opts    callOpts
	prompt  prompt
	answer  answer
	replica *replica
	state   jobState
	timer   Timer
	bill    billing
	stop    func(time.Time) int // ends the billing of a streamed output; nil when none runs
	decode  time.Duration
	header  http.Header
	rec     Record
	done    func(*Result)
}

// NewEngine builds an engine; invalid sizes are raised to their minimum.
func NewEngine(cfg Config) *Engine {
	cfg.Replicas = max(cfg.Replicas, 1)
	cfg.Slots = max(cfg.Slots, 1)
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.CacheTokens == 0 {
		cfg.CacheTokens = 128 * 1024
	}
	if cfg.DefaultMaxTokens <= 0 {
		cfg.DefaultMaxTokens = 32
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Limits.Period <= 0 {
		cfg.Limits.Period = time.Minute
	}
	e := &Engine{cfg: cfg, clock: cfg.Clock, limits: newLimiter(cfg.Limits, cfg.Clock.Now())}
	for i := range cfg.Replicas {
		e.replicas = append(e.replicas, &replica{idx: i, cache: newPrefixCache(cfg.CacheTokens / cfg.BlockSize)})
	}
	return e
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Models returns the model ids the engine serves.
func (e *Engine) Models() []string {
	if len(e.cfg.Models) == 0 {
		return []string{DefaultModel}
	}
	return slices.Clone(e.cfg.Models)
}

// Log returns the records of every finished request (answered, refused or abandoned),
// in arrival order.
func (e *Engine) Log() []Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := slices.Clone(e.log)
	slices.SortFunc(out, func(a, b Record) int { return int(a.Seq - b.Seq) })
	return out
}

// LogErr returns the first error writing Config.Log, if any.
func (e *Engine) LogErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logErr
}

// Stats returns a snapshot of the engine's load.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{Requests: int(e.seq), Completed: e.completed, Rejected: e.rejected}
	for _, r := range e.replicas {
		s.Replicas = append(s.Replicas, ReplicaStats{Busy: r.busy, Queued: len(r.queue), CachedBlocks: r.cache.len()})
	}
	return s
}

// Do submits the request and waits for its result. With a VirtualClock another
// goroutine must advance the clock. When ctx ends first the request is abandoned (its
// slot or queue place is freed, the log records status 499) and ctx's error returned.
func (e *Engine) Do(ctx context.Context, req *ChatRequest, opts ...CallOption) (*Result, error) {
	ch := make(chan *Result, 1)
	cancel := e.Submit(req, func(r *Result) { ch <- r }, opts...)
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

// Submit hands the request to the engine and returns at once; done receives the result
// exactly once: before Submit returns when the request is refused (400, 429, 503), else
// from the clock's timer when it finishes (on a VirtualClock, inside Step or Advance).
// done and OnFirstToken run without engine locks held, so they may submit again. The
// returned cancel abandons the request if it has not finished.
func (e *Engine) Submit(req *ChatRequest, done func(*Result), opts ...CallOption) (cancel func()) {
	o := callOpts{replica: -1, wire: WireChat}
	for _, f := range opts {
		f(&o)
	}
	e.mu.Lock()
	now := e.clock.Now()
	e.seq++
	j := &job{req: req, opts: o, done: done, header: http.Header{}}
	j.rec = Record{
		Seq: e.seq, ID: recordID(o.wire, e.seq), Wire: o.wire, Model: req.Model,
		Caller: o.caller, Run: o.run, Class: o.class, Stream: req.Stream,
		Replica: -1, Arrival: now,
	}
	j.header.Set("x-request-id", j.rec.ID)
	if e.cfg.KeepRequests {
		j.rec.Messages = append([]Message(nil), req.Messages...)
		for _, t := range req.Tools {
			j.rec.Tools = append(j.rec.Tools, t.Function.Name)
		}
		if req.MaxTokens != nil {
			j.rec.MaxTokens = *req.MaxTokens
		}
		if req.MaxCompletionTokens != nil {
			j.rec.MaxCompletionTokens = *req.MaxCompletionTokens
		}
	}

	if status, apiErr := e.validate(req, o); apiErr != nil {
		r := e.refuseLocked(j, now, status, apiErr)
		e.mu.Unlock()
		done(r)
		return func() {}
	}

	j.prompt = renderPrompt(req, e.cfg.BlockSize)
	maxTokens := e.cfg.DefaultMaxTokens
	explicit := false
	if req.MaxCompletionTokens != nil {
		maxTokens, explicit = *req.MaxCompletionTokens, true
	} else if req.MaxTokens != nil {
		maxTokens, explicit = *req.MaxTokens, true
	}
	out, capped := maxTokens, false
	switch {
	case e.cfg.Lengths.Median > 0:
		out = e.cfg.Lengths.draw(seedOf(req))
		if explicit && out > maxTokens {
			out, capped = maxTokens, true
		}
	case req.maxIsCap:
		out = e.cfg.DefaultMaxTokens
		if out > maxTokens {
			out, capped = maxTokens, true
		}
	}
	j.answer = decide(req, e.cfg.ToolRules, out)
	if capped && j.answer.finish == "stop" && j.answer.tokens == out {
		j.answer.finish = "length" // the drawn answer ran into the cap
	}
	if explicit && j.answer.content != "" && j.answer.tokens > maxTokens {
		// A scripted or structured reply longer than the cap is cut there, as a model's
		// would be.
		j.answer.content, j.answer.tokens, j.answer.finish = cutTokens(j.answer.content, maxTokens), maxTokens, "length"
	}
	j.rec.FinishReason = j.answer.finish
	j.rec.PromptTokens = j.prompt.tokens
	j.rec.OutputTokens = j.answer.tokens
	j.rec.ToolCalls = len(j.answer.toolCalls)
	// How the request is charged depends on the provider model (providers.go).
	bill := e.bill(j.prompt.tokens, j.answer.tokens, maxTokens, explicit)
	j.bill = bill

	if rej := e.limits.admit(now, bill.demand); rej != nil {
		if e.cfg.Limits.ChargeRejectedTokens {
			j.rec.ChargedTokens = bill.charged
		}
		j.rec.RetryAfter = rej.retryAfter
		j.rec.LimitedBy, j.rec.Quantum = rej.dim, rej.quantum
		e.rejected++
		r := e.refuseLocked(j, now, http.StatusTooManyRequests, e.rateLimitError(req.Model, rej))
		e.limits.retryHeaders(r.Header, rej, o.wire)
		e.mu.Unlock()
		done(r)
		return func() {}
	}
	j.rec.ChargedTokens = bill.charged
	e.limits.headers(j.header, now, o.wire)

	r := e.route(o)
	j.replica = r
	j.rec.Replica = r.idx
	j.header.Set("x-fake-replica", strconv.Itoa(r.idx))
	if r.busy < e.cfg.Slots {
		e.startLocked(j, now)
	} else if e.cfg.MaxWaiting > 0 && len(r.queue) >= e.cfg.MaxWaiting {
		res := e.refuseLocked(j, now, http.StatusServiceUnavailable, &APIError{
			Message: fmt.Sprintf("replica %d: %d requests waiting; try again later", r.idx, len(r.queue)),
			Type:    "server_error", Code: strptr("engine_overloaded"),
		})
		e.mu.Unlock()
		done(res)
		return func() {}
	} else {
		r.queue = append(r.queue, j)
	}
	e.mu.Unlock()
	return func() { e.abandon(j) }
}

// recordID is a request's id in its wire's style.
func recordID(w Wire, seq int64) string {
	switch w {
	case WireResponses:
		return fmt.Sprintf("resp_fake%08d", seq)
	case WireMessages:
		return fmt.Sprintf("msg_fake%08d", seq)
	}
	return fmt.Sprintf("chatcmpl-fake%08d", seq)
}

func (e *Engine) validate(req *ChatRequest, o callOpts) (int, *APIError) {
	bad := func(param, format string, args ...any) (int, *APIError) {
		var p *string
		if param != "" {
			p = strptr(param)
		}
		return http.StatusBadRequest, &APIError{Message: fmt.Sprintf(format, args...), Type: "invalid_request_error", Param: p}
	}
	if req.Model == "" {
		return bad("model", "you must provide a model parameter")
	}
	if len(e.cfg.Models) > 0 && !slices.Contains(e.cfg.Models, req.Model) {
		return http.StatusNotFound, &APIError{
			Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", req.Model),
			Type:    "invalid_request_error", Param: strptr("model"), Code: strptr("model_not_found"),
		}
	}
	if len(req.Messages) == 0 {
		return bad("messages", "messages: must contain at least one message")
	}
	called := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user":
		case "assistant":
			for k, c := range m.ToolCalls {
				if c.Function.missingArguments {
					return bad(fmt.Sprintf("messages.[%d].tool_calls.[%d].function.arguments", i, k),
						"Missing required parameter: 'messages[%d].tool_calls[%d].function.arguments'.", i, k)
				}
				called[c.ID] = true
			}
		case "tool":
			if m.ToolCallID == "" || !called[m.ToolCallID] {
				return bad(fmt.Sprintf("messages.[%d].tool_call_id", i),
					"messages[%d]: a message with role 'tool' must answer a preceding assistant tool call (tool_call_id %q)", i, m.ToolCallID)
			}
		default:
			return bad(fmt.Sprintf("messages.[%d].role", i), "messages[%d].role: %q is not one of system, developer, user, assistant, tool", i, m.Role)
		}
	}
	if req.MaxCompletionTokens != nil && e.cfg.NoMaxCompletionTokens {
		return bad("max_completion_tokens", "Unrecognized request argument supplied: max_completion_tokens")
	}
	for _, p := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if p != nil && *p < 1 {
			return bad("max_tokens", "max_tokens: %d is less than the minimum of 1", *p)
		}
		if p != nil && *p > MaxCompletionTokens {
			return bad("max_tokens", "max_tokens is too large: %d. This model supports at most %d completion tokens", *p, MaxCompletionTokens)
		}
	}
	if req.N != nil && *req.N != 1 {
		return bad("n", "n: this engine returns exactly one choice (got %d)", *req.N)
	}
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return bad(fmt.Sprintf("tools.[%d]", i), "tools[%d]: want type \"function\" with a function name", i)
		}
	}
	if _, _, err := toolChoice(req.ToolChoice); err != nil {
		return bad("tool_choice", "%v", err)
	}
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text", "json_object":
		case "json_schema":
			if e.cfg.NoJSONSchema {
				return bad("response_format.type", "response_format: json_schema is not supported by this server (use json_object or instructions)")
			}
			if rf.JSONSchema == nil || rf.JSONSchema.Name == "" {
				return bad("response_format.json_schema", "response_format: json_schema needs a name and a schema")
			}
		default:
			return bad("response_format.type", "response_format.type: %q is not one of text, json_object, json_schema", rf.Type)
		}
	}
	if o.replica >= len(e.replicas) {
		return bad("", "replica %d does not exist (the engine has %d)", o.replica, len(e.replicas))
	}
	return 0, nil
}

func rateLimitError(model string, rej *rejection) *APIError {
	unit := "requests per min (RPM)"
	if rej.dim == "tokens" {
		unit = "tokens per min (TPM)"
	}
	msg := fmt.Sprintf("Rate limit reached for %s on %s: Limit %d, Used %d, Requested %d.",
		model, unit, rej.limit, rej.used, rej.requested)
	if rej.never {
		msg = fmt.Sprintf("Request too large for %s on %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.",
			model, unit, rej.limit, rej.requested)
	} else {
		msg += fmt.Sprintf(" Please try again in %s.", FormatResetDuration(rej.retryAfter))
	}
	return &APIError{Message: msg, Type: rej.dim, Code: strptr("rate_limit_exceeded")}
}

// refuseLocked finishes a request that never reached a slot. Every refusal still carries
// the rate-limit headers, as real providers send them.
func (e *Engine) refuseLocked(j *job, now time.Time, status int, apiErr *APIError) *Result {
	j.state = finished
	j.rec.Status = status
	j.rec.Error = apiErr.Type
	j.rec.Finish = now
	h := j.header
	e.limits.headers(h, now, j.opts.wire)
	e.recordLocked(j.rec)
	return &Result{Status: status, Header: h, Error: &ErrorResponse{Error: *apiErr}, Record: j.rec}
}

func (e *Engine) route(o callOpts) *replica {
	if o.replica >= 0 {
		return e.replicas[o.replica]
	}
	if e.cfg.Routing == RoundRobin {
		r := e.replicas[e.rr%len(e.replicas)]
		e.rr++
		return r
	}
	best := e.replicas[0]
	for _, r := range e.replicas[1:] {
		if r.busy+len(r.queue) < best.busy+len(best.queue) {
			best = r
		}
	}
	return best
}

// startLocked gives the job a slot: the prefix cache is consulted now, prefill runs,
// then decode.
func (e *Engine) startLocked(j *job, now time.Time) {
	r := j.replica
	r.busy++
	j.state = running
	j.rec.Start = now
	j.rec.QueueWait = now.Sub(j.rec.Arrival)

	hit := r.cache.lookup(j.prompt.blocks)
	if hit > 0 && hit*e.cfg.BlockSize >= j.prompt.tokens {
		hit-- // an engine always computes at least the last prompt block
	}
	cached := hit * e.cfg.BlockSize
	uncached := j.prompt.tokens - cached
	prefill := e.cfg.PrefillOverhead + time.Duration(uncached)*e.cfg.PrefillPerToken +
		time.Duration(cached)*e.cfg.CachedPrefillPerToken
	factor := 1.0
	if e.cfg.LoadFactor > 1 && e.cfg.Slots > 1 {
		factor += (e.cfg.LoadFactor - 1) * float64(r.busy-1) / float64(e.cfg.Slots-1)
	}
	j.decode = time.Duration(float64(time.Duration(j.answer.tokens)*e.cfg.DecodePerToken) * factor)
	j.rec.CachedTokens = cached
	j.rec.Prefill = prefill
	j.rec.Decode = j.decode
	j.timer = e.clock.AfterFunc(prefill, func() { e.prefilled(j) })
}

// prefilled runs when prefill ends: the prompt's blocks enter the cache and decoding
// starts.
func (e *Engine) prefilled(j *job) {
	e.mu.Lock()
	if j.state != running {
		e.mu.Unlock()
		return
	}
	now := e.clock.Now()
	j.replica.cache.insert(j.prompt.blocks)
	j.rec.FirstToken = now
	j.timer = e.clock.AfterFunc(j.decode, func() { e.finish(j) })
	if j.bill.stream {
		j.stop = e.limits.streamOutput(j.answer.tokens, now, now.Add(j.decode))
	}
	first := j.opts.firstToken
	partial := &Result{Status: http.StatusOK, Header: j.header.Clone(), Record: j.rec}
	e.mu.Unlock()
	if first != nil {
		first(partial)
	}
}

func (e *Engine) finish(j *job) {
	e.mu.Lock()
	if j.state != running {
		e.mu.Unlock()
		return
	}
	now := e.clock.Now()
	j.state = finished
	j.rec.Status = http.StatusOK
	j.rec.Finish = now
	switch {
	case j.bill.tail > 0:
		e.limits.charge(now, j.bill.tail)
		j.rec.ChargedTokens += j.bill.tail
		e.limits.headers(j.header, now, j.opts.wire)
	case j.bill.stream:
		j.rec.ChargedTokens += j.stop(now)
		j.stop = nil
	case j.bill.refund > 0:
		e.limits.refundOutput(now, j.bill.refund)
		j.rec.ChargedTokens -= j.bill.refund
	}
	e.completed++
	e.recordLocked(j.rec)
	e.releaseLocked(j.replica, now)
	res := &Result{Status: http.StatusOK, Header: j.header, Response: e.response(j), Record: j.rec}
	e.mu.Unlock()
	j.done(res)
}

// releaseLocked frees a slot of r and starts the next queued request, if any.
func (e *Engine) releaseLocked(r *replica, now time.Time) {
	r.busy--
	if len(r.queue) > 0 && r.busy < e.cfg.Slots {
		next := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		e.startLocked(next, now)
	}
}

// abandon ends a request whose client went away: status 499, slot or queue place freed.
func (e *Engine) abandon(j *job) {
	e.mu.Lock()
	now := e.clock.Now()
	switch j.state {
	case finished:
		e.mu.Unlock()
		return
	case queued:
		r := j.replica
		if i := slices.Index(r.queue, j); i >= 0 {
			r.queue = slices.Delete(r.queue, i, i+1)
		}
	case running:
		j.timer.Stop()
		if j.stop != nil {
			// A provider bills the output generated before the client went away.
			j.rec.ChargedTokens += j.stop(now)
			j.stop = nil
		}
		e.releaseLocked(j.replica, now)
	}
	j.state = finished
	j.rec.Status = 499
	j.rec.Error = "cancelled"
	j.rec.Finish = now
	e.recordLocked(j.rec)
	res := &Result{Status: 499, Header: j.header, Record: j.rec,
		Error: &ErrorResponse{Error: APIError{Message: "the client abandoned the request", Type: "cancelled"}}}
	e.mu.Unlock()
	j.done(res)
}

func (e *Engine) recordLocked(r Record) {
	e.log = append(e.log, r)
	if e.cfg.Log == nil || e.logErr != nil {
		return
	}
	b, err := json.Marshal(r)
	if err == nil {
		_, err = e.cfg.Log.Write(append(b, '\n'))
	}
	if err != nil {
		e.logErr = err
	}
}

func (e *Engine) response(j *job) *ChatResponse {
	msg := Message{Role: "assistant", Content: Content(j.answer.content), ToolCalls: j.answer.toolCalls}
	return &ChatResponse{
		ID:                j.rec.ID,
		Object:            "chat.completion",
		Created:           j.rec.Arrival.Unix(),
		Model:             j.req.Model,
		SystemFingerprint: "fp_luft_fake",
		Choices:           []Choice{{Index: 0, Message: msg, FinishReason: j.answer.finish, Logprobs: json.RawMessage("null")}},
		Usage:             e.usage(j),
	}
}

func (e *Engine) usage(j *job) *Usage {
	return &Usage{
		PromptTokens:        j.rec.PromptTokens,
		CompletionTokens:    j.rec.OutputTokens,
		TotalTokens:         j.rec.PromptTokens + j.rec.OutputTokens,
		PromptTokensDetails: &PromptTokensDetails{CachedTokens: j.rec.CachedTokens},
	}
}
