package tui

import (
	"fmt"
	"time"

	"github.com/luft-run/luft/event"
)

// The fixed clock of every test: events are stamped at t0 plus seconds.
var t0 = time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)

const runID = "0194a7c2-5e1f-7b3a-9c1d-2f3e4a5b6c7d"

// script builds an event sequence the way the runtime stamps it.
type script struct {
	evs      []event.Event
	at       float64        // seconds after t0 of the next event
	streamed map[string]int // call key → tokens its progress has reported
}

func (s *script) wait(sec float64) *script { s.at += sec; return s }

func (s *script) now() time.Time { return t0.Add(time.Duration(s.at * float64(time.Second))) }

func (s *script) add(typ string, data map[string]any) *script {
	s.evs = append(s.evs, event.Event{Seq: int64(len(s.evs) + 1), RunID: runID, TS: s.now(), Type: typ, Data: data})
	return s
}

func (s *script) started() *script {
	return s.add(event.RunStarted, map[string]any{"workflow": "examples/review.lua", "args": map[string]any{},
		"resumed": false, "attempt": 1})
}

func (s *script) plan(labels ...string) *script {
	phases := make([]any, 0, len(labels))
	for _, l := range labels {
		phases = append(phases, map[string]any{"label": l, "description": "the " + l + " step"})
	}
	return s.add(event.Plan, map[string]any{"reasoning": "scan, then review each file, then sum up", "phases": phases})
}

func (s *script) phase(id int, label string, planned int) *script {
	return s.add(event.PhaseStarted, map[string]any{"phase_id": id, "label": label, "planned": planned})
}

func (s *script) phaseDone(id int, label string, ok, failed int) *script {
	return s.add(event.PhaseDone, map[string]any{"phase_id": id, "label": label, "ok": ok, "failed": failed})
}

func (s *script) agent(key, name string, phase int) *script {
	return s.add(event.AgentStarted, map[string]any{"call_key": key, "name": name, "phase_id": phase,
		"backend": "openai", "model": "gpt-4o", "class": "interactive"})
}

func (s *script) progress(key, text string) *script {
	// tokens: what the runtime reports, the output streamed so far (here: a running
	// agent's progress lines so far count 300 tokens each).
	if s.streamed == nil {
		s.streamed = map[string]int{}
	}
	s.streamed[key] += 300
	return s.add(event.AgentProgress, map[string]any{"call_key": key, "kind": "text", "text": text, "tokens": s.streamed[key]})
}

func (s *script) queued(key string, pos int) *script {
	return s.add(event.AgentQueued, map[string]any{"call_key": key, "lane": "openai/gpt-4o", "position": pos})
}

func (s *script) done(key, name string, in, out int, elapsed time.Duration) *script {
	c := float64(in)*2.5e-6 + float64(out)*10e-6
	return s.add(event.AgentDone, map[string]any{"call_key": key, "name": name, "status": "ok", "cached": false,
		"tokens": in + out, "usage": map[string]any{"input": in, "output": out, "cached": 0}, "cost": c,
		"elapsed_ms": elapsed.Milliseconds(), "attempts": 1, "backend": "openai", "model": "gpt-4o"})
}

func (s *script) failed(key, name, status, msg string, elapsed time.Duration) *script {
	return s.add(event.AgentDone, map[string]any{"call_key": key, "name": name, "status": status, "cached": false,
		"tokens": 0, "usage": map[string]any{"input": 0, "output": 0, "cached": 0},
		"elapsed_ms": elapsed.Milliseconds(), "attempts": 1, "backend": "openai", "model": "gpt-4o", "error": msg})
}

func (s *script) log(level, msg string) *script {
	return s.add(event.Log, map[string]any{"level": level, "msg": msg})
}

func (s *script) runDone(status, errMsg string, ok, failed, cached, in, out int, cost float64) *script {
	d := map[string]any{"status": status, "tokens": in + out, "usage": map[string]any{"input": in, "output": out},
		"cost": cost, "elapsed_ms": int64(s.at * 1000), "agents": map[string]any{"ok": ok, "failed": failed, "cached": cached},
		"attempt": 1}
	if errMsg != "" {
		d["error"] = errMsg
	}
	return s.add(event.RunDone, d)
}

// Scenarios. Each returns the events and the time the frame is drawn at.

func scenarioStart() *script {
	s := &script{}
	s.started().plan("scan", "review", "summarize")
	s.wait(0.2).phase(1, "scan", 4)
	s.log("info", "scanning 4 folders")
	s.wait(0.1).agent("main/1/par[1]/1", "scan-cmd", 1).agent("main/1/par[2]/1", "scan-runtime", 1)
	s.wait(3).progress("main/1/par[1]/1", "Listing cmd/luft: 14 files\n")
	s.wait(2).progress("main/1/par[2]/1", "Reading runtime/service.go\n")
	s.wait(6.7)
	return s
}

