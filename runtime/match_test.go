package runtime

import (
	"testing"

	"github.com/luft-run/luft/storage"
)

// A repeated tool call is found by its id, else by its tool and arguments in the same
// conversation and turn (a model asked again may draw a fresh id); its approval is found
// by the same rule.
func TestMatchToolAndApproval(t *testing.T) {
	rec := func(conv string, turn int, id, name, hash string) storage.ToolCall {
		return storage.ToolCall{Conversation: conv, Turn: turn, ID: id, Name: name, ArgsHash: hash}
	}
	known := []storage.ToolCall{
		rec("c", 1, "a", "write_file", "h1"),
		rec("c", 1, "b", "write_file", "h2"),
		rec("c", 1, "x", "write_file", "h2"),
		rec("c", 2, "a", "write_file", "h1"),
		rec("d", 1, "z", "write_file", "h3"),
	}
	for _, tc := range []struct {
		name   string
		want   storage.ToolCall
		found  bool
		wantID string
	}{
		{"same id", rec("c", 1, "b", "other", "other"), true, "b"},
		{"same id in another turn", rec("c", 2, "a", "write_file", "h1"), true, "a"},
		{"fresh id, same tool and arguments: the first", rec("c", 1, "new", "write_file", "h2"), true, "b"},
		{"an id beats an earlier tool-and-arguments match", rec("c", 1, "x", "write_file", "h1"), true, "x"},
		{"fresh id, other arguments", rec("c", 1, "new", "write_file", "h9"), false, ""},
		{"same id, other conversation", rec("e", 1, "a", "write_file", "h1"), false, ""},
		{"same arguments, other turn", rec("d", 2, "new", "write_file", "h3"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := matchTool(known, tc.want)
			if ok != tc.found || got.ID != tc.wantID {
				t.Errorf("matchTool: %+v %v, want id %q %v", got, ok, tc.wantID, tc.found)
			}
			approvals := make([]storage.Approval, len(known))
			for i, k := range known {
				approvals[i] = storage.Approval{ID: "ap-" + k.ID, Conversation: k.Conversation, Turn: k.Turn,
					ToolCallID: k.ID, Tool: k.Name, ArgsHash: k.ArgsHash}
			}
			a, ok := matchApproval(approvals, tc.want)
			if ok != tc.found || a.ToolCallID != tc.wantID {
				t.Errorf("matchApproval: %+v %v, want tool call id %q %v", a, ok, tc.wantID, tc.found)
			}
		})
	}
}
