package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/schema"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
)

// maxSchemaRetries is how often an agent is re-prompted when its output does not match
// its schema (SPEC §2.2).
const maxSchemaRetries = 3

var errCallTimeout = errors.New("agent call timed out")

// host is the lua.Host of one run: budgets, backends, the scheduler and events.
type host struct {
	e     *Engine
	run   *Run
	ctx   context.Context
	start time.Time

	mu      sync.Mutex
	usage   agent.Usage
	cost    float64
	counts  Counts
	started int
	budget  lua.Budget
	timer   *time.Timer
	calls   sync.WaitGroup // call goroutines still running
}

var _ lua.Host = (*host)(nil)

func (h *host) emit(typ string, data map[string]any) {
	h.run.bus.emit(event.New(typ, data))
}

// Emit implements lua.Host.
func (h *host) Emit(ev event.Event) { h.run.bus.emit(ev) }

// Value implements lua.Host. Nothing is journaled yet, so every value is fresh.
func (h *host) Value(_ lua.Call, fresh func() any) (any, error) { return fresh(), nil }

// LoadWorkflow implements lua.Host.
func (h *host) LoadWorkflow(_ lua.Call, path string) ([]byte, error) {
	b, err := h.e.opts.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	return b, nil
}

// SetBudget implements lua.Host.
func (h *host) SetBudget(b lua.Budget) error {
	h.mu.Lock()
	h.budget = b
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	if b.TimeMS > 0 {
		left := time.Duration(b.TimeMS)*time.Millisecond - h.e.opts.Now().Sub(h.start)
		h.timer = time.AfterFunc(max(left, 0), func() { h.run.cancel(ErrTimeBudget) })
	}
	h.mu.Unlock()
	h.emit(event.Budget, map[string]any{"time_ms": b.TimeMS, "agents": b.Agents, "tokens": b.Tokens, "usd": b.USD})
	return nil
}

func (h *host) stopTimer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
	}
}

func (h *host) result() Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Result{Usage: h.usage, Cost: h.cost, Agents: h.counts}
}

// checkBudget refuses a call that would exceed the run's budget. The refusal ends the run.
func (h *host) checkBudget(c lua.Call) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.budget
	var limit string
	switch {
	case b.Agents > 0 && h.started >= b.Agents:
		limit = fmt.Sprintf("agents=%d (%d calls made)", b.Agents, h.started)
	case b.Tokens > 0 && h.usage.Total() >= b.Tokens:
		limit = fmt.Sprintf("tokens=%d (%d used)", b.Tokens, h.usage.Total())
	case b.USD > 0 && h.cost >= b.USD:
		limit = fmt.Sprintf("usd=%g ($%.4f spent)", b.USD, h.cost)
	}
	if limit != "" {
		return &lua.ScriptError{Kind: lua.KindLimit, Where: c.Where,
			Msg: fmt.Sprintf("budget exceeded: %s; call %s refused (raise the limit in budget{})", limit, c.Key)}
	}
	h.started++
	return nil
}

// Agent implements lua.Host: it starts the call on its own goroutine.
func (h *host) Agent(ctx context.Context, c lua.Call, req agent.Request, complete func(agent.Result, error)) (agent.Result, bool, error) {
	if err := h.checkBudget(c); err != nil {
		return agent.Result{}, false, err
	}
	if req.Backend == "" {
		req.Backend = h.run.spec.Backend
	}
	if req.Model == "" {
		req.Model = h.run.spec.Model
	}
	if req.Class == "" {
		req.Class = h.run.spec.Class
	}
	b, err := h.e.opts.Backends.Get(req.Backend)
	if err == nil {
		req.Backend = b.ID()
	}
	h.emit(event.AgentStarted, map[string]any{"call_key": c.Key, "name": req.Name, "phase_id": c.PhaseID,
		"backend": req.Backend, "model": req.Model, "class": string(req.Class)})
	if err != nil {
		h.done(c, req, agent.Result{Status: agent.StatusError, Backend: req.Backend, Model: req.Model}, err, 0)
		return agent.Result{}, false, err
	}
	h.calls.Add(1)
	go func() {
		defer h.calls.Done()
		start := h.e.opts.Now()
		res, err := h.call(ctx, c, req, b)
		h.done(c, req, res, err, h.e.opts.Now().Sub(start))
		complete(res, err)
	}()
	return agent.Result{}, false, nil
}

// done accounts a finished call and records agent_done before the script sees the result.
func (h *host) done(c lua.Call, req agent.Request, res agent.Result, err error, elapsed time.Duration) {
	status := res.Status
	if status == "" {
		status = agent.StatusError
	}
	msg := res.Error
	if err != nil {
		msg = err.Error()
	}
	h.mu.Lock()
	h.usage = h.usage.Add(res.Usage)
	if res.Cost != nil {
		h.cost += *res.Cost
	}
	switch {
	case res.Cached:
		h.counts.Cached++
	case err == nil && res.OK():
		h.counts.OK++
	default:
		h.counts.Failed++
	}
	h.mu.Unlock()
	data := map[string]any{"call_key": c.Key, "name": req.Name, "status": string(status), "cached": res.Cached,
		"tokens": res.Usage.Total(), "usage": res.Usage, "elapsed_ms": elapsed.Milliseconds(),
		"attempts": res.Attempts, "backend": req.Backend, "model": res.Model}
	if res.Cost != nil {
		data["cost"] = *res.Cost
	}
	if msg != "" {
		data["error"] = msg
	}
	h.emit(event.AgentDone, data)
}

