package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// dryRunTimeout bounds a dry run: validating is a check, and a script whose main() loops
// forever must not hold the call.
const dryRunTimeout = 30 * time.Second

// DryRun checks a workflow as luft validate does: it compiles it and runs it to its end
// on the offline mock backend in a throw-away state dir, for at most 30 s and 10000
// agent calls. A script that fails is a result (OK false) saying where; an error is a
// failure of the check itself.
func DryRun(ctx context.Context, req door.StartRequest) (ValidateResult, error) {
	dir, err := os.MkdirTemp("", "luft-validate-")
	if err != nil {
		return ValidateResult{}, fmt.Errorf("dry run: %w", err)
	}
	defer os.RemoveAll(dir)
	st, err := storage.Open(ctx, dir)
	if err != nil {
		return ValidateResult{}, fmt.Errorf("dry run: %w", err)
	}
	defer st.Close()
	svc, err := runtime.New(runtime.Options{Store: st, Caller: "validate",
		Backends:  adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{})),
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 64}}, nil)})
	if err != nil {
		return ValidateResult{}, fmt.Errorf("dry run: %w", err)
	}
	name := req.Path
	if name == "" {
		name = "workflow.lua"
	}
	run, err := svc.Start(ctx, runtime.Spec{Path: req.Path, Source: []byte(req.Script), Args: req.Args, Backend: "mock", Quiet: req.Quiet,
		Timeout: dryRunTimeout, Limits: lua.Limits{MaxAgentCalls: 10000}})
	if err != nil {
		return ValidateResult{Error: err.Error()}, nil
	}
	var res runtime.Result
	select {
	case <-run.Done():
		res = run.Wait()
	case <-ctx.Done():
		run.Cancel()
		<-run.Done()
		return ValidateResult{}, fmt.Errorf("dry run: %w", ctx.Err())
	}
	calls := res.Agents.OK + res.Agents.Failed
	switch {
	case errors.Is(res.Err, runtime.ErrTimeout):
		where := name
		var se *lua.ScriptError
		if errors.As(res.Err, &se) && se.Where != "" {
			where = se.Where
		}
		return ValidateResult{AgentCalls: calls, Error: fmt.Sprintf("%s: the dry run did not end within %s; a loop that never ends?", where, dryRunTimeout)}, nil
	case res.Status != runtime.StatusCompleted:
		return ValidateResult{AgentCalls: calls, Error: fmt.Sprintf("%s: dry run on the mock backend %s: %v", name, res.Status, res.Err)}, nil
	}
	return ValidateResult{OK: true, AgentCalls: calls}, nil
}
