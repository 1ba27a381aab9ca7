package tui

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

func TestStateFolds(t *testing.T) {
	st := Fold(StateOptions{}, scenarioFanout().evs...)
	if st.RunID != runID || st.Workflow != "examples/review.lua" || st.Status != "running" {
		t.Fatalf("run: %q %q %q", st.RunID, st.Workflow, st.Status)
	}
	if got := st.Totals; got.Started != 18 || got.OK != 6 || got.Failed != 0 || got.In != 17500 || got.Out != 2900 {
		t.Errorf("totals %+v", got)
	}
	// 14 review agents started on a lane of 8 slots: 2 finished and handed their slots to
	// the first two queued.
	if r, q := st.Count(Running), st.Count(Queued); r != 8 || q != 4 {
		t.Errorf("%d running, %d queued; want 8 and 4", r, q)
	}
	for _, key := range []string{"main/2/par[9]/1", "main/2/par[10]/1"} {
		if a := st.Agent(key); a == nil || a.Status != Running {
			t.Errorf("%s should run after a slot freed: %+v", key, a)
		}
	}
	if a := st.Agent("main/2/par[11]/1"); a == nil || a.Status != Queued {
		t.Errorf("main/2/par[11]/1 should still be queued: %+v", a)
	}
	if len(st.Phases) != 3 {
		t.Fatalf("%d phases, want the 3 planned", len(st.Phases))
	}
	scan, review, sum := st.Phases[0], st.Phases[1], st.Phases[2]
	if !scan.Done || scan.OK != 4 || scan.ID != 1 {
		t.Errorf("scan %+v", scan)
	}
	if review.Done || !review.Started || review.Planned != 40 || review.OK != 2 || st.Current() != review {
		t.Errorf("review %+v", review)
	}
	if sum.Started || sum.Planned != 0 || sum.Description != "the summarize step" {
		t.Errorf("summarize %+v", sum)
	}
	if _, ok := st.Planned(); ok {
		t.Error("the plan's total is unknown while summarize has no planned count")
	}
	left, whole, ok := st.ETA(scenarioFanout().now())
	if !ok || whole || left <= 0 {
		t.Errorf("phase ETA: %v %v %v", left, whole, ok)
	}
	if a := st.Agent("main/2/par[9]/1"); a.Last != "Reading storage/sqlite.go" || a.Output() != "Reading storage/sqlite.go\n" {
		t.Errorf("progress: last %q output %q", a.Last, a.Output())
	}
	if logs := st.Logs(); len(logs) != 2 || logs[1].Level != "warn" {
		t.Errorf("logs %+v", logs)
	}
}

func TestStateWaitsAndRetries(t *testing.T) {
	s := scenarioRateLimit()
	st := Fold(StateOptions{}, s.evs...)
	w := st.Agent("main/2/par[11]/1")
	if w.Status != Waiting || w.Reason != "tokens" || !w.Until.Equal(s.now().Add(6*time.Second)) {
		t.Errorf("waiting agent %+v", w)
	}
	r := st.Agent("main/2/par[3]/1")
	if r.Status != Retrying || r.Attempt != 2 || r.Reason != "rate_limited" {
		t.Errorf("retrying agent %+v", r)
	}
	if st.Totals.RateWaits != 2 || st.Totals.RateWait != 12*time.Second || st.Totals.Retries != 1 {
		t.Errorf("totals %+v", st.Totals)
	}
	// Output means the agent runs again.
	st.Apply(event.Event{Type: event.AgentProgress, TS: s.now(), Data: map[string]any{"call_key": "main/2/par[3]/1", "kind": "text", "text": "again\n"}})
	if r.Status != Running || st.Count(Retrying) != 0 {
		t.Errorf("after progress: %v, %d retrying", r.Status, st.Count(Retrying))
	}
}

func TestStateRunDone(t *testing.T) {
	s := scenarioFailure()
	st := Fold(StateOptions{}, s.evs...)
	if st.Status != "failed" || !strings.Contains(st.Err, "context length exceeded") || st.Elapsed != time.Duration(int64(s.at*1000))*time.Millisecond {
		t.Errorf("status %q err %q elapsed %v", st.Status, st.Err, st.Elapsed)
	}
	// run_done's counts are the run's own: they win.
	if st.Totals.OK != 6 || st.Totals.Failed != 12 || st.Totals.In != 16700 || st.Totals.Cost != 0.0678 {
		t.Errorf("totals %+v", st.Totals)
	}
	if st.Count(Running)+st.Queued() != 0 {
		t.Errorf("%d agents still active", st.Count(Running)+st.Queued())
	}
	if p := st.Phases[1]; !p.Done || p.OK != 2 || p.Failed != 12 {
		t.Errorf("review %+v", p)
	}
	// The failure comes first among the finished, ahead of the cancellations.
	var first *Agent
	st.Rows(func(a *Agent) bool { first = a; return false })
	if first.Key != "main/2/par[3]/1" {
		t.Errorf("first row %s, want the failed call", first.Key)
	}
}

