package door

import (
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
)

// StartRequest is the body of the daemon's POST /api/runs and what the MCP tools start:
// a script (or a path the host reads) and how to run it.
type StartRequest struct {
	Script        string        `json:"script,omitempty"` // the workflow source; wins over reading Path
	Path          string        `json:"path,omitempty"`   // the workflow file (its name when Script is given)
	Args          any           `json:"args,omitempty"`
	Backend       string        `json:"backend,omitempty"`
	Model         string        `json:"model,omitempty"`
	Class         string        `json:"class,omitempty"` // interactive (default) or batch
	Concurrency   int           `json:"concurrency,omitempty"`
	MaxAgentCalls int           `json:"max_agent_calls,omitempty"`
	Timeout       time.Duration `json:"timeout_ns,omitempty"`
	Caller        string        `json:"caller,omitempty"` // who asks (for fairness and the log)
	// Unattended: no one answers the run's approvals, so a call that needs one fails
	// instead of waiting (runtime.Spec.Unattended).
	Unattended bool `json:"unattended,omitempty"`
	// Quiet: the script came from a file its caller may not be shown (an MCP path), so
	// its syntax errors never quote it (runtime.Spec.Quiet).
	Quiet bool `json:"quiet,omitempty"`
}

// Spec is the request as a runtime.Spec, without any defaults of a config.
func (r StartRequest) Spec() runtime.Spec {
	s := runtime.Spec{Path: r.Path, Args: r.Args, Backend: r.Backend, Model: r.Model,
		Class: agent.Class(r.Class), Concurrency: r.Concurrency, Timeout: r.Timeout,
		Limits: lua.Limits{MaxAgentCalls: r.MaxAgentCalls}, Caller: r.Caller, Unattended: r.Unattended, Quiet: r.Quiet}
	if r.Script != "" {
		s.Source = []byte(r.Script)
	}
	return s
}
