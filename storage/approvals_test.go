package storage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// An approval is asked once per tool call (asking again returns the stored row, answered
// or not), answered once, and belongs to its journal entry.
func testApprovals(t *testing.T, k kind) {
	ctx := context.Background()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r1", Workflow: "w.lua"})
	mustCreate(t, s, Run{ID: "r2", Workflow: "w.lua"})
	for _, run := range []string{"r1", "r2"} {
		if err := s.JournalScheduled(ctx, Entry{RunID: run, CallKey: "main/1", Kind: "agent", InputHash: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(run, id, tcID string) Approval {
		return Approval{RunID: run, ID: id, CallKey: "main/1", Conversation: "h", Turn: 1, ToolCallID: tcID,
			Tool: "write_file", Arguments: `{"path":"a"}`, ArgsHash: "x"}
	}
	a, err := s.AskApproval(ctx, ask("r1", "ap1", "c1"))
	if err != nil || a.Status != ApprovalPending || a.ID != "ap1" || a.CreatedAt.IsZero() {
		t.Fatalf("ask: %+v, %v", a, err)
	}
	if _, err := s.AskApproval(ctx, ask("r2", "ap9", "c1")); err != nil {
		t.Fatal(err)
	}
	// The same tool call asked again under another id finds the first row.
	if again, err := s.AskApproval(ctx, ask("r1", "other", "c1")); err != nil || again.ID != "ap1" {
		t.Fatalf("ask again: %+v, %v", again, err)
	}
	pending, err := s.Approvals(ctx, ApprovalFilter{Pending: true})
	if err != nil || len(pending) != 2 {
		t.Fatalf("pending: %+v, %v", pending, err)
	}
	d, err := s.DecideApproval(ctx, "r1", "ap1", false)
	if err != nil || d.Status != ApprovalDeclined || d.DecidedAt.IsZero() || d.Allowed() {
		t.Fatalf("decide: %+v, %v", d, err)
	}
	if _, err := s.DecideApproval(ctx, "r1", "ap1", true); !errors.Is(err, ErrApprovalDecided) || !strings.Contains(err.Error(), "declined") {
		t.Fatalf("decide twice: %v", err)
	}
	if _, err := s.DecideApproval(ctx, "r1", "nope", true); !errors.Is(err, ErrApprovalNotFound) {
		t.Fatalf("decide unknown: %v", err)
	}
	if _, err := s.DecideApproval(ctx, "r1", "ap9", true); !errors.Is(err, ErrApprovalNotFound) {
		t.Fatalf("decide another run's approval: %v", err)
	}
	if got, _ := s.AskApproval(ctx, ask("r1", "ap1", "c1")); got.Status != ApprovalDeclined {
		t.Fatalf("asked after the answer: %+v", got)
	}
	pending, _ = s.Approvals(ctx, ApprovalFilter{RunID: "r1", Pending: true})
	if len(pending) != 0 {
		t.Fatalf("r1 still pending: %+v", pending)
	}
	all, _ := s.Approvals(ctx, ApprovalFilter{RunID: "r1", CallKey: "main/1"})
	if len(all) != 1 || all[0].Arguments != `{"path":"a"}` {
		t.Fatalf("r1 approvals: %+v", all)
	}

	// Hostile input: huge arguments are cut, a call without a journal entry is refused.
	big := ask("r1", "ap2", "c2")
	big.Arguments = strings.Repeat("x", 1<<20)
	if got, err := s.AskApproval(ctx, big); err != nil || len(got.Arguments) != maxApprovalArgs {
		t.Fatalf("big arguments: %d bytes, %v", len(got.Arguments), err)
	}
	wide := ask("r1", "ap4", "c4")
	wide.Arguments = "x" + strings.Repeat("é", 1<<16) // the cut falls inside a character
	if got, err := s.AskApproval(ctx, wide); err != nil || len(got.Arguments) != maxApprovalArgs-1 || !utf8.ValidString(got.Arguments) {
		t.Fatalf("wide arguments: %d bytes, valid UTF-8 %v, %v", len(got.Arguments), utf8.ValidString(got.Arguments), err)
	}
	orphan := ask("r1", "ap3", "c3")
	orphan.CallKey = "main/9"
	if _, err := s.AskApproval(ctx, orphan); err == nil || !strings.Contains(err.Error(), "no journal entry") {
		t.Fatalf("orphan: %v", err)
	}
	if _, err := s.AskApproval(ctx, Approval{RunID: "r1"}); err == nil {
		t.Fatal("empty approval accepted")
	}
	// Rerunning from a divergence deletes the entry and its approvals.
	if _, err := s.InvalidateFrom(ctx, "r1", 0); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.Approvals(ctx, ApprovalFilter{RunID: "r1"}); len(all) != 0 {
		t.Fatalf("approvals kept after invalidation: %+v", all)
	}
}
