package adapters

import (
	"context"

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
	// Run carries out req. progress may be nil; when it is not, the backend may report
	// partial output through it while the call runs.
	Run(ctx context.Context, req agent.Request, progress Progress) (agent.Result, error)
}

// Progress receives streaming updates of a running call. It is called from the backend's
// goroutine and must not block for long.
type Progress func(Update)

// Update is one piece of streamed progress.
type Update struct {
	Kind string // "text", "tool_call", "tokens"
	Text string
}
