package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/luft-run/luft/event"
)

// fencedWrites are the writes WithFence checks, each for run "r" under ctx.
func fencedWrites(ctx context.Context, s *sqlStore, tag string) map[string]error {
	errs := map[string]error{}
	// The tool calls and the approval belong to main/1's entry (InvalidateFrom, last,
	// drops it).
	errs["JournalScheduled main/1"] = s.JournalScheduled(ctx, Entry{RunID: "r", CallKey: "main/1"})
	_, errs["Append"] = s.Append(ctx, "r", event.New(event.Log, map[string]any{"tag": tag}))
	_, errs["AppendAsync"] = s.AppendAsync(ctx, "r", event.New(event.Log, map[string]any{"tag": tag}))()
	errs["JournalScheduled"] = s.JournalScheduled(ctx, Entry{RunID: "r", CallKey: tag + "/s"})
	_, errs["JournalFinish"] = s.JournalFinish(ctx, Entry{RunID: "r", CallKey: tag + "/f", Status: EntryCompleted, Result: json.RawMessage(`1`)})
	tc := ToolCall{RunID: "r", CallKey: "main/1", Conversation: "c", Turn: 1, ID: tag}
	errs["ToolStarted"] = s.ToolStarted(ctx, tc)
	errs["ToolDone"] = s.ToolDone(ctx, tc)
	_, errs["AskApproval"] = s.AskApproval(ctx, Approval{RunID: "r", ID: tag, CallKey: "main/1", Conversation: "c", Turn: 2, ToolCallID: tag, Tool: "write_file"})
	_, errs["SaveFile"] = s.SaveFile(ctx, "r", tag+".lua", []byte(tag))
	errs["UpdateRun"] = s.UpdateRun(ctx, "r", RunUpdate{Error: ptr(tag)})
	_, errs["InvalidateFrom"] = s.InvalidateFrom(ctx, "r", 1000)
	return errs
}

// A write fenced on the attempt its process claimed is refused with ErrOwnershipLost once
// another process has claimed the run, and leaves nothing; the new owner's and unfenced
// writes go on.
func testFencedWritesAfterATakeover(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	mustCreate(t, s, Run{ID: "other"})
	old := WithFence(ctx, "r", 1)
	for name, err := range fencedWrites(old, s, "old") {
		if err != nil {
			t.Errorf("%s as the owner: %v", name, err)
		}
	}
	before, _ := s.Events(ctx, "r", 0, 0)
	// Another process claims the run.
	if err := s.UpdateRun(ctx, "r", RunUpdate{IfAttempt: ptr(1), Attempt: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	for name, err := range fencedWrites(old, s, "stale") {
		if !errors.Is(err, ErrOwnershipLost) {
			t.Errorf("%s after the takeover: %v, want ErrOwnershipLost", name, err)
		}
	}
	r, _ := s.GetRun(ctx, "r")
	after, _ := s.Events(ctx, "r", 0, 0)
	j, _ := s.Journal(ctx, "r")
	files, _ := s.Files(ctx, "r")
	for _, e := range j {
		if e.CallKey == "stale/s" || e.CallKey == "stale/f" {
			t.Errorf("a stale journal entry was stored: %+v", e)
		}
	}
	if r.Error != "old" || len(after) != len(before) || len(files) != 1 {
		t.Errorf("stale writes landed: error %q, %d events (had %d), %d files", r.Error, len(after), len(before), len(files))
	}
	// The fence holds only for its run; the new owner writes.
	if _, err := s.Append(old, "other", event.New(event.Log, nil)); err != nil {
		t.Errorf("a write for another run under the fence: %v", err)
	}
	for name, err := range fencedWrites(WithFence(ctx, "r", 2), s, "new") {
		if err != nil {
			t.Errorf("%s as the new owner: %v", name, err)
		}
	}
	if err := s.RequestCancel(old, "r"); err != nil {
		t.Errorf("RequestCancel is not fenced: %v", err)
	}
	if _, err := s.Append(WithFence(ctx, "missing", 1), "missing", event.New(event.Log, nil)); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("a fenced write for a missing run: %v", err)
	}
}

// While an old owner appends as fast as it can, another store claims the run and writes
// a marker: none of the old owner's events lands after the marker, and once refused it is
// refused for good.
func testNoStaleWriteLandsAfterAClaim(t *testing.T, k kind) {
	ctx := t.Context()
	place := k.place(t)
	a, b := k.open(t, place, config{}), k.open(t, place, config{})
	mustCreate(t, a, Run{ID: "r"})
	old := WithFence(ctx, "r", 1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var landed []int64
	var lost error
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				evs, err := a.Append(old, "r", event.New(event.Log, map[string]any{"w": w, "i": i}))
				mu.Lock()
				if err != nil {
					if lost == nil {
						lost = err
					}
					mu.Unlock()
					if !errors.Is(err, ErrOwnershipLost) {
						t.Errorf("old owner: %v", err)
					}
					// Refused for good.
					if _, err := a.JournalFinish(old, Entry{RunID: "r", CallKey: fmt.Sprintf("late/%d", w), Status: EntryCompleted}); !errors.Is(err, ErrOwnershipLost) {
						t.Errorf("old owner after the refusal: %v", err)
					}
					return
				}
				landed = append(landed, evs[0].Seq)
				mu.Unlock()
			}
		})
	}
	for {
		mu.Lock()
		n := len(landed)
		mu.Unlock()
		if n >= 50 {
			break
		}
		if t.Context().Err() != nil {
			t.Fatal("the old owner wrote nothing")
		}
		runtime.Gosched()
	}
	if err := b.UpdateRun(ctx, "r", RunUpdate{IfAttempt: ptr(1), Attempt: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	marker, err := b.Append(WithFence(ctx, "r", 2), "r", event.New(event.Log, map[string]any{"marker": true}))
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, seq := range landed {
		if seq > marker[0].Seq {
			t.Fatalf("the old owner's event %d landed after the new owner's %d", seq, marker[0].Seq)
		}
	}
	t.Logf("%d events of the old owner, then %v", len(landed), lost)
}
