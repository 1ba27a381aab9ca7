package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	openai "github.com/sashabaranov/go-openai"
)

// DefaultMaxTurns bounds an agent's tool loop when the backend sets no max_turns.
const DefaultMaxTurns = 20

// maxToolOutput bounds one tool result sent back to the model.
const maxToolOutput = 64 << 10

// runTool runs one tool call of the model through call.RunTool (which replays it when a
// retried or resumed call asks for it again) and returns the text the model gets back. A
// tool's failure is a result the model reads ("error: ..."), not a failed agent call; an
// *tools.ApprovalError, or a failure to journal the call, comes back as an error.
func runTool(ctx context.Context, byName map[string]tools.Tool, turn int, tc openai.ToolCall, call Call) (string, error) {
	call.Report(Update{Kind: "tool_call", Text: tc.Function.Name + " " + snippet(tc.Function.Arguments, 120)})
	t, ok := byName[tc.Function.Name]
	if !ok {
		out := fmt.Sprintf("error: there is no tool %q; the tools you have are: %s", tc.Function.Name,
			strings.Join(slices.Sorted(maps.Keys(byName)), ", "))
		call.Report(Update{Kind: "tool_result", Text: out})
		return out, nil
	}
	args := json.RawMessage(tc.Function.Arguments)
	if strings.TrimSpace(tc.Function.Arguments) == "" {
		args = json.RawMessage("{}")
	}
	out, replayed, err := call.RunTool(ctx, ToolCall{Turn: turn, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
		Ask: tools.NeedsApproval(t, args)},
		func(ctx context.Context) (string, error) {
			out, err := t.Call(ctx, args)
			if err != nil {
				var ae *tools.ApprovalError
				if errors.As(err, &ae) {
					return "", err
				}
				out = "error: " + err.Error()
			}
			if len(out) > maxToolOutput {
				out = out[:maxToolOutput] + "\n[output cut at 64 KiB]"
			}
			return out, nil
		})
	if err != nil {
		return "", err
	}
	note := ""
	if replayed {
		note = " (recorded result: the tool ran in an earlier attempt and is not run again)"
	}
	call.Report(Update{Kind: "tool_result", Text: snippet(out, 200) + note})
	return out, nil
}

// resolveTools returns the tools an agent asked for.
func (o *OpenAI) resolveTools(ctx context.Context, names []string) ([]tools.Tool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if o.cfg.Tools == nil {
		return nil, fmt.Errorf("openai backend %q: the agent asks for tools %s but none are configured "+
			"(add a [tools] table or [mcp_servers] to luft.toml)", o.cfg.ID, strings.Join(names, ", "))
	}
	ts, err := o.cfg.Tools.Resolve(ctx, names)
	if err != nil {
		return nil, fmt.Errorf("openai backend %q: %w", o.cfg.ID, err)
	}
	return ts, nil
}

// runToolCalls answers a reply that calls tools: the reply goes into the conversation,
// then each tool's result. A tool that cannot be run (an approval refused, a journal
// that failed) or a canceled ctx ends the call with that error.
func (c *chatCall) runToolCalls(ctx context.Context, turn int, msg openai.ChatCompletionMessage) error {
	calls := slices.Clone(msg.ToolCalls)
	for i := range calls {
		// arguments is a required string in the echoed call; go-openai omits an
		// empty one, which OpenAI refuses.
		if strings.TrimSpace(calls[i].Function.Arguments) == "" {
			calls[i].Function.Arguments = "{}"
		}
		if calls[i].Type == "" {
			calls[i].Type = openai.ToolTypeFunction
		}
	}
	c.msgs = append(c.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Content, ToolCalls: calls})
	for _, tc := range msg.ToolCalls {
		out, terr := runTool(ctx, c.byName, turn, tc, c.call)
		if terr != nil {
			c.res.Status, c.res.Error = agent.StatusError, terr.Error()
			return terr
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A tool message carries no name: the official types have none for it.
		c.msgs = append(c.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: out})
	}
	return nil
}
