package storage

import (
	"context"
	"errors"
	"testing"
)

// Tool calls are recorded started, then done; a second start leaves a done call alone;
// they belong to their journal entry (a call key without one is refused, and rerunning
// from a divergence deletes them with it).
func testToolCalls(t *testing.T, k kind) {
	ctx := context.Background()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r1", Workflow: "w.lua"})
	for _, key := range []string{"main/1", "main/2"} {
		if err := s.JournalScheduled(ctx, Entry{RunID: "r1", CallKey: key, Kind: "agent", InputHash: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	tc := func(key string, turn int, id string) ToolCall {
		return ToolCall{RunID: "r1", CallKey: key, Conversation: "h", Turn: turn, ID: id, Name: "write_file", ArgsHash: "a"}
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"start 1/a", func() error { return s.ToolStarted(ctx, tc("main/1", 1, "a")) }},
		{"done 1/a", func() error { x := tc("main/1", 1, "a"); x.Output = "wrote 1 bytes"; return s.ToolDone(ctx, x) }},
		{"start 1/a again", func() error { return s.ToolStarted(ctx, tc("main/1", 1, "a")) }},
		{"start 2/b", func() error { return s.ToolStarted(ctx, tc("main/1", 2, "b")) }},
		{"done other key", func() error { x := tc("main/2", 1, "a"); x.Output = "x"; return s.ToolDone(ctx, x) }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	got, err := s.ToolCalls(ctx, "r1", "main/1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[0].Done || got[0].Output != "wrote 1 bytes" || got[0].Turn != 1 || got[1].Done || got[1].ID != "b" {
		t.Fatalf("tool calls of main/1: %+v", got)
	}

	for name, bad := range map[string]ToolCall{
		"no journal entry": tc("main/9", 1, "a"),
		"no run":           {RunID: "nope", CallKey: "main/1", Conversation: "h", Turn: 1, ID: "a"},
		"turn 0":           tc("main/1", 0, "a"),
		"no conversation":  {RunID: "r1", CallKey: "main/1", Turn: 1, ID: "a"},
	} {
		if err := s.ToolStarted(ctx, bad); err == nil {
			t.Errorf("%s: ToolStarted succeeded", name)
		}
	}

	// Rescheduling the entry (a resume runs the call again) keeps its tool calls.
	if err := s.JournalScheduled(ctx, Entry{RunID: "r1", CallKey: "main/1", Kind: "agent", InputHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ToolCalls(ctx, "r1", "main/1"); len(got) != 2 {
		t.Fatalf("after rescheduling: %d tool calls, want 2", len(got))
	}
	// Rerunning from a divergence drops the scheduled entries and their tool calls.
	if _, err := s.InvalidateFrom(ctx, "r1", 1); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"main/1", "main/2"} {
		if got, err := s.ToolCalls(ctx, "r1", key); err != nil || len(got) != 0 {
			t.Fatalf("after InvalidateFrom, %s: %+v %v", key, got, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ToolStarted(ctx, tc("main/1", 1, "a")); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}
