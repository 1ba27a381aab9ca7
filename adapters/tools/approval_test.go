package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Which calls need a person's yes: a destructive tool under "ask", and under "ask" a
// command allow_commands does not allow. A call given Approved runs; without it a
// destructive tool fails with *ApprovalError and a command is refused as before.
func TestNeedsApproval(t *testing.T) {
	for _, tc := range []struct {
		policy     Approval
		tool, args string
		want       bool
	}{
		{ApprovalAsk, "write_file", `{"path":"a.txt","content":"x"}`, true},
		{ApprovalAsk, "edit_file", `{"path":"a.txt","old_string":"x","new_string":"y"}`, true},
		{ApprovalAsk, "read_file", `{"path":"a.txt"}`, false},
		{ApprovalAsk, "run_command", `{"command":"echo hi"}`, true},
		{ApprovalAsk, "run_command", `{"command":"ls"}`, false},
		{ApprovalAsk, "run_command", `{"command":"echo hi; rm x"}`, false}, // malformed: refused, never asked
		{ApprovalAsk, "run_command", `not json`, false},
		{ApprovalAllow, "write_file", `{"path":"a.txt","content":"x"}`, false},
		{ApprovalAllow, "edit_file", `{"path":"a.txt","old_string":"x","new_string":"y"}`, false},
		{ApprovalDeny, "write_file", `{"path":"a.txt","content":"x"}`, false},
		{ApprovalAllow, "run_command", `{"command":"echo hi"}`, false},
		{ApprovalDeny, "run_command", `{"command":"echo hi"}`, false},
	} {
		set, err := New(Config{Workspace: t.TempDir(), AllowCommands: []string{"ls"}, Approval: tc.policy})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := set.Resolve([]string{tc.tool})
		if err != nil {
			t.Fatal(err)
		}
		if got := NeedsApproval(ts[0], json.RawMessage(tc.args)); got != tc.want {
			t.Errorf("%s %s %s: NeedsApproval = %v, want %v", tc.policy, tc.tool, tc.args, got, tc.want)
		}
	}

	set, err := New(Config{Workspace: t.TempDir(), AllowCommands: []string{"ls"}})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := set.Resolve([]string{"write_file", "run_command"})
	if err != nil {
		t.Fatal(err)
	}
	write, cmd := ts[0], ts[1]
	ctx := context.Background()
	var ae *ApprovalError
	if _, err := write.Call(ctx, json.RawMessage(`{"path":"a.txt","content":"x"}`)); !errors.As(err, &ae) {
		t.Fatalf("write_file without approval: %v", err)
	}
	// The message says what the tool does and how to let it run.
	for _, want := range []string{"tool write_file is destructive", "changes files in the workspace",
		`[tools] approval = "allow"`, `"deny"`} {
		if !strings.Contains(ae.Error(), want) {
			t.Errorf("ApprovalError %q lacks %q", ae.Error(), want)
		}
	}
	if out, err := write.Call(Approved(ctx), json.RawMessage(`{"path":"a.txt","content":"x"}`)); err != nil || !strings.Contains(out, "created") {
		t.Fatalf("write_file approved: %q %v", out, err)
	}
	if _, err := cmd.Call(ctx, json.RawMessage(`{"command":"echo hi"}`)); err == nil || !strings.Contains(err.Error(), "is not allowed") {
		t.Fatalf("echo without approval: %v", err)
	}
	if out, err := cmd.Call(Approved(ctx), json.RawMessage(`{"command":"echo hi"}`)); err != nil || !strings.HasPrefix(out, "hi\n") {
		t.Fatalf("echo approved: %q %v", out, err)
	}
	if !strings.Contains(cmd.Spec().Description, "another command runs only if the user approves it") {
		t.Errorf("run_command's description does not say others need approval: %s", cmd.Spec().Description)
	}
}
