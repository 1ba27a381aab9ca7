package luft

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
)

// Backend is a model a custom backend puts behind agent{}: one call of Complete is one
// model turn. Register it with WithBackend; scripts reach it with agent{backend="NAME"},
// or by default when Options.Backend names it.
//
// Every call of Complete is admitted by the Engine's scheduler first, like a turn of a
// built-in backend: at most Options.Concurrency (or the config's slots for the lane) run
// at once, fairly shared across runs. Complete must honour ctx: when it is done, return
// promptly with an error. An error fails the agent call (the runtime retries it as the
// call's retries say); a panic is turned into such an error.
//
// A finished call is journaled, so a resumed run does not call Complete again for it.
// Custom backends run no tool loop: an agent{tools=...} on one gets no tools.
type Backend interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// BackendFunc is a function that is a Backend.
type BackendFunc func(ctx context.Context, req Request) (Response, error)

// Complete calls f.
func (f BackendFunc) Complete(ctx context.Context, req Request) (Response, error) { return f(ctx, req) }

// Request is one model turn as the script asked for it.
type Request struct {
	Name   string // the agent's name; "" when the script gave none
	System string
	Prompt string
	Model  string // "" when neither the script nor Options/Script name one
	// Schema is the decoded JSON Schema the reply must match, when the agent asked for
	// structured output: reply with JSON text; the runtime checks it against the schema
	// and asks again (a new turn) when it does not match.
	Schema      any
	MaxTokens   int      // 0: no cap
	Temperature *float64 // nil: the model's default
	SessionID   string   // the conversation the script continues; "" for none
}

// Response is the reply to one turn.
type Response struct {
	Text  string
	Usage Usage
	// Cost in USD; 0 when unknown or free.
	Cost float64
	// Model that answered; "" = the request's.
	Model string
}

// Usage counts tokens.
type Usage struct {
	Input  int `json:"input"`
	Output int `json:"output"`
	Cached int `json:"cached"`
}

// Total is input plus output tokens.
func (u Usage) Total() int { return u.Input + u.Output }

// customBackend adapts a Backend onto adapters.Backend: its one turn goes through
// call.Do, so the scheduler admits it.
type customBackend struct {
	id string
	b  Backend
}

func (c *customBackend) ID() string { return c.id }

func (c *customBackend) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	in := Request{Name: req.Name, System: req.System, Prompt: req.Prompt, Model: req.Model, Schema: req.Schema,
		MaxTokens: req.MaxTokens, Temperature: req.Temperature, SessionID: req.SessionID}
	var resp Response
	cost := adapters.TurnCost{Input: adapters.EstimateTokens(req.System) + adapters.EstimateTokens(req.Prompt), MaxOutput: req.MaxTokens}
	err := call.Do(ctx, cost, func(ctx context.Context) adapters.TurnReport {
		var err error
		resp, err = c.complete(ctx, in)
		return adapters.TurnReport{Usage: agent.Usage(resp.Usage), Err: err}
	})
	model := resp.Model
	if model == "" {
		model = req.Model
	}
	if err != nil {
		return agent.Result{Status: agent.StatusError, Error: err.Error(), Usage: agent.Usage(resp.Usage),
			Attempts: 1, Backend: c.id, Model: model}, err
	}
	res := agent.Result{Status: agent.StatusOK, Output: resp.Text, Text: resp.Text, Usage: agent.Usage(resp.Usage),
		SessionID: req.SessionID, Attempts: 1, Backend: c.id, Model: model}
	if resp.Cost > 0 {
		res.Cost = &resp.Cost
	}
	return res, nil
}

// complete calls the user's backend, turning a panic into the call's error: a bug in
// it fails the agent call, not the process.
func (c *customBackend) complete(ctx context.Context, in Request) (resp Response, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = Response{}, fmt.Errorf("backend %s panicked: %v", c.id, r)
		}
	}()
	resp, err = c.b.Complete(ctx, in)
	if err == nil && ctx.Err() != nil {
		// A reply that arrived after the call was cancelled is not used.
		err = context.Cause(ctx)
	}
	if resp.Usage.Input < 0 || resp.Usage.Output < 0 || resp.Usage.Cached < 0 || !(resp.Cost >= 0) || math.IsInf(resp.Cost, 1) {
		return Response{}, fmt.Errorf("backend %s: negative or invalid usage or cost in its response (%+v, cost %g)", c.id, resp.Usage, resp.Cost)
	}
	return resp, err
}

// checkBackendName refuses names a script or a lane cannot carry.
func checkBackendName(name string) error {
	switch {
	case name == "":
		return errors.New("the name is empty")
	case len(name) > 64:
		return fmt.Errorf("the name %.20q... is longer than 64 bytes", name)
	case strings.ContainsAny(name, "/ \t\r\n\"'\\"):
		return fmt.Errorf("the name %q contains a slash, a quote or a space", name)
	}
	return nil
}
