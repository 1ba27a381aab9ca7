package runtime

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
)

// interruptedTool is what the model gets for a tool call that an earlier attempt began
// and never finished (the process stopped, or the call was cancelled, while it ran): the
// tool is not run a second time, since its effect may be partly or wholly done.
const interruptedTool = "error: this tool call was begun in an earlier attempt of the agent call and " +
	"interrupted before it finished, so it is not run again: its effect may be partly or wholly done; " +
	"check the result before repeating it"

// toolJournal is the adapters.ToolFunc of the conversation req begins in agent call c
// (its first attempt's, a retry's, or a schema re-prompt's): each tool call is journaled
// under (call key, conversation, turn, tool call id) before it runs and with its output
// after, and a call the journal already holds is answered from it (SPEC §4: a retry or a
// resume must not run write_file or run_command twice). The conversation is named by the
// request's hash and the length of the session transcript it continues, so every attempt
// numbers its turns alike while two schema re-prompts with the same words do not share
// their tool calls.
//
// A model asked the same thing again may give its tool call a fresh id (real providers
// draw ids at random), so a call is also matched by turn, tool name and arguments when
// no recorded call has its id.
//
// hold stops the call's timeout_ms clock while a call waits for approval; it returns
// what starts it again.
func (h *host) toolJournal(c lua.Call, req agent.Request, hold func() (resume func())) adapters.ToolFunc {
	// The transcript's length is taken now, before this call adds to it; the request's
	// hash only when a tool runs (most calls run none, and hashing costs every call).
	turns := strconv.Itoa(len(h.session(req.SessionID)))
	conversation := sync.OnceValue(func() string { return req.Hash() + "/" + turns })
	return func(ctx context.Context, tc adapters.ToolCall, run func(context.Context) (string, error)) (string, bool, error) {
		rec := storage.ToolCall{RunID: h.run.ID, CallKey: c.Key, Conversation: conversation(), Turn: tc.Turn,
			ID: tc.ID, Name: tc.Name, ArgsHash: sha([]byte(tc.Arguments))}
		known, err := h.store().ToolCalls(ctx, h.run.ID, c.Key)
		if err != nil {
			return "", false, h.stopIfBroken(fmt.Errorf("journal tool call %s of %s: %w", tc.Name, c.Key, err))
		}
		if prev, ok := matchTool(known, rec); ok {
			if !prev.Done {
				return interruptedTool, true, nil
			}
			return prev.Output, true, nil
		}
		if tc.Ask && h.e.opts.AskApprovals && !h.run.spec.Unattended {
			allow, err := h.askApproval(ctx, c, rec, tc, hold)
			if err != nil {
				return "", false, err
			}
			if !allow {
				// Journaled as the tool's output: a retry or resume gives the model the
				// same answer without asking again.
				rec.Done, rec.Output = true, tools.DeclinedText
				if err := h.store().ToolDone(context.WithoutCancel(ctx), rec); err != nil {
					return "", false, h.stopIfBroken(fmt.Errorf("journal tool call %s of %s: %w", tc.Name, c.Key, err))
				}
				return tools.DeclinedText, false, nil
			}
			plain := run
			run = func(ctx context.Context) (string, error) { return plain(tools.Approved(ctx)) }
		}
		// The self-fence: no tool starts once the node's lease may have lapsed.
		if err := h.e.leaseValid(); err != nil {
			return "", false, h.stopIfBroken(fmt.Errorf("tool call %s of %s: %w", tc.Name, c.Key, err))
		}
		if err := h.store().ToolStarted(ctx, rec); err != nil {
			return "", false, h.stopIfBroken(fmt.Errorf("journal tool call %s of %s: %w", tc.Name, c.Key, err))
		}
		out, err := run(ctx)
		if err != nil || ctx.Err() != nil {
			// Not recorded as done: a tool cut short by the call's end counts as
			// interrupted if it is asked for again.
			return out, false, err
		}
		rec.Done, rec.Output = true, out
		// Committed even when the run is being cancelled: the tool has had its effect.
		if err := h.store().ToolDone(context.WithoutCancel(ctx), rec); err != nil {
			return "", false, h.stopIfBroken(fmt.Errorf("journal tool call %s of %s: %w", tc.Name, c.Key, err))
		}
		return out, false, nil
	}
}

// matchTool finds the recorded call that want repeats: the one with its conversation,
// turn and id, else one of the same conversation and turn with the same tool and
// arguments.
func matchTool(known []storage.ToolCall, want storage.ToolCall) (storage.ToolCall, bool) {
	return matchCall(known, want, func(k storage.ToolCall) storage.ToolCall { return k })
}

// matchCall is matchTool over any record of a tool call: call says which tool call a
// record is of (its conversation, turn, id, tool name and arguments' hash).
func matchCall[T any](known []T, want storage.ToolCall, call func(T) storage.ToolCall) (T, bool) {
	same := -1
	for i, k := range known {
		c := call(k)
		if c.Conversation != want.Conversation || c.Turn != want.Turn {
			continue
		}
		if c.ID == want.ID {
			return k, true
		}
		if same < 0 && c.Name == want.Name && c.ArgsHash == want.ArgsHash {
			same = i
		}
	}
	if same >= 0 {
		return known[same], true
	}
	var zero T
	return zero, false
}
