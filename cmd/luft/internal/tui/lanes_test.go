package tui

import (
	"strings"
	"testing"
	"time"
)

// testLanes are two lanes as the scheduler reports them mid-run, and an idle one.
func testLanes(now time.Time) []Lane {
	return []Lane{
		{Name: "openai/gpt-4o", Running: 2, QueuedInteractive: 1, QueuedBatch: 5, TokensLeft: 2100, TokenLimit: 6000,
			RequestsLeft: 12, RequestLimit: 30, Admitted: 40, Waits: 3, RateLimited: 1, PausedUntil: now.Add(4 * time.Second)},
		{Name: "local/llama3.2", Running: 1, Admitted: 7, Circuit: "half-open"},
		{Name: "mock/"},
	}
}

func TestLaneLines(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	got := laneLines(testLanes(now), now, maxLaneLines)
	want := []string{
		"lane openai/gpt-4o · 2 running · queued 1 interactive, 5 batch · tokens 2.1k/6.0k left · requests 12/30 left · 3 waits · 1 × 429 · paused 4.0s",
		"lane local/llama3.2 · 1 running · circuit half-open",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lane lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	many := make([]Lane, 5)
	for i := range many {
		many[i] = Lane{Name: "l", Admitted: 1}
	}
	if got := laneLines(many, now, 3); len(got) != 4 || got[3] != "+2 more lanes" {
		t.Fatalf("five busy lanes: %q", got)
	}
}

// The summary lists the lanes that were used; a status line of plain mode is followed by them.
func TestLanesInSummaryAndStatus(t *testing.T) {
	s := scenarioCompleted()
	st := Fold(StateOptions{}, s.evs...)
	sum := Summary(st, SummaryOptions{Now: s.now(), Lanes: testLanes(s.now()), Styles: NoColor(), Location: time.UTC})
	if !strings.Contains(sum, "\n            lane openai/gpt-4o · 2 running") || strings.Contains(sum, "mock/") {
		t.Fatalf("summary:\n%s", sum)
	}
	var b strings.Builder
	p := NewPlain(&b, PlainOptions{Styles: NoColor()})
	p.SetLanes(testLanes(s.now()))
	if err := p.Status(s.now()); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[1], "  lane openai/gpt-4o") {
		t.Fatalf("status:\n%s", b.String())
	}
}

// The agent rows follow the scheduler's sample: the lane line and the agent counts agree.
func TestSyncLanesAgreesWithTheSample(t *testing.T) {
	st := Fold(StateOptions{}, scenarioFanout().evs...)
	if r, q := st.Count(Running), st.Count(Queued); r != 8 || q != 4 {
		t.Fatalf("before: %d running, %d queued", r, q)
	}
	for _, tc := range []struct{ running, wantRunning, wantQueued int }{
		{3, 3, 9},   // fewer slots held than the events suggest
		{10, 10, 2}, // more: queued agents fill them
		{20, 12, 0}, // more than there are agents: all run
		{0, 0, 12},
	} {
		st.SyncLanes([]Lane{{Name: "openai/gpt-4o", Running: tc.running}, {Name: "other/m", Running: 5}})
		if r, q := st.Count(Running), st.Count(Queued); r != tc.wantRunning || q != tc.wantQueued {
			t.Errorf("lane running %d: %d running, %d queued; want %d and %d", tc.running, r, q, tc.wantRunning, tc.wantQueued)
		}
	}
}
