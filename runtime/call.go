package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
