package proxy

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// workflowPrefix names the proxy's runs in the store: proxy:<caller> or proxy:<model>.
const workflowPrefix = "proxy:"

// recorder writes the proxy's runs and their turns to the store on a goroutine of its
// own, so a turn pays a channel send for its bookkeeping, not a commit. Writes keep
// their order; a full queue makes turns wait (backpressure) rather than drop records.
type recorder struct {
	store storage.Store
	host  RunHost
	log   *log.Logger
	pid   int
	idle  time.Duration // a run with no turn for this long ends (Options.IdleTTL)

	mu     sync.RWMutex // guards ops against close
	ops    chan recOp
	closed bool
	done   chan struct{}
}

// recOp is one write: a run to create, events to append, the run's row to update.
type recOp struct {
	create *storage.Run
	runID  string
	events []event.Event
	update *storage.RunUpdate
	synced chan struct{} // closed once everything queued before it is written
}

func newRecorder(store storage.Store, host RunHost, lg *log.Logger, idle time.Duration) *recorder {
	r := &recorder{store: store, host: host, log: lg, pid: os.Getpid(), idle: idle, done: make(chan struct{})}
	if store == nil {
		close(r.done)
		return r
	}
	r.ops = make(chan recOp, 4096)
	go r.loop()
	return r
}

func (r *recorder) send(op recOp) {
	if r.store == nil {
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	r.ops <- op
}

// close writes what is queued and stops the goroutine.
func (r *recorder) close() {
	if r.store == nil {
		return
	}
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ops)
	}
	r.mu.Unlock()
	<-r.done
}

// linger is how long the recorder gathers operations before it writes them: turns of
// many runs then share a few commits instead of paying three each.
const linger = 50 * time.Millisecond

// appender is a store that can queue events without waiting for their commit
// (storage.SQLite), so the events of many runs go in one transaction.
type appender interface {
	AppendAsync(ctx context.Context, runID string, evs ...event.Event) (wait func() ([]event.Event, error))
}

// loop writes the queued operations, a batch at a time: the events of one run within
// a batch go in one append, and only its last row update is applied.
func (r *recorder) loop() {
	defer close(r.done)
	ctx := context.Background()
	batch := make([]recOp, 0, 1024)
	timer := time.NewTimer(linger)
	timer.Stop()
	for op := range r.ops {
		batch = append(batch[:0], op)
		timer.Reset(linger)
	gather:
		for len(batch) < cap(batch) {
			select {
			case op, ok := <-r.ops:
				if !ok {
					break gather
				}
				batch = append(batch, op)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		r.write(ctx, batch)
		for _, op := range batch {
			if op.synced != nil {
				close(op.synced)
			}
		}
	}
}

// sync waits until everything queued so far is written.
func (r *recorder) sync() {
	if r.store == nil {
		return
	}
	done := make(chan struct{})
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return
	}
	r.ops <- recOp{synced: done}
	r.mu.RUnlock()
	<-done
}

func (r *recorder) write(ctx context.Context, batch []recOp) {
	var (
		order   []string
		events  = map[string][]event.Event{}
		updates = map[string]*storage.RunUpdate{}
		seen    = map[string]bool{}
	)
	for _, op := range batch {
		if op.create != nil {
			// Created before anything else of the batch: a run's creation is queued
			// before its events.
			if err := r.store.CreateRun(ctx, *op.create); err != nil {
				r.log.Printf("run %s: store: %v", op.create.ID, err)
			}
		}
		if !seen[op.runID] {
			seen[op.runID] = true
			order = append(order, op.runID)
		}
		events[op.runID] = append(events[op.runID], op.events...)
		if op.update != nil {
			if prev := updates[op.runID]; prev != nil {
				updates[op.runID] = merged(prev, op.update)
			} else {
				updates[op.runID] = op.update
			}
		}
	}
	type pending struct {
		id   string
		wait func() ([]event.Event, error)
	}
	var waits []pending
	for _, id := range order {
		evs := events[id]
		if len(evs) == 0 {
			continue
		}
		if a, ok := r.store.(appender); ok {
			waits = append(waits, pending{id, a.AppendAsync(ctx, id, evs...)})
		} else if _, err := r.store.Append(ctx, id, evs...); err != nil {
			r.log.Printf("run %s: store events: %v", id, err)
		}
	}
	// Row updates run side by side, so the store commits them together.
	var wg sync.WaitGroup
	for _, id := range order {
		if u := updates[id]; u != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.store.UpdateRun(ctx, id, *u); err != nil {
					r.log.Printf("run %s: store: %v", id, err)
				}
			}()
		}
	}
	for _, p := range waits {
		if _, err := p.wait(); err != nil {
			r.log.Printf("run %s: store events: %v", p.id, err)
		}
	}
	wg.Wait()
}

// merged is the row update of prev then next, in one: next's fields win, except that a
// run's end (its status, finish and error) stays once recorded — a turn that ended
// after its run does not undo it, nor does a later spec make an ended run idle.
func merged(prev, next *storage.RunUpdate) *storage.RunUpdate {
	m := *prev
	if next.Usage != nil {
		m.Usage = next.Usage
	}
	if next.Cost != nil {
		m.Cost = next.Cost
	}
	if next.Agents != nil {
		m.Agents = next.Agents
	}
	if prev.Status == nil {
		m.Status, m.FinishedAt, m.Error = next.Status, next.FinishedAt, next.Error
		if next.Spec != nil {
			m.Spec = next.Spec
		}
	}
	return &m
}

