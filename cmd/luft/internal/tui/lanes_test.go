package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
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

// A frame of the board draws the lane line and the agent list from one state: events
// that arrive after the scheduler's sample (two agents finish, their slots go to queued
// ones) change both alike, so they never say different things in one frame, and turns
// of other runs on a shared lane are shown apart.
func TestLaneLineAgreesWithTheAgentList(t *testing.T) {
	s := scenarioFanout()
	st := Fold(StateOptions{}, s.evs...)
	st.SyncLanes([]Lane{{Name: "openai/gpt-4o", Running: 8, QueuedInteractive: 4, QueuedBatch: 1, Admitted: 20}})
	// The sample is now stale: two agents finish and two queued take their slots.
	s.evs = nil
	s.wait(1).done("main/2/par[3]/1", "review-03", 100, 10, time.Second)
	s.done("main/2/par[4]/1", "review-04", 100, 10, time.Second)
	for _, ev := range s.evs {
		st.Apply(ev)
	}
	b := &board{st: st, now: s.now(), w: 160, sty: NoColor(), loc: time.UTC,
		lanes: []Lane{{Name: "openai/gpt-4o", Running: 8, QueuedInteractive: 4, QueuedBatch: 1, Admitted: 20}}}
	frame := b.render()
	lane, title := "", ""
	for _, l := range strings.Split(frame, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(l), "lane openai/gpt-4o"):
			lane = l
		case strings.HasPrefix(strings.TrimSpace(l), "Agents"):
			title = l
		}
	}
	running, queued := st.Count(Running), st.Count(Queued)
	if running != 8 || queued != 2 {
		t.Fatalf("after the two done: %d running, %d queued, want 8 and 2\n%s", running, queued, frame)
	}
	if !strings.Contains(title, "8 running") || !strings.Contains(title, "2 queued") ||
		!strings.Contains(lane, "· 8 running · queued 2 interactive, 0 batch · other runs 0 running, 1 queued") {
		t.Fatalf("one frame disagrees with itself:\n  %s\n  %s\nwant both 8 running and 2 queued, the sample's extra batch turn as another run's", lane, title)
	}
}

// An agent that waited 3 s for a slot and ran 3 s shows 3.0s as its time and the wait
// apart, on the board, in its detail and in plain output; never 6.0s.
func TestFinishedAgentShowsItsWaitApart(t *testing.T) {
	s := &script{}
	s.started().agent("main/1", "late", 0).queued("main/1", 1)
	s.wait(6).add(event.AgentDone, map[string]any{"call_key": "main/1", "name": "late", "status": "ok", "tokens": 30,
		"elapsed_ms": 6000, "queued_ms": 3000, "approval_ms": 0, "run_ms": 3000, "backend": "openai", "model": "gpt-4o"})
	st := Fold(StateOptions{}, s.evs...)
	a := st.Agent("main/1")
	b := &board{st: st, now: s.now(), w: 120, sty: NoColor(), loc: time.UTC}
	row, _ := b.agentRow(a, b.cols([]*Agent{a}))
	info, _ := b.agentInfo(a)
	var out strings.Builder
	p := NewPlain(&out, PlainOptions{Styles: NoColor()})
	for _, ev := range s.evs {
		if err := p.Event(ev); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range map[string]string{"row": row, "detail": info, "plain": out.String()} {
		if strings.Contains(text, "6.0s") || !strings.Contains(text, "3.0s") || !strings.Contains(text, "queued 3.0s") {
			t.Errorf("%s: %q, want the 3.0s run and queued 3.0s apart, no 6.0s", name, text)
		}
	}
}

// A running agent's clock on the board counts from when it ran, not from when it asked:
// 3 s queued for a slot and 3 s running shows 3s, not 6s.
func TestRunningClockLeavesOutTheQueue(t *testing.T) {
	s := &script{}
	s.started().agent("main/1", "first", 0).agent("main/2", "second", 0).queued("main/2", 1)
	s.wait(3).done("main/1", "first", 10, 5, 3*time.Second) // its slot goes to second
	st := Fold(StateOptions{}, s.evs...)
	a := st.Agent("main/2")
	now := s.now().Add(3 * time.Second)
	if a.Status != Running || a.RunTime(now) != 3*time.Second {
		t.Fatalf("second: %s, run time %s at 3 s after it got the slot, want running 3s", a.Status, a.RunTime(now))
	}
	b := &board{st: st, now: now, w: 120, sty: NoColor(), loc: time.UTC}
	if row, _ := b.agentRow(a, b.cols([]*Agent{a})); !strings.Contains(row, " 3s ") || strings.Contains(row, "6s") {
		t.Fatalf("row %q, want its clock at 3s", row)
	}
}

// A proxied turn's agent_done has wait_ms (its time in luft's queue) inside elapsed_ms: the
// board shows the rest as its time, the wait apart.
func TestProxiedTurnShowsItsWaitApart(t *testing.T) {
	s := &script{}
	s.started().agent("turn/1", "turn 1", 0)
	s.wait(6).add(event.AgentDone, map[string]any{"call_key": "turn/1", "name": "turn 1", "status": "ok", "tokens": 30,
		"elapsed_ms": 6000, "wait_ms": 3000, "backend": "openai", "model": "gpt-4o"})
	a := Fold(StateOptions{}, s.evs...).Agent("turn/1")
	if a.Ran != 3*time.Second || a.Queued != 3*time.Second {
		t.Fatalf("ran %s, queued %s; want 3s each", a.Ran, a.Queued)
	}
}