// Stored events come back from JSON (float64, maps); they must fold like live ones.
func TestStateStoredEventsFoldLikeLive(t *testing.T) {
	for name, s := range map[string]*script{"ratelimit": scenarioRateLimit(), "failure": scenarioFailure(), "suspend": scenarioSuspend()} {
		stored := make([]event.Event, len(s.evs))
		for i, ev := range s.evs {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &stored[i]); err != nil {
				t.Fatal(err)
			}
		}
		a := StatusView(Fold(StateOptions{}, s.evs...), s.now(), 100, NoColor(), time.UTC)
		b := StatusView(Fold(StateOptions{}, stored...), s.now(), 100, NoColor(), time.UTC)
		if a != b {
			t.Errorf("%s: stored events draw another board:\n%s\n---\n%s", name, a, b)
		}
	}
}

// Live events carry structs (agent.Usage, storage.AgentCounts): read through JSON.
func TestStateReadsStructs(t *testing.T) {
	type usage struct {
		Input  int `json:"input"`
		Output int `json:"output"`
	}
	type counts struct {
		OK     int `json:"ok"`
		Failed int `json:"failed"`
		Cached int `json:"cached"`
	}
	cost := 0.5
	st := NewState(StateOptions{})
	st.Apply(event.Event{Type: event.AgentDone, Data: map[string]any{"call_key": "main/1", "status": "ok",
		"usage": usage{Input: 10, Output: 5}, "cost": &cost, "elapsed_ms": int64(1200)}})
	if a := st.Agent("main/1"); a.In != 10 || a.Out != 5 || a.Tokens != 15 || a.Cost != 0.5 || a.Elapsed != 1200*time.Millisecond {
		t.Errorf("agent %+v", a)
	}
	st.Apply(event.Event{Type: event.RunDone, Data: map[string]any{"status": "completed", "agents": counts{OK: 3, Cached: 2},
		"usage": usage{Input: 30, Output: 7}, "cost": 1.25}})
	if st.Totals.OK != 3 || st.Totals.Cached != 2 || st.Totals.In != 30 || st.Totals.Cost != 1.25 {
		t.Errorf("totals %+v", st.Totals)
	}
}

func TestStateNewAttemptStartsOver(t *testing.T) {
	s := scenarioSuspend()
	s.wait(200).add(event.RunStarted, map[string]any{"workflow": "examples/review.lua", "resumed": true, "attempt": 2})
	st := Fold(StateOptions{}, s.evs...)
	if st.Attempt != 2 || !st.Resumed || st.Status != "running" || st.Totals.Finished() != 0 || st.NumRows() != 0 {
		t.Errorf("attempt 2: %+v", st)
	}
}

func TestStateSanitizes(t *testing.T) {
	st := NewState(StateOptions{})
	st.Apply(event.Event{Type: event.AgentStarted, Data: map[string]any{"call_key": "k", "name": "evil\x1b[2Jname\r"}})
	st.Apply(event.Event{Type: event.AgentProgress, Data: map[string]any{"call_key": "k", "kind": "text",
		"text": "\x1b]0;title\x07red \x1b[31mtext\x1b[0m\tend\x08\n"}})
	st.Apply(event.Event{Type: event.Log, Data: map[string]any{"level": "info", "msg": "two\nlines \x1b[1mbold"}})
	a := st.Agent("k")
	if a.Name != "evilname" || a.Output() != "red text    end\n" || a.Last != "red text    end" {
		t.Errorf("agent: name %q output %q last %q", a.Name, a.Output(), a.Last)
	}
	if got := st.Logs()[0].Msg; got != "two lines bold" {
		t.Errorf("log %q", got)
	}
	frame := StatusView(st, time.Time{}, 80, NoColor(), time.UTC)
	for _, c := range frame {
		if c < 0x20 && c != '\n' || c == 0x7f {
			t.Fatalf("control character %q in the frame:\n%q", c, frame)
		}
	}
}

func TestStateCapsOutput(t *testing.T) {
	st := NewState(StateOptions{MaxOutput: 1000})
	st.Apply(event.Event{Type: event.AgentStarted, Data: map[string]any{"call_key": "k"}})
	for i := range 100 {
		st.Apply(event.Event{Type: event.AgentProgress, Data: map[string]any{"call_key": "k", "text": fmt.Sprintf("line %03d ü\n", i)}})
	}
	out := st.Agent("k").Output()
	if len(out) > 1000+len("…") || !strings.HasPrefix(out, "…line ") || !strings.HasSuffix(out, "line 099 ü\n") {
		t.Errorf("capped output (%d bytes) %q", len(out), out)
	}
}

