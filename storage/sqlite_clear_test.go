package storage

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

func testDeleteFinished(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	day := 24 * time.Hour
	now := time.Date(2026, 8, 10, 12, 0, 0, 0, time.UTC)
	runs := []struct {
		id, status string
		finished   time.Time
	}{
		{"old-done", StatusCompleted, now.Add(-5 * day)},
		{"old-failed", StatusFailed, now.Add(-3 * day)},
		{"new-cancelled", StatusCancelled, now.Add(-time.Hour)},
		{"running", StatusRunning, time.Time{}},
		{"suspended", StatusSuspended, now.Add(-9 * day)},
	}
	for _, r := range runs {
		mustCreate(t, s, Run{ID: r.id, Workflow: "w.lua", Status: r.status})
		if _, err := s.Append(ctx, r.id, event.New(event.Log, map[string]any{"msg": "x"})); err != nil {
			t.Fatal(err)
		}
		if !r.finished.IsZero() {
			if err := s.UpdateRun(ctx, r.id, RunUpdate{FinishedAt: ptr(r.finished)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		cutoff time.Time
		want   []string
	}{
		{now.Add(-4 * day), []string{"old-done"}},
		{now.Add(-2 * day), []string{"old-failed"}},
		{now, []string{"new-cancelled"}},
		{now, nil},
	}
	for i, tc := range cases {
		got, err := s.DeleteFinished(ctx, tc.cutoff)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("step %d: deleted %v, want %v", i, got, tc.want)
		}
	}
	left, err := s.ListRuns(ctx, ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 {
		t.Fatalf("%d runs left, want running and suspended: %+v", len(left), left)
	}
	if _, err := s.Events(ctx, "old-done", 0, 0); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("events of a deleted run: %v, want ErrRunNotFound", err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE run_id = 'old-done'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events of a deleted run left (%v)", n, err)
	}
}