// call runs one agent call with its retries.
func (h *host) call(ctx context.Context, c lua.Call, req agent.Request, b adapters.Backend) (agent.Result, error) {
	var sch *schema.Schema
	if req.Schema != nil {
		s, err := schema.Compile(req.Schema)
		if err != nil {
			return agent.Result{Status: agent.StatusError, Backend: req.Backend, Model: req.Model, Attempts: 1},
				fmt.Errorf("schema is not a valid JSON Schema: %w", err)
		}
		sch = s
	}
	var (
		res   agent.Result
		err   error
		total agent.Usage
		cost  float64
		paid  bool
	)
	attempts := 0
	for attempt := 1; attempt <= 1+req.Retries; attempt++ {
		if attempt > 1 {
			wait := h.e.opts.Backoff(attempt)
			reason := res.Error
			if err != nil {
				reason = err.Error()
			}
			h.emit(event.AgentRetry, map[string]any{"call_key": c.Key, "attempt": attempt, "reason": reason, "wait_ms": wait.Milliseconds()})
			if !sleepCtx(ctx, wait) {
				break
			}
		}
		attempts = attempt
		res, err = h.structured(ctx, c, req, b, sch, attempt > 1)
		total = total.Add(res.Usage)
		if res.Cost != nil {
			cost += *res.Cost
			paid = true
		}
		if (err == nil && res.OK()) || ctx.Err() != nil || res.Status == agent.StatusTimedOut && req.Retries == 0 {
			break
		}
	}
	res.Usage = total
	if paid {
		res.Cost = &cost
	}
	res.Attempts = attempts
	if res.Backend == "" {
		res.Backend = req.Backend
	}
	if res.Model == "" {
		res.Model = req.Model
	}
	if ctx.Err() != nil && (err != nil || !res.OK()) {
		res.Status, err = agent.StatusCancelled, context.Cause(ctx)
	}
	return res, err
}

// structured runs one attempt and, when the call has a schema, checks the output and
// re-prompts with the validation errors up to maxSchemaRetries times.
func (h *host) structured(ctx context.Context, c lua.Call, req agent.Request, b adapters.Backend, sch *schema.Schema, continuation bool) (agent.Result, error) {
	res, err := h.turn(ctx, c, req, b, continuation)
	if sch == nil || err != nil || !res.OK() {
		return res, err
	}
	total := res.Usage
	for retry := 1; ; retry++ {
		out, verr := decodeStructured(res)
		if verr == nil {
			verr = sch.Validate(out)
		}
		if verr == nil {
			res.Output = out
			res.Usage = total
			return res, nil
		}
		if retry > maxSchemaRetries {
			res.Status, res.Error = agent.StatusError, "output does not match the schema: "+verr.Error()
			res.Usage = total
			return res, nil
		}
		h.emit(event.SchemaRetry, map[string]any{"call_key": c.Key, "attempt": retry, "errors": verr.Error()})
		again := req
		again.Prompt = req.Prompt + "\n\nYour previous reply did not match the required JSON schema:\n" + verr.Error() +
			"\nReply again with only a JSON value that matches the schema."
		if req.SessionID == "" && res.SessionID != "" {
			again.SessionID = res.SessionID
		}
		res, err = h.turn(ctx, c, again, b, true)
		total = total.Add(res.Usage)
		if err != nil || !res.OK() {
			res.Usage = total
			return res, err
		}
	}
}

// decodeStructured returns the JSON value of a structured reply: the backend's decoded
// output, or JSON extracted from its text.
func decodeStructured(res agent.Result) (any, error) {
	if res.Output != nil {
		if s, ok := res.Output.(string); !ok {
			return res.Output, nil
		} else if res.Text == "" {
			res.Text = s
		}
	}
	text := strings.TrimSpace(res.Text)
	if i := strings.Index(text, "```"); i >= 0 {
		rest := text[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			text = strings.TrimSpace(rest[:j])
		}
	}
	var v any
	if err := json.Unmarshal([]byte(text), &v); err == nil {
		return v, nil
	}
	if i, j := strings.IndexAny(text, "{["), strings.LastIndexAny(text, "}]"); i >= 0 && j > i {
		if err := json.Unmarshal([]byte(text[i:j+1]), &v); err == nil {
			return v, nil
		}
	}
	return nil, errors.New("the reply contains no JSON value")
}

// turn is one admitted model request.
func (h *host) turn(ctx context.Context, c lua.Call, req agent.Request, b adapters.Backend, continuation bool) (agent.Result, error) {
	permit, err := h.e.opts.Scheduler.Admit(ctx, scheduler.Turn{
		RunID: h.run.ID, CallKey: c.Key, Lane: req.Backend + "/" + req.Model, Class: req.Class,
		Caller: h.e.opts.Caller, EstTokens: (len(req.System)+len(req.Prompt))/4 + req.MaxTokens, Continuation: continuation,
	})
	if err != nil {
		return agent.Result{Status: agent.StatusCancelled}, err
	}
	actx := ctx
	if req.TimeoutMS > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeoutCause(ctx, time.Duration(req.TimeoutMS)*time.Millisecond, errCallTimeout)
		defer cancel()
	}
	res, err := b.Run(actx, req, nil)
	permit.Done(scheduler.Outcome{Usage: res.Usage, Err: err})
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errCallTimeout) {
		return agent.Result{Status: agent.StatusTimedOut, Error: fmt.Sprintf("timed out after %d ms (timeout_ms)", req.TimeoutMS),
			Usage: res.Usage, Backend: req.Backend, Model: req.Model}, nil
	}
	if err != nil && res.Status == "" {
		res.Status = agent.StatusError
	}
	if err == nil && res.Status == "" {
		res.Status = agent.StatusOK
	}
	return res, err
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
