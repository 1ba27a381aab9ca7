package runtime

import (
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// newLimitedEngine is newEngine with event limits.
func newLimitedEngine(t *testing.T, lim EventLimits) *Service {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", &scripted{reply: echo}),
		Scheduler: scheduler.NewGate(4), Backoff: func(int) time.Duration { return 0 }, Events: lim})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A run that reaches an event limit fails with a limit error naming the limit and the
// script line, its run_done is stored, and nothing past the limit is.
func TestEventLimitsEndTheRun(t *testing.T) {
	cases := []struct {
		name, src string
		lim       EventLimits
		want      string
		maxEvents int
	}{
		{"count", `function main()
  for i = 1, 1000000 do phase("p" .. i) end
end`, EventLimits{MaxEvents: 200}, "limits.max_events", 200 + 4}, // + the phase_done of the phases the VM was in, run_done
		{"bytes", `function main()
  local s = string.rep("x", 10000)
  for i = 1, 1000000 do log(s) end
end`, EventLimits{MaxTotalBytes: 100000}, "limits.max_events_bytes", 11 + 1},
		{"agents still finish", `function main()
  parallel({1,2,3,4,5,6,7,8}, function(i)
    for j = 1, 100 do log("x") end
    return agent{prompt = "p" .. i}
  end)
  for i = 1, 1000000 do log("y") end
end`, EventLimits{MaxEvents: 300}, "limits.max_events", 300 + 8 + 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newLimitedEngine(t, c.lim)
			r := start(t, e, c.src)
			evs := collect(t, r)
			res := r.Wait()
			if res.Status != StatusFailed || lua.ErrorKindOf(res.Err) != lua.KindLimit {
				t.Fatalf("status %s, error %v; want failed with a limit error", res.Status, res.Err)
			}
			msg := res.Err.Error()
			if !strings.Contains(msg, c.want) || !strings.Contains(msg, "t.lua:") {
				t.Errorf("error %q does not name %s and the script line", msg, c.want)
			}
			if len(evs) == 0 || evs[len(evs)-1].Type != event.RunDone {
				t.Fatalf("the last event is not run_done")
			}
			if len(evs) > c.maxEvents {
				t.Errorf("%d events stored, want at most %d", len(evs), c.maxEvents)
			}
			// Every phase that started ends in the record (the one the limit refused to
			// start is recorded as done too: the script was in it).
			if started, done := len(ofType(evs, event.PhaseStarted)), len(ofType(evs, event.PhaseDone)); done < started || done > started+1 {
				t.Errorf("%d phases started, %d done", started, done)
			}
		})
	}
}

// Each event's payload is capped: a long string is cut with a marker, a huge structure
// replaced by one, and the event is still stored.
func TestEventPayloadCapped(t *testing.T) {
	e := newLimitedEngine(t, EventLimits{MaxEventBytes: 4096})
	r := start(t, e, `function main()
  log(string.rep("a", 100000))
  local t = {}
  for i = 1, 5000 do t[i] = i end
  phase{label = "p", description = string.rep("d", 50000)}
  report(t)
end`, func(s *Spec) { s.Limits.MaxReportBytes = 1 << 20 })
	evs := collect(t, r)
	if res := r.Wait(); res.Status != StatusCompleted {
		t.Fatalf("run %s: %v", res.Status, res.Err)
	}
	for _, ev := range evs {
		if n := event.Size(ev.Data); n > 4096+64 {
			t.Errorf("%s event stored with %d bytes of payload", ev.Type, n)
		}
	}
	logs := ofType(evs, event.Log)
	if len(logs) != 1 || !strings.Contains(logs[0].Data["msg"].(string), "cut by luft") {
		t.Fatalf("log not stored cut with a marker: %v", logs)
	}
	reports := ofType(evs, event.Report)
	if len(reports) != 1 || !strings.Contains(reports[0].Data["value"].(string), "limits.max_event_bytes") {
		t.Fatalf("huge report event not replaced by a marker: %v", reports)
	}
}

// The default limits leave an ordinary run alone.
func TestEventLimitsDefaults(t *testing.T) {
	l := EventLimits{}.withDefaults()
	if l != DefaultEventLimits {
		t.Fatalf("defaults %+v, want %+v", l, DefaultEventLimits)
	}
	if err := l.check(1000, 1<<20); err != nil {
		t.Fatalf("a small run is over the limits: %v", err)
	}
}

// A run's error message is capped; its kind survives the cut.
func TestRunErrorCapped(t *testing.T) {
	e := newLimitedEngine(t, EventLimits{})
	r := start(t, e, `function main() error(string.rep("e", 5000000)) end`)
	res := r.Wait()
	if lua.ErrorKindOf(res.Err) != lua.KindRuntime {
		t.Fatalf("error kind %q, want runtime (%.200v)", lua.ErrorKindOf(res.Err), res.Err)
	}
	if msg := res.Err.Error(); len(msg) > maxErrorBytes || !strings.Contains(msg, "cut by luft") {
		t.Fatalf("error message of %d bytes, want at most %d with a marker", len(msg), maxErrorBytes)
	}
}

// A subscriber that never reads does not hold up the run: events are read from the log
// at the subscriber's pace.
func TestSlowSubscriberDoesNotBlockTheRun(t *testing.T) {
	e := newLimitedEngine(t, EventLimits{})
	r := start(t, e, `function main() for i = 1, 5000 do log("x" .. i) end end`)
	_ = r.Subscribe(t.Context(), 0) // never read
	select {
	case <-r.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end while a subscriber did not read")
	}
	if res := r.Wait(); res.Status != StatusCompleted {
		t.Fatalf("run %s: %v", res.Status, res.Err)
	}
}

// The events limit counts one attempt: a resumed run starts with a fresh count, so a run
// stopped near the limit (suspended, cancelled) can go on; the earlier attempts' events
// stay in the log.
func TestEventLimitPerAttempt(t *testing.T) {
	e := newLimitedEngine(t, EventLimits{MaxEvents: 100})
	src := `function main()
  for i = 1, 1000 do log("x" .. i) end
end`
	first := start(t, e, src)
	if res := first.Wait(); lua.ErrorKindOf(res.Err) != lua.KindLimit {
		t.Fatalf("first attempt: %s %v, want a limit error", res.Status, res.Err)
	}
	r, err := e.Resume(t.Context(), ResumeSpec{Run: first.ID})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, r)
	if res := r.Wait(); lua.ErrorKindOf(res.Err) != lua.KindLimit {
		t.Fatalf("second attempt: %s %v, want a limit error", res.Status, res.Err)
	}
	// The second attempt's log events: those after its run_started.
	second, in := 0, false
	for _, ev := range evs {
		in = in || ev.Type == event.RunStarted && AttemptOf(ev) == 2
		if in && ev.Type == event.Log {
			second++
		}
	}
	if second != 99 {
		t.Fatalf("the second attempt recorded %d log events, want a fresh count: 99 (100 with its run_started)", second)
	}
}
