package proxy

import (
	"container/list"
	"context"
	"errors"
	"io"
	"log"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/runtime"
)

// run is one agent's conversation as the proxy tracks it.
type run struct {
	id       string // luft's run id (stored)
	clientID string // x-luft-run-id, "" when recognised by tool_call ids
	caller   string
	backend  string // the upstream of its first turn
	model    string
	class    agent.Class
	started  time.Time
	lastTurn time.Time // the last turn's start or end: idle runs expire from here
	// callStart is when the turn that began the current tool loop was admitted: a
	// continuation ranks by it.
	callStart time.Time
	turns     int
	inflight  int
	context   int // tokens of its last turn's prompt and answer, the conversation so far
	usage     agent.Usage
	cost      float64
	ok, fail  int
	elem      *list.Element   // in table.lru
	ids       []*list.Element // its entries in table.toolOrder
	ended     bool
	cancelled bool
	// stops cancels the turns in flight, by turn number (luft cancel).
	stops map[int]context.CancelCauseFunc
	// x records the run (nil = not recorded); last is closed when the last write queued
	// for it is done (see writes).
	x    *runtime.External
	last <-chan struct{}
}

// toolEntry is one tool_call id a response of run handed out.
type toolEntry struct {
	key string // caller \x00 id
	run *run
}

// table holds the live runs and the tool_call ids that lead back to them. Both are
// bounded: beyond maxRuns the least recently active idle run ends; beyond maxIDs the
// oldest ids are forgotten (a harness that echoes one of them then starts a new run).
type table struct {
	mu        sync.Mutex
	byClient  map[string]*run // caller \x00 x-luft-run-id
	byID      map[string]*run // luft's run id
	tools     map[string]*list.Element
	toolOrder *list.List // of *toolEntry, oldest first
	lru       *list.List // of *run, least recently active first
	maxRuns   int
	maxIDs    int
	svc       *runtime.Service // records the runs; nil = not recorded
	idle      time.Duration    // a run with no turn for this long ends (Options.IdleTTL)
	log       *log.Logger
}

func newTable(maxRuns, maxIDs int, svc *runtime.Service, idle time.Duration, lg *log.Logger) *table {
	if lg == nil {
		lg = log.New(io.Discard, "", 0)
	}
	return &table{byClient: map[string]*run{}, byID: map[string]*run{}, tools: map[string]*list.Element{},
		toolOrder: list.New(), lru: list.New(), maxRuns: maxRuns, maxIDs: maxIDs, svc: svc, idle: idle, log: lg}
}

// joined is what join tells a turn about its run.
type joined struct {
	run          *run
	id           string // the run's luft id
	turn         int    // the turn's number in the run, from 1
	continuation bool
	callStart    time.Time
	runStart     time.Time
	context      int // the run's conversation so far in tokens, as its last turn left it
}

// join finds or starts the run of a turn and counts the turn in it. clientID is the
// x-luft-run-id ("" = none), echoed the tool_call ids the request's messages carry (the
// most recent first), cont whether its last message is a tool result; stop, when set,
// cancels the turn should the run be cancelled. The writes it returns (the turn's
// agent_started, the ends of runs it made room by) are the caller's to make.
func (t *table) join(caller, clientID string, class agent.Class, backend, model string, echoed []string, cont bool, stop context.CancelCauseFunc, now time.Time) (joined, writes) {
	var ws writes
	t.mu.Lock()
	defer t.mu.Unlock()
	var r *run
	if clientID != "" {
		r = t.byClient[caller+"\x00"+clientID]
	} else {
		for _, id := range echoed {
			if e, ok := t.tools[caller+"\x00"+id]; ok {
				r = e.Value.(*toolEntry).run
				break
			}
		}
	}
	if r == nil {
		r = t.startLocked(caller, clientID, class, backend, model, now, &ws)
	}
	r.turns++
	r.inflight++
	r.lastTurn = now
	t.lru.MoveToBack(r.elem)
	j := joined{run: r, id: r.id, turn: r.turns, continuation: cont && r.turns > 1, runStart: r.started, context: r.context}
	if stop != nil {
		if r.stops == nil {
			r.stops = map[int]context.CancelCauseFunc{}
		}
		r.stops[j.turn] = stop
	}
	if j.continuation {
		j.callStart = r.callStart
	}
	ws.turnStarted(r, j.turn, class, backend, model, j.continuation)
	return j, ws
}

// startLocked begins a run.
func (t *table) startLocked(caller, clientID string, class agent.Class, backend, model string, now time.Time, ws *writes) *run {
	for len(t.byID) >= t.maxRuns {
		var victim *run
		for e := t.lru.Front(); e != nil; e = e.Next() {
			if r := e.Value.(*run); r.inflight == 0 {
				victim = r
				break
			}
		}
		if victim == nil {
			break // every run has a turn in flight: go over the bound rather than refuse
		}
		t.endLocked(victim, now, "ended to make room: the proxy tracks at most its max runs", ws)
	}
	id, err := uuid.NewV7()
	if err != nil {
		id = uuid.New()
	}
	r := &run{id: id.String(), clientID: clientID, caller: caller, backend: backend, model: model, class: class, started: now, lastTurn: now}
	r.elem = t.lru.PushBack(r)
	t.byID[r.id] = r
	if clientID != "" {
		t.byClient[caller+"\x00"+clientID] = r
	}
	if err := t.runStarted(r, now); err != nil {
		t.log.Printf("run %s: %v", r.id, err)
	}
	return r
}