// A run of many agents keeps bounded lists: finished agents are counted, not kept, and the
// lazy lists compact.
func TestStateManyAgents(t *testing.T) {
	st := NewState(StateOptions{})
	const n = 20000
	for i := range n {
		key := fmt.Sprintf("main/1/par[%d]/1", i)
		st.Apply(event.Event{Type: event.AgentStarted, Data: map[string]any{"call_key": key, "backend": "mock", "model": "m"}})
		if i >= 8 {
			st.Apply(event.Event{Type: event.AgentQueued, Data: map[string]any{"call_key": key, "lane": "mock/m", "position": i - 7}})
		}
	}
	if st.Count(Running) != 8 || st.Count(Queued) != n-8 {
		t.Fatalf("%d running %d queued", st.Count(Running), st.Count(Queued))
	}
	for i := range n {
		st.Apply(event.Event{Type: event.AgentDone, Data: map[string]any{"call_key": fmt.Sprintf("main/1/par[%d]/1", i), "status": "ok", "tokens": 3}})
		if i == n/2 {
			// Slots are handed on in order: 8 run, the rest wait.
			if r, q := st.Count(Running), st.Count(Queued); r != 8 || q != n-i-9 {
				t.Fatalf("after %d done: %d running %d queued", i+1, r, q)
			}
		}
	}
	if st.Totals.OK != n || len(st.agents) != 0 || st.NumRows() != 20 {
		t.Errorf("ok %d, %d active, %d rows", st.Totals.OK, len(st.agents), st.NumRows())
	}
	if len(st.running.items) > 64 || len(st.waiting.items) > 64 || len(st.queues["mock/m"].items) > 64 {
		t.Errorf("lists did not compact: %d running %d waiting %d queued entries",
			len(st.running.items), len(st.waiting.items), len(st.queues["mock/m"].items))
	}
}

func BenchmarkApply(b *testing.B) {
	evs := scenarioFanout().evs
	for b.Loop() {
		Fold(StateOptions{}, evs...)
	}
}

// View costs the same whatever the number of agents.
func BenchmarkViewManyAgents(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := NewModel(Options{Now: func() time.Time { return t0 }, Cancel: func() {}, Width: 120, Height: 40})
			for i := range n {
				m.Update(EventMsg(event.Event{Type: event.AgentStarted, TS: t0, Data: map[string]any{"call_key": fmt.Sprint(i), "backend": "mock"}}))
			}
			for b.Loop() {
				_ = m.View()
			}
		})
	}
}

// After a 429 the scheduler sends agent_retry (rate_limited) and then, as the turn meets
// its still-paused lane, rate_limit (retry_after) for the same wait: the summary counts
// one wait, not two. A wait that comes after the back-off has ended is a wait of its own.
func TestStateCountsA429WaitOnce(t *testing.T) {
	retry := map[string]any{"call_key": "k", "attempt": 2, "reason": "rate_limited", "wait_ms": 3910}
	pause := func(ms int) map[string]any {
		return map[string]any{"call_key": "k", "lane": "local/m", "action": "wait", "reason": "retry_after", "wait_ms": ms}
	}
	for _, tc := range []struct {
		name  string
		build func(s *script)
		waits int
		wait  time.Duration
	}{
		{"429 then its pause", func(s *script) { s.add(event.AgentRetry, retry).add(event.RateLimit, pause(3910)) }, 1, 3910 * time.Millisecond},
		{"429, its pause a little longer", func(s *script) {
			s.add(event.AgentRetry, retry).wait(0.01).add(event.RateLimit, pause(4000))
		}, 1, 4010 * time.Millisecond},
		{"429 alone", func(s *script) { s.add(event.AgentRetry, retry) }, 1, 3910 * time.Millisecond},
		{"a later wait of its own", func(s *script) {
			s.add(event.AgentRetry, retry).add(event.RateLimit, pause(3910)).wait(10).add(event.RateLimit, pause(2000))
		}, 2, 5910 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{}
			s.started().agent("k", "a", 0)
			tc.build(s)
			st := Fold(StateOptions{}, s.evs...)
			if st.Totals.RateWaits != tc.waits || st.Totals.RateWait != tc.wait {
				t.Fatalf("%d waits, %v in all; want %d, %v", st.Totals.RateWaits, st.Totals.RateWait, tc.waits, tc.wait)
			}
		})
	}
}

// The final frame shows no running or queued agents, even when the run ended without
// their agent_done (a stop, a crash, a viewer that joined late).
func TestRunDoneLeavesNothingRunning(t *testing.T) {
	s := scenarioFanout()
	s.wait(1).runDone("cancelled", "", 6, 0, 0, 17500, 2900, 0.07)
	st := Fold(StateOptions{}, s.evs...)
	if r, q := st.Count(Running), st.Count(Queued); r != 0 || q != 0 {
		t.Fatalf("%d running, %d queued after run_done; want none", r, q)
	}
	if a := st.Agent("main/2/par[9]/1"); a != nil {
		t.Fatalf("an agent is still listed as active: %+v", a)
	}
	m := live(s, 100, 40)
	if frame := m.View(); strings.Contains(frame, "running") && !strings.Contains(frame, "0 running") {
		t.Fatalf("the final frame shows running agents:\n%s", frame)
	}
}
