package adapters

import (
	"context"
	"net/http"

	"github.com/luft-run/luft/agent"
)

// Backend runs one agent call to completion. Implementations must honour ctx: when it is
// done they stop and return ctx.Err() (or an error wrapping it) promptly.
//
// A returned error means the call could not be carried out (a transport failure, a refused
// request, a cancelled context); a Result whose Status is not ok means the agent ran and
// reported a failure. The runtime treats both as a failed call and may retry.
type Backend interface {
	// ID is the registry id the backend is known by ("mock", "mockfile", "openai", "acp:claude").
	ID() string
	// Run carries out req. Every model request it makes goes through call.Do, which admits
	// it through the scheduler (SPEC §7: every turn, not just every call).
	Run(ctx context.Context, req agent.Request, call Call) (agent.Result, error)
}

// Call is what the runtime hands a backend besides the request: the admission of each
// turn and a sink for progress. The zero value sends turns straight away and drops
// progress, which is what tests and tools that use a backend on its own want.
type Call struct {
	// Turn admits one model turn; nil sends at once (see Do).
	Turn TurnFunc
	// Progress receives streamed updates; nil drops them.
	Progress Progress
	// Key identifies the call within its run (run id and call key), stable across resume:
	// a backend that opens sessions derives new session ids from it, so two calls with the
	// same inputs do not share one. "" outside a run.
	Key string
	// Transcript is the conversation of the request's session_id, as an earlier call of
	// the run returned it in Result.Transcript; nil when the request has no session_id or
	// the run knows no such session.
	Transcript []agent.Message
	// Tool runs each tool call the model asks for; nil runs it at once (see RunTool).
	Tool ToolFunc
}

// ToolCall names one tool call a model asked for within a call.
type ToolCall struct {
	Turn      int    // the model turn that asked for it, from 1 within Run's conversation
	ID        string // the model's tool call id
	Name      string
	Arguments string // as the model sent them
	// Ask says the tool runs only with a person's yes (tools.NeedsApproval): the
	// ToolFunc asks, then runs it with tools.Approved, or answers tools.DeclinedText.
	Ask bool
}

// ToolFunc runs one tool call through run at most once per agent call: the runtime
// journals the output run returns and, when the same call asks again (a retry, or a
// resumed run re-running the call, whose model asks for the same tool call at the same
// turn), returns the recorded output with replayed set instead of running the tool —
// so write_file and run_command have their effect once. run returns the text the model
// gets; its error fails the agent call (an *tools.ApprovalError) and is not recorded,
// nor is an output produced after ctx ended. An error of the journal itself fails the
// agent call too.
type ToolFunc func(ctx context.Context, tc ToolCall, run func(context.Context) (string, error)) (out string, replayed bool, err error)

// RunTool runs tc through c.Tool, or at once when there is none.
func (c Call) RunTool(ctx context.Context, tc ToolCall, run func(context.Context) (string, error)) (string, bool, error) {
	if c.Tool == nil {
		out, err := run(ctx)
		return out, false, err
	}
	return c.Tool(ctx, tc, run)
}

// TurnFunc admits one model turn and runs send once it is admitted. When the scheduler
// takes the turn back after a failure it honours (a 429 with its wait, a 5xx with backoff),
// send runs again after the new admission. It returns the error of the last send, or the
// scheduler's own (a suspension, a refusal, the context's end) when the turn was not run.
//
// The first turn of a call ranks as the scheduler decides; every later turn of the same
// call (after a tool result) is a continuation.
type TurnFunc func(ctx context.Context, cost TurnCost, send func(ctx context.Context) TurnReport) error

// TurnCost is what a turn is expected to use, for the scheduler's budgets.
type TurnCost struct {
	Input     int // estimated prompt tokens (the whole conversation sent)
	MaxOutput int // the turn's output cap; 0 when the request sets none
}

// TurnReport is how one send went, for the scheduler: the usage the endpoint reported,
// its response headers (rate-limit telemetry, retry-after) and the send's error. An error
// carrying an HTTP status (StatusCode() int, Header() http.Header) is classified by it.
type TurnReport struct {
	Usage  agent.Usage
	Header http.Header
	Err    error
}

// Do admits and sends one turn through c.Turn, or sends it at once when there is none.
func (c Call) Do(ctx context.Context, cost TurnCost, send func(ctx context.Context) TurnReport) error {
	if c.Turn == nil {
		return send(ctx).Err
	}
	return c.Turn(ctx, cost, send)
}

// Report sends u to c.Progress when there is one.
func (c Call) Report(u Update) {
	if c.Progress != nil {
		c.Progress(u)
	}
}

// Progress receives streaming updates of a running call. It is called from the backend's
// goroutine and must not block for long.
type Progress func(Update)

// Update is one piece of streamed progress.
type Update struct {
	Kind string // "text" (a chunk of the reply), "message" (a whole message), "tool_call", "tool_result", "edit", "thought", "notice" (the agent about itself, not part of the reply)
	Text string
}

// EstimateTokens is a rough token count of text (four bytes a token), for turn costs
// before the endpoint has counted.
func EstimateTokens(text string) int { return (len(text) + 3) / 4 }

// Route is where the scheduler sent one send of a turn: a replica of the lane's
// endpoint, or, while the lane's circuit is open, the backend of its fallback lane.
type Route struct {
	Replica int // 0: the backend's own endpoint; i: its i-th configured replica
	// Fallback, when set, is the backend of the lane that takes this turn; a backend
	// that can speak for it (the same protocol) sends there with its model.
	Fallback Backend
}

type sendKey struct{}

// sendInfo is what the runtime tells one send through its ctx.
type sendInfo struct {
	route   Route
	observe func(http.Header)
}

// WithSend returns ctx carrying, for the send function of a turn, its route and where
// the headers of a response that is still coming go (observe may be nil).
func WithSend(ctx context.Context, r Route, observe func(http.Header)) context.Context {
	return context.WithValue(ctx, sendKey{}, sendInfo{route: r, observe: observe})
}

// WithRoute returns ctx carrying r, for the send function of a turn.
func WithRoute(ctx context.Context, r Route) context.Context { return WithSend(ctx, r, nil) }

// RouteOf returns the route a send's ctx carries (the zero Route when none).
func RouteOf(ctx context.Context) Route {
	si, _ := ctx.Value(sendKey{}).(sendInfo)
	return si.route
}

// ObserveHeaders hands the scheduler the headers of a response whose body is still
// coming (a stream's, at its start), so that it learns the endpoint's rate limits
// without waiting for the turn's end. Backends that stream call it once per send.
func ObserveHeaders(ctx context.Context, h http.Header) {
	if si, _ := ctx.Value(sendKey{}).(sendInfo); si.observe != nil && h != nil {
		si.observe(h)
	}
}