// admitted records the admission of a turn: a turn that begins a tool loop sets the
// time its continuations rank by.
func (t *table) admitted(j joined, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !j.continuation || j.run.callStart.IsZero() {
		j.run.callStart = now
	}
}

// turnEnd is how a turn ended.
type turnEnd struct {
	ok       bool
	status   string // agent_done's status
	errMsg   string
	usage    agent.Usage
	cost     float64
	elapsed  time.Duration
	wait     time.Duration // queued in luft before the first admission
	backend  string        // the upstream that answered (a fallback's name when it did)
	attempts int
	ids      []string // tool_call ids the response handed out
	// unrecorded: the turn's start could not be recorded, so it was refused: it counts
	// in nothing and its end is not recorded either.
	unrecorded bool
}

// finish counts a finished turn and remembers the tool_call ids its response handed
// out; the caller makes the write it returns (agent_done, the run's totals).
func (t *table) finish(j joined, e turnEnd, now time.Time) writes {
	var ws writes
	t.mu.Lock()
	defer t.mu.Unlock()
	r := j.run
	r.inflight--
	delete(r.stops, j.turn)
	if e.unrecorded {
		return nil
	}
	r.lastTurn = now
	r.usage = r.usage.Add(e.usage)
	if e.ok {
		r.context = e.usage.Input + e.usage.Output
	}
	r.cost += e.cost
	if e.ok {
		r.ok++
	} else {
		r.fail++
	}
	ws.turnDone(r, j.turn, e)
	if r.ended {
		return ws
	}
	t.lru.MoveToBack(r.elem)
	for _, id := range e.ids {
		key := r.caller + "\x00" + id
		if old, ok := t.tools[key]; ok {
			t.dropID(old)
		}
		el := t.toolOrder.PushBack(&toolEntry{key: key, run: r})
		t.tools[key] = el
		r.ids = append(r.ids, el)
	}
	for t.toolOrder.Len() > t.maxIDs {
		t.dropID(t.toolOrder.Front())
	}
	return ws
}

// dropID forgets one tool_call id.
func (t *table) dropID(el *list.Element) {
	te := el.Value.(*toolEntry)
	t.toolOrder.Remove(el)
	if t.tools[te.key] == el {
		delete(t.tools, te.key)
	}
	// The run's own list keeps a stale pointer until it ends; removing a removed element
	// is a no-op in container/list.
}

// end ends the run the caller names by its x-luft-run-id or by luft's id; it returns
// luft's id, and the write of its end for the caller to make.
func (t *table) end(caller, id string, now time.Time, reason string) (string, bool, writes) {
	var ws writes
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.byClient[caller+"\x00"+id]
	if r == nil {
		if byID := t.byID[id]; byID != nil && byID.caller == caller {
			r = byID
		}
	}
	if r == nil {
		return "", false, nil
	}
	t.endLocked(r, now, reason, &ws)
	return r.id, true, ws
}

// endLocked forgets a run and queues the write of its end.
func (t *table) endLocked(r *run, now time.Time, reason string, ws *writes) {
	if r.ended {
		return
	}
	r.ended = true
	delete(t.byID, r.id)
	if r.clientID != "" && t.byClient[r.caller+"\x00"+r.clientID] == r {
		delete(t.byClient, r.caller+"\x00"+r.clientID)
	}
	for _, el := range r.ids {
		te := el.Value.(*toolEntry)
		if t.tools[te.key] == el {
			delete(t.tools, te.key)
			t.toolOrder.Remove(el)
		}
	}
	r.ids = nil
	t.lru.Remove(r.elem)
	ws.runEnded(r, now, reason)
}

// ErrRunCancelled is the cause of a turn whose run was cancelled (luft cancel, the
// dashboard).
var ErrRunCancelled = errors.New("its luft run was cancelled")

// cancel ends the runs among ids that this table holds, stopping their turns in flight.
func (t *table) cancel(ids []string, now time.Time) writes {
	var ws writes
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		r := t.byID[id]
		if r == nil {
			continue
		}
		r.cancelled = true
		for _, stop := range r.stops {
			stop(ErrRunCancelled)
		}
		t.endLocked(r, now, "cancelled by request", &ws)
	}
	return ws
}

// expire ends the runs with no turn in flight and none for ttl.
func (t *table) expire(now time.Time, ttl time.Duration) writes {
	var ws writes
	t.mu.Lock()
	defer t.mu.Unlock()
	for e := t.lru.Front(); e != nil; {
		next := e.Next()
		r := e.Value.(*run)
		if now.Sub(r.lastTurn) < ttl {
			break // the rest were active later
		}
		if r.inflight == 0 {
			t.endLocked(r, now, "idle for "+ttl.String(), &ws)
		}
		e = next
	}
	return ws
}

// endAll ends every run.
func (t *table) endAll(now time.Time, reason string) writes {
	var ws writes
	t.mu.Lock()
	defer t.mu.Unlock()
	for e := t.lru.Front(); e != nil; {
		next := e.Next()
		t.endLocked(e.Value.(*run), now, reason, &ws)
		e = next
	}
	return ws
}

// size returns the runs and tool_call ids tracked.
func (t *table) size() (runs, ids int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID), len(t.tools)
}
