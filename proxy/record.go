package proxy

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
)

// workflowPrefix names the proxy's runs in the store: proxy:<caller> or proxy:<model>.
const workflowPrefix = "proxy:"

// The proxy records its runs through runtime.Service (OpenExternal): a run's record is
// a chain of writes, each durable when it returns. The run table decides the writes
// under its lock, in the order things happen to a run, and the turns make them once
// the lock is let go: each write of a run waits for the one before it, so the writes of
// one run keep their order and those of many runs share the store's commits.

// write is one write of a run's record: events and a row update, or the run's end.
type write struct {
	x    *runtime.External
	evs  []event.Event
	up   runtime.ExternalUpdate
	end  *runtime.ExternalEnd
	prev <-chan struct{} // closed when the run's write before this one is done
	done chan struct{}   // closed when this one is
}

// writes are the writes a table operation decided, to be made in order once the
// table's lock is let go.
type writes []*write

// queue adds a write of r's record, after the ones queued before it; nothing is queued
// for a run that is not recorded.
func (ws *writes) queue(r *run, w write) {
	if r.x == nil {
		return
	}
	w.x, w.prev, w.done = r.x, r.last, make(chan struct{})
	r.last = w.done
	*ws = append(*ws, &w)
}

// do makes the writes, each after the one before it of its run, and returns the first
// failure (a run's writes go on after one fails: each is a record of its own).
func (ws writes) do(ctx context.Context) error {
	var first error
	for _, w := range ws {
		if err := w.do(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (w *write) do(ctx context.Context) error {
	defer close(w.done)
	if w.prev != nil {
		<-w.prev
	}
	if w.end != nil {
		return w.x.Close(ctx, *w.end)
	}
	return w.x.Record(ctx, w.evs, w.up)
}

// workflowOf names a run: proxy:<caller>, or proxy:<model> for a run without a caller.
func workflowOf(ru *run) string {
	if ru.caller != "" && ru.caller != callerOr("") {
		return workflowPrefix + ru.caller
	}
	return workflowPrefix + ru.model
}

// runStarted opens a new run's record (written with its first turn) and marks it live
// until it ends.
func (t *table) runStarted(ru *run, now time.Time) error {
	if t.svc == nil {
		return nil
	}
	// idle_timeout_ms tells a viewer (the dashboard) the run is a conversation that ends by
	// itself after that long without a turn.
	args := map[string]any{"caller": ru.caller, "backend": ru.backend, "model": ru.model, "class": string(ru.class),
		"idle_timeout_ms": t.idle.Milliseconds()}
	if ru.clientID != "" {
		args["run"] = ru.clientID
	}
	x, err := t.svc.OpenExternal(runtime.ExternalSpec{ID: ru.id, Workflow: workflowOf(ru), Spec: specOf(ru, false),
		Args: args, CreatedAt: now})
	if err != nil {
		return err
	}
	ru.x = x
	return nil
}

// specOf is a run's stored spec: who it is for, and whether it is idle (no turn in
// flight), which status and list show as idle (see runtime.StatusIdle).
func specOf(ru *run, idle bool) json.RawMessage {
	sp := map[string]any{"proxy": map[string]string{"caller": ru.caller, "model": ru.model, "run": ru.clientID}}
	if idle {
		sp["idle"] = true
	}
	b, _ := json.Marshal(sp)
	return b
}

// turnStarted queues agent_started for a turn; the first turn in flight of a run that
// was idle makes it running again.
func (ws *writes) turnStarted(ru *run, turn int, class agent.Class, backend, model string, cont bool) {
	w := write{evs: []event.Event{event.New(event.AgentStarted, map[string]any{
		"call_key": callKey(turn), "name": "turn " + strconv.Itoa(turn), "backend": backend, "model": model,
		"class": string(class), "continuation": cont})}}
	if ru.inflight == 1 && turn > 1 {
		w.up.Spec = specOf(ru, false)
	}
	ws.queue(ru, w)
}

// turnDone queues agent_done and the run's new totals.
func (ws *writes) turnDone(ru *run, turn int, e turnEnd) {
	data := map[string]any{"call_key": callKey(turn), "name": "turn " + strconv.Itoa(turn), "status": e.status,
		"cached": false, "tokens": e.usage.Total(), "usage": e.usage, "elapsed_ms": e.elapsed.Milliseconds(),
		"wait_ms": e.wait.Milliseconds(), "attempts": e.attempts, "backend": e.backend, "model": ru.model}
	if e.cost > 0 {
		data["cost"] = e.cost
	}
	if e.errMsg != "" {
		data["error"] = e.errMsg
	}
	usage, cost := ru.usage, ru.cost
	counts := runtime.Counts{OK: ru.ok, Failed: ru.fail}
	w := write{evs: []event.Event{event.New(event.AgentDone, data)},
		up: runtime.ExternalUpdate{Usage: &usage, Cost: &cost, Agents: &counts}}
	if ru.inflight == 0 && !ru.ended {
		// The answer is the client's: the run waits for its next turn.
		w.up.Spec = specOf(ru, true)
	}
	ws.queue(ru, w)
}

// runEnded queues a run's end (it is stored completed, or cancelled); the run stops
// showing as live once its end is written.
func (ws *writes) runEnded(ru *run, now time.Time, reason string) {
	st := runtime.StatusCompleted
	if ru.cancelled {
		st = runtime.StatusCancelled
	}
	usage, cost := ru.usage, ru.cost
	counts := runtime.Counts{OK: ru.ok, Failed: ru.fail}
	ws.queue(ru, write{end: &runtime.ExternalEnd{Status: st, FinishedAt: now,
		Done: map[string]any{"tokens": ru.usage.Total(), "cost": ru.cost, "elapsed_ms": now.Sub(ru.started).Milliseconds(),
			"turns": ru.turns, "reason": reason},
		Update: runtime.ExternalUpdate{Usage: &usage, Cost: &cost, Agents: &counts}}})
}

// notice records what the scheduler said about a waiting turn. The scheduler's notices
// must not wait for the disk, so it is written on a goroutine of its own, in its place
// among the run's writes: the turn's end waits for it.
func (t *table) notice(ru *run, ev event.Event) {
	var ws writes
	t.mu.Lock()
	ws.queue(ru, write{evs: []event.Event{ev}})
	t.mu.Unlock()
	if len(ws) == 0 {
		return
	}
	go func() {
		if err := ws.do(context.Background()); err != nil {
			t.log.Printf("run %s: %v", ru.id, err)
		}
	}()
}

func callKey(turn int) string { return "turn/" + strconv.Itoa(turn) }
