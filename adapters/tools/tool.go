package tools

import (
	"context"
	"encoding/json"
	"fmt"
)

// Spec describes a tool to a model: the function definition of an OpenAI-style tool call.
type Spec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the tool's arguments (an object schema).
	Parameters map[string]any
	// Destructive marks a tool that changes or deletes things outside the agent's own
	// answer. A destructive tool runs only as the approval policy allows.
	Destructive bool
}

// Tool is one function an agent may call.
type Tool interface {
	Spec() Spec
	// Call runs the tool with the model's JSON arguments. The returned text goes back to
	// the model as the tool result. An error is also shown to the model (as "error: ...")
	// unless it is an *ApprovalError, which fails the whole agent call.
	Call(ctx context.Context, args json.RawMessage) (string, error)
}

// Approval is the policy for destructive tools.
type Approval string

// The approval policies of [tools] approval.
const (
	ApprovalAllow Approval = "allow" // run destructive tools
	ApprovalDeny  Approval = "deny"  // refuse them; the model is told and may go on
	ApprovalAsk   Approval = "ask"   // ask a person (see Approved); fail the call when no one can answer
)

// DeclinedText is the tool result a model gets for a call a person declined.
const DeclinedText = "Error: the user declined this tool call"

type approvedKey struct{}

// Approved returns ctx marked as carrying a person's yes for the one tool call it is
// given to: a destructive tool under "ask" runs with it instead of failing.
func Approved(ctx context.Context) context.Context {
	return context.WithValue(ctx, approvedKey{}, true)
}

func isApproved(ctx context.Context) bool {
	ok, _ := ctx.Value(approvedKey{}).(bool)
	return ok
}

// NeedsApproval reports whether the call of t with args runs only with a person's yes:
// t is a destructive tool that Set.Resolve wrapped under the "ask" policy, or run_command
// under "ask" is asked for a command that allow_commands does not allow.
func NeedsApproval(t Tool, args json.RawMessage) bool {
	if g, ok := t.(*guarded); ok {
		if g.policy == ApprovalAsk {
			return true
		}
		t = g.Tool
	}
	a, ok := t.(interface{ asksApproval(json.RawMessage) bool })
	return ok && a.asksApproval(args)
}

// ApprovalError fails an agent call whose model asked for a destructive tool under the
// "ask" policy where no one can answer (a non-interactive CLI run).
type ApprovalError struct {
	Tool string
}

func (e *ApprovalError) Error() string {
	what := ""
	if e.Tool == "write_file" || e.Tool == "edit_file" {
		what = " (it changes files in the workspace)"
	}
	return fmt.Sprintf("tool %s is destructive and needs approval%s, which no one can give in this run "+
		"under [tools] approval = \"ask\" (the default): "+
		"set [tools] approval = \"allow\" in luft.toml to let agents run it, or \"deny\" to refuse it and let the agent go on", e.Tool, what)
}