// workflowOf names a run: proxy:<caller>, or proxy:<model> for a run without a caller.
func workflowOf(ru *run) string {
	if ru.caller != "" && ru.caller != callerOr("") {
		return workflowPrefix + ru.caller
	}
	return workflowPrefix + ru.model
}

// runStarted records a new run and marks it live; the returned func unmarks it.
func (r *recorder) runStarted(ru *run, now time.Time) (release func()) {
	release = func() {}
	if r.store == nil {
		return release
	}
	row := storage.Run{ID: ru.id, Workflow: workflowOf(ru), Status: storage.StatusRunning, Attempt: 1, PID: r.pid,
		CreatedAt: now, Spec: specOf(ru, false)}
	// idle_timeout_ms tells a viewer (the dashboard) the run is a conversation that ends by
	// itself after that long without a turn.
	args := map[string]any{"caller": ru.caller, "backend": ru.backend, "model": ru.model, "class": string(ru.class),
		"idle_timeout_ms": r.idle.Milliseconds()}
	if ru.clientID != "" {
		args["run"] = ru.clientID
	}
	r.send(recOp{create: &row, runID: ru.id, events: []event.Event{event.New(event.RunStarted,
		map[string]any{"workflow": row.Workflow, "args": args, "resumed": false, "attempt": 1})}})
	if r.host != nil {
		release = r.host.Host(ru.id)
	}
	return release
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

// turnStarted records agent_started for a turn; the first turn in flight of a run that
// was idle makes it running again.
func (r *recorder) turnStarted(ru *run, turn int, class agent.Class, backend, model string, cont bool, now time.Time) {
	if r.store == nil {
		return
	}
	op := recOp{runID: ru.id, events: []event.Event{event.New(event.AgentStarted, map[string]any{
		"call_key": callKey(turn), "name": "turn " + strconv.Itoa(turn), "backend": backend, "model": model,
		"class": string(class), "continuation": cont})}}
	if ru.inflight == 1 && turn > 1 {
		spec := specOf(ru, false)
		op.update = &storage.RunUpdate{Spec: &spec}
	}
	r.send(op)
}

// notice records what the scheduler said about a waiting turn.
func (r *recorder) notice(runID string, ev event.Event) {
	if r.store == nil {
		return
	}
	r.send(recOp{runID: runID, events: []event.Event{ev}})
}

// turnDone records agent_done and the run's new totals.
func (r *recorder) turnDone(ru *run, turn int, e turnEnd) {
	if r.store == nil {
		return
	}
	data := map[string]any{"call_key": callKey(turn), "name": "turn " + strconv.Itoa(turn), "status": e.status,
		"cached": false, "tokens": e.usage.Total(), "usage": e.usage, "elapsed_ms": e.elapsed.Milliseconds(),
		"wait_ms": e.wait.Milliseconds(), "attempts": e.attempts, "backend": e.backend, "model": ru.model}
	if e.cost > 0 {
		data["cost"] = e.cost
	}
	if e.errMsg != "" {
		data["error"] = e.errMsg
	}
	usage, cost := storage.Usage(ru.usage), ru.cost
	counts := storage.AgentCounts{OK: ru.ok, Failed: ru.fail}
	up := &storage.RunUpdate{Usage: &usage, Cost: &cost, Agents: &counts}
	if ru.inflight == 0 && !ru.ended {
		// The answer is the client's: the run waits for its next turn.
		spec := specOf(ru, true)
		up.Spec = &spec
	}
	r.send(recOp{runID: ru.id, events: []event.Event{event.New(event.AgentDone, data)}, update: up})
}

// runEnded records a run's end (it is stored completed, or cancelled) and unmarks it.
func (r *recorder) runEnded(ru *run, now time.Time, reason string) {
	if ru.release != nil {
		ru.release()
	}
	if r.store == nil {
		return
	}
	st := storage.StatusCompleted
	if ru.cancelled {
		st = storage.StatusCancelled
	}
	usage, cost := storage.Usage(ru.usage), ru.cost
	counts := storage.AgentCounts{OK: ru.ok, Failed: ru.fail}
	fin := now
	r.send(recOp{runID: ru.id, events: []event.Event{event.New(event.RunDone, map[string]any{
		"status": st, "tokens": ru.usage.Total(), "cost": ru.cost, "elapsed_ms": now.Sub(ru.started).Milliseconds(),
		"turns": ru.turns, "reason": reason})},
		update: &storage.RunUpdate{Status: &st, FinishedAt: &fin, Usage: &usage, Cost: &cost, Agents: &counts}})
}

// endStale ends a proxy run its process left running, at once.
func (r *recorder) endStale(ctx context.Context, row storage.Run, now time.Time) {
	st, msg := storage.StatusCompleted, "ended: the proxy that hosted it stopped"
	if _, err := r.store.Append(ctx, row.ID, event.New(event.RunDone, map[string]any{"status": st, "reason": msg})); err != nil {
		r.log.Printf("run %s: store: %v", row.ID, err)
	}
	if err := r.store.UpdateRun(ctx, row.ID, storage.RunUpdate{Status: &st, FinishedAt: &now, Error: &msg}); err != nil {
		r.log.Printf("run %s: store: %v", row.ID, err)
	}
}

func callKey(turn int) string { return "turn/" + strconv.Itoa(turn) }