// fanout: the scan is done and the review fans out over 40 files on a lane with 8 slots.
func scenarioFanout() *script {
	s := &script{}
	s.started().plan("scan", "review", "summarize")
	s.wait(0.2).phase(1, "scan", 4)
	for i := 1; i <= 4; i++ {
		s.agent(fmt.Sprintf("main/1/par[%d]/1", i), fmt.Sprintf("scan-%d", i), 1)
	}
	for i := 1; i <= 4; i++ {
		s.wait(1.5).done(fmt.Sprintf("main/1/par[%d]/1", i), fmt.Sprintf("scan-%d", i), 1800+i*100, 300+i*10, time.Duration(1500*i)*time.Millisecond)
	}
	s.phaseDone(1, "scan", 4, 0)
	s.wait(0.1).phase(2, "review", 40)
	s.log("info", "reviewing 40 files in parallel")
	s.add(event.ParallelStarted, map[string]any{"span_id": "main/2", "count": 40, "phase_id": 2})
	for i := 1; i <= 14; i++ {
		s.agent(fmt.Sprintf("main/2/par[%d]/1", i), fmt.Sprintf("review-%02d", i), 2)
		if i > 8 {
			s.queued(fmt.Sprintf("main/2/par[%d]/1", i), i-8)
		}
	}
	for i := 1; i <= 8; i++ {
		s.wait(0.4).progress(fmt.Sprintf("main/2/par[%d]/1", i), fmt.Sprintf("Looking at file %d of the change set\n", i))
	}
	// Two finish; their slots go to the first two queued.
	s.wait(20).done("main/2/par[1]/1", "review-01", 5200, 900, 23*time.Second)
	s.wait(2).done("main/2/par[2]/1", "review-02", 4100, 700, 25*time.Second)
	s.progress("main/2/par[9]/1", "Reading storage/sqlite.go\n")
	s.log("warn", "review-03 is taking long")
	s.wait(30)
	return s
}

// ratelimit: the lane's token budget is short: turns wait for the refill, one 429 retries.
func scenarioRateLimit() *script {
	s := scenarioFanout()
	s.add(event.RateLimit, map[string]any{"lane": "openai/gpt-4o", "action": "wait", "wait_ms": 8000,
		"reason": "tokens", "call_key": "main/2/par[11]/1", "until": s.now().Add(8 * time.Second).Format(time.RFC3339Nano)})
	s.wait(0.5).add(event.AgentRetry, map[string]any{"call_key": "main/2/par[3]/1", "attempt": 2, "reason": "rate_limited",
		"wait_ms": 4000, "error": "429 Too Many Requests"})
	s.wait(1.5)
	return s
}

// failure: an agent fails and the run fails with it.
func scenarioFailure() *script {
	s := scenarioFanout()
	s.failed("main/2/par[3]/1", "review-03", "error", "openai: 400 Bad Request: context length exceeded (131072 tokens)", 54*time.Second)
	for i := 4; i <= 10; i++ {
		if i == 9 || i == 10 {
			s.progress(fmt.Sprintf("main/2/par[%d]/1", i), "starting\n")
		}
		s.failed(fmt.Sprintf("main/2/par[%d]/1", i), fmt.Sprintf("review-%02d", i), "cancelled", "cancelled: another branch failed (fail_fast)", 50*time.Second)
	}
	for i := 11; i <= 14; i++ {
		s.failed(fmt.Sprintf("main/2/par[%d]/1", i), fmt.Sprintf("review-%02d", i), "cancelled", "cancelled", 0)
	}
	s.phaseDone(2, "review", 2, 12)
	s.wait(0.3).runDone("failed", "examples/review.lua:21: review-03 failed: openai: 400 Bad Request: context length exceeded (131072 tokens)",
		6, 12, 0, 16700, 2600, 0.0678)
	return s
}

// suspend: the wait for the lane's budget would exceed suspend_after; the run suspends.
func scenarioSuspend() *script {
	s := scenarioFanout()
	until := s.now().Add(3 * time.Minute)
	s.add(event.RateLimit, map[string]any{"lane": "openai/gpt-4o", "action": "suspend", "wait_ms": 180000,
		"reason": "tokens", "call_key": "main/2/par[11]/1", "until": until.Format(time.RFC3339Nano)})
	for i := 3; i <= 14; i++ {
		s.failed(fmt.Sprintf("main/2/par[%d]/1", i), fmt.Sprintf("review-%02d", i), "cancelled", "cancelled", 0)
	}
	s.wait(0.2).add(event.RunSuspended, map[string]any{"reason": "suspended by the scheduler: lane openai/gpt-4o: tokens budget short for 3m0s (suspend_after 2m0s)",
		"resume_after": until.Format(time.RFC3339Nano)})
	s.runDone("suspended", "suspended by the scheduler: lane openai/gpt-4o: tokens budget short for 3m0s (suspend_after 2m0s)",
		6, 12, 0, 16700, 2600, 0.0678)
	return s
}

// completed: a small run that ends well, with one call replayed from the journal.
func scenarioCompleted() *script {
	s := &script{}
	s.started()
	s.add(event.AgentDone, map[string]any{"call_key": "main/1", "name": "outline", "status": "ok", "cached": true,
		"tokens": 900, "usage": map[string]any{"input": 700, "output": 200}, "elapsed_ms": 0, "attempts": 1,
		"backend": "openai", "model": "gpt-4o"})
	s.wait(0.1).agent("main/2", "draft", 0)
	s.add(event.RateLimit, map[string]any{"lane": "openai/gpt-4o", "action": "wait", "wait_ms": 2500, "reason": "requests",
		"call_key": "main/2"})
	s.wait(14).done("main/2", "draft", 3000, 1200, 14*time.Second)
	s.add(event.Report, map[string]any{"value": "# Review"})
	s.wait(0.1).runDone("completed", "", 1, 0, 1, 3700, 1400, 0.0195)
	return s
}
