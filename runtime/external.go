package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// External runs are the runs a door records but does not drive with a VM: the
// conversations of agents that keep their own tool loop and send their turns through
// the proxy. OpenExternal, External.Record and External.Close are the one way a door
// records such a run. Each write is durable when it returns (SPEC §5: persisted before
// it is shown, never dropped), and a write the state dir refuses is returned to the
// door, which tells its client, and to the watcher of NotifyUnrecorded (the daemon's
// status). Writes of many runs at once share the store's commits (its writer batches
// them), so a run pays its own wait for the disk, not a commit of its own.

// ExternalSpec describes an external run.
type ExternalSpec struct {
	ID       string // required: the run's id (a UUIDv7 string)
	Workflow string // its name in list and status (proxy:<caller>)
	// Spec is stored as the run's spec: what its door needs to show it. "idle": true in it
	// shows the run idle (StatusIdle).
	Spec      json.RawMessage
	Args      map[string]any // run_started's args
	CreatedAt time.Time      // zero = Options.Now
}

// ExternalUpdate is what a record changes on an external run's row; nil fields stay
// as they are.
type ExternalUpdate struct {
	Usage  *agent.Usage
	Cost   *float64
	Agents *Counts
	Spec   json.RawMessage
}

// ExternalEnd is how an external run ended.
type ExternalEnd struct {
	Status Status // StatusCompleted or StatusCancelled
	Error  string // the row's error; "" = none
	// Done holds run_done's fields besides status (tokens, cost, elapsed_ms, reason, ...).
	Done       map[string]any
	Update     ExternalUpdate
	FinishedAt time.Time // zero = Options.Now
}

// External is an open external run. Its row and run_started are written with its
// first record, so a run that never records a turn leaves nothing behind; a first
// record the state dir refused is tried again by the next. It is safe for concurrent
// use: its records are written one at a time, in the order they are made.
type External struct {
	s    *Service
	spec ExternalSpec

	mu      sync.Mutex // held across a write: one at a time, in order
	created bool
	ended   bool
	release func()
}

// OpenExternal opens an external run. Until it is closed, Status and List show it as
// running (or idle) rather than interrupted: this process drives it. Nothing is written
// yet: see External.
func (s *Service) OpenExternal(spec ExternalSpec) (*External, error) {
	if spec.ID == "" {
		return nil, errors.New("runtime: open an external run: ExternalSpec.ID is empty")
	}
	if spec.CreatedAt.IsZero() {
		spec.CreatedAt = s.opts.Now()
	}
	return &External{s: s, spec: spec, release: s.host(spec.ID)}, nil
}

// ID is the run's id.
func (x *External) ID() string { return x.spec.ID }

// Record stores evs in the run's log, then up on its row, and returns once both are
// durable. A record after Close is still stored (the end of a turn that outlived its
// run): its events follow run_done, and the row keeps the run's end.
func (x *External) Record(ctx context.Context, evs []event.Event, up ExternalUpdate) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended && !x.created {
		return fmt.Errorf("record run %s (%s): it ended before anything of it was recorded", x.spec.ID, x.spec.Workflow)
	}
	return x.s.noted(x.write(ctx, evs, rowUpdate(up)))
}

// Close records the run's end (run_done, then the row's status) and stops showing it
// as driven by this process. It returns once the end is durable; a second Close does
// nothing.
func (x *External) Close(ctx context.Context, end ExternalEnd) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ended {
		return nil
	}
	x.ended = true
	defer x.release()
	if !x.created {
		// Never recorded (it had no turn, or its first record failed): there is no row
		// to end.
		return nil
	}
	if end.FinishedAt.IsZero() {
		end.FinishedAt = x.s.opts.Now()
	}
	done := make(map[string]any, len(end.Done)+1)
	for k, v := range end.Done {
		done[k] = v
	}
	done["status"] = string(end.Status)
	up := rowUpdate(end.Update)
	st := string(end.Status)
	up.Status, up.FinishedAt = &st, &end.FinishedAt
	if end.Error != "" {
		up.Error = &end.Error
	}
	// run_done is stored with or before the row that says the run ended, as for a VM's runs.
	return x.s.noted(x.write(ctx, []event.Event{event.New(event.RunDone, done)}, up))
}

// runRecorder is implemented by stores that make a run's creation, events and row
// update in one transaction (storage.SQLite, storage.Postgres).
type runRecorder interface {
	RecordRun(ctx context.Context, runID string, rec storage.RunRecord) ([]event.Event, error)
}

// row is the run's row as its first record creates it.
// On a leased node (Options.Lease) it is held under the node's lease from its creation.
func (x *External) row() storage.Run {
	sp := x.spec
	return storage.Run{ID: sp.ID, Workflow: sp.Workflow, Status: storage.StatusRunning,
		Attempt: 1, PID: x.s.opts.PID, Node: x.s.opts.Node, LeaseUntil: x.s.leaseUntil(),
		CreatedAt: sp.CreatedAt, Spec: markExternal(sp.Spec)}
}

// externalKey marks a stored spec as an external run's (IsExternal).
const externalKey = "external"

// markExternal is spec with externalKey set, so that a node taking the run over knows
// it cannot resume it (EndTakenOver). A spec that is not a JSON object is kept as it is.
func markExternal(spec json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if len(spec) == 0 {
		m = map[string]json.RawMessage{}
	} else if json.Unmarshal(spec, &m) != nil || m == nil {
		return spec
	}
	m[externalKey] = json.RawMessage("true")
	b, err := json.Marshal(m)
	if err != nil {
		return spec
	}
	return b
}

// IsExternal reports whether r is an external run (OpenExternal): a door drove it without
// a script, so no node can resume it once that door's process is gone.
// A proxy's run recorded before the marker existed is known by its spec's "proxy" object.
func IsExternal(r storage.Run) bool {
	var m struct {
		External bool            `json:"external"`
		Proxy    json.RawMessage `json:"proxy"`
	}
	if json.Unmarshal(r.Spec, &m) != nil {
		return false
	}
	return m.External || len(m.Proxy) > 0 && m.Proxy[0] == '{'
}

// EndTakenOver ends external run r, left running by a node whose lease lapsed or whose
// process is gone, as EndLeft ends those of a stopped process: stored completed with
// reason as its run_done's reason and its error. The end is a claim (the run's next
// attempt, conditional on r's), so of two nodes only one ends it, and the node that
// hosted it, should it wake, can record nothing more (its writes are fenced on its
// attempt). It fails with ErrStillRunning when another process claimed the run first.
func (s *Service) EndTakenOver(ctx context.Context, r storage.Run, reason string) error {
	if !IsExternal(r) {
		return fmt.Errorf("run %s: end it as taken over: it is not an external run (resume it instead)", r.ID)
	}
	attempt, st, now := r.Attempt+1, string(storage.StatusCompleted), s.opts.Now()
	node, pid, zero, running := s.opts.Node, s.opts.PID, time.Time{}, string(storage.StatusRunning)
	up := storage.RunUpdate{Status: &st, FinishedAt: &now, Error: &reason, Attempt: &attempt,
		Node: &node, PID: &pid, LeaseUntil: &zero, IfAttempt: &r.Attempt, IfStatus: &running}
	done := event.New(event.RunDone, map[string]any{"status": st, "reason": reason})
	var err error
	if rr, ok := s.opts.Store.(runRecorder); ok {
		_, err = rr.RecordRun(ctx, r.ID, storage.RunRecord{Events: []event.Event{done}, Update: up})
	} else if err = s.opts.Store.UpdateRun(ctx, r.ID, up); err == nil {
		_, err = s.opts.Store.Append(ctx, r.ID, done)
	}
	if errors.Is(err, storage.ErrRunChanged) {
		return fmt.Errorf("run %s: not ended: another process claimed it first: %w", r.ID, ErrStillRunning)
	}
	if err != nil {
		return s.noted(fmt.Errorf("run %s: end the external run its node left: %w", r.ID, err))
	}
	return nil
}

// create writes the run's row and its run_started.
func (x *External) create(ctx context.Context) error {
	sp := x.spec
	if err := x.s.opts.Store.CreateRun(ctx, x.row()); err != nil {
		return fmt.Errorf("record run %s (%s): %w", sp.ID, sp.Workflow, err)
	}
	x.created = true
	x.s.holdExternal(sp.ID)
	return nil
}

// write stores evs and then up (when it changes anything), creating the run first
// (with its run_started). A store that can (runRecorder) makes it all in one
// transaction: one commit to wait for, and nothing of it stored unless all is.
// Otherwise the events are queued before the row update, so the store commits them
// together or the events first.
func (x *External) write(ctx context.Context, evs []event.Event, up storage.RunUpdate) error {
	st := x.s.opts.Store
	var create *storage.Run
	if !x.created {
		start := event.New(event.RunStarted, map[string]any{"workflow": x.spec.Workflow, "args": x.spec.Args,
			"resumed": false, "attempt": 1})
		evs = append([]event.Event{start}, evs...)
		row := x.row()
		create = &row
	}
	id, what := x.spec.ID, x.spec.Workflow
	if create == nil && x.s.opts.Lease != nil {
		// Held under a lease: once another node ended it (EndTakenOver), nothing of this
		// process lands.
		ctx = storage.WithFence(ctx, id, 1)
	}
	if rr, ok := st.(runRecorder); ok {
		if _, err := rr.RecordRun(ctx, id, storage.RunRecord{Create: create, Events: evs, Update: up}); err != nil {
			return fmt.Errorf("record run %s (%s): %w", id, what, err)
		}
		if create != nil {
			x.created = true
			x.s.holdExternal(id)
		}
		return nil
	}
	if create != nil {
		if err := x.create(ctx); err != nil {
			return err
		}
	}
	var wait func() ([]event.Event, error)
	if len(evs) > 0 {
		if a, ok := st.(asyncAppender); ok {
			wait = a.AppendAsync(ctx, id, evs...)
		} else if _, err := st.Append(ctx, id, evs...); err != nil {
			return fmt.Errorf("record run %s (%s): events: %w", id, what, err)
		}
	}
	var uerr error
	if up != (storage.RunUpdate{}) {
		uerr = st.UpdateRun(ctx, id, up)
	}
	if wait != nil {
		if _, err := wait(); err != nil {
			return fmt.Errorf("record run %s (%s): events: %w", id, what, err)
		}
	}
	if uerr != nil {
		return fmt.Errorf("record run %s (%s): %w", id, what, uerr)
	}
	return nil
}

// rowUpdate is up as the store's update of a run's row.
func rowUpdate(up ExternalUpdate) storage.RunUpdate {
	var u storage.RunUpdate
	if up.Usage != nil {
		us := storage.Usage(*up.Usage)
		u.Usage = &us
	}
	u.Cost, u.Agents = up.Cost, up.Agents
	if up.Spec != nil {
		sp := markExternal(up.Spec)
		u.Spec = &sp
	}
	return u
}

// NotifyUnrecorded has fn told of every failure of the state dir to record an external
// run (a full or read-only disk, a corrupt database), and told nil when an external
// run is next recorded after one: the daemon shows it in its status. fn must not block;
// nil stops the notices.
func (s *Service) NotifyUnrecorded(fn func(err error)) {
	if fn == nil {
		s.unrecorded.Store(nil)
		return
	}
	s.unrecorded.Store(&fn)
}

// noted passes err on to NotifyUnrecorded's watcher when the state dir failed, and tells
// it of the recovery when a write succeeded after such a failure; it returns err.
func (s *Service) noted(err error) error {
	broken := storage.Broken(err)
	if !broken && (err != nil || !s.failing.Load()) {
		return err
	}
	s.failing.Store(broken)
	if fn := s.unrecorded.Load(); fn != nil {
		if broken {
			(*fn)(err)
		} else {
			(*fn)(nil)
		}
	}
	return err
}

// externalWatch is the Service's state for NotifyUnrecorded.
type externalWatch struct {
	unrecorded atomic.Pointer[func(error)]
	failing    atomic.Bool // the last external write failed for the state dir
}

// EndLeft ends the external runs named workflowPrefix* that a process that is gone left
// running (they cannot go on: their agent keeps its own loop): each is stored completed
// with reason as its run_done's reason and its error.
func (s *Service) EndLeft(ctx context.Context, workflowPrefix, reason string) error {
	runs, err := s.List(ctx, storage.ListOptions{Status: storage.StatusInterrupted})
	if err != nil {
		return fmt.Errorf("end the runs %s* left by a stopped process: %w", workflowPrefix, err)
	}
	var errs []error
	for _, r := range runs {
		if !strings.HasPrefix(r.Workflow, workflowPrefix) {
			continue
		}
		st, now := storage.StatusCompleted, s.opts.Now()
		if _, err := s.opts.Store.Append(ctx, r.ID, event.New(event.RunDone, map[string]any{"status": st, "reason": reason})); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", r.ID, err))
			continue
		}
		if err := s.opts.Store.UpdateRun(ctx, r.ID, storage.RunUpdate{Status: &st, FinishedAt: &now, Error: &reason}); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", r.ID, err))
		}
	}
	return s.noted(errors.Join(errs...))
}

// CancelRequests returns the ids of the running runs named workflowPrefix* whose
// cancel was requested (luft cancel in any process, the dashboard): their door ends
// them.
func (s *Service) CancelRequests(ctx context.Context, workflowPrefix string) ([]string, error) {
	runs, err := s.opts.Store.ListRuns(ctx, storage.ListOptions{Status: storage.StatusRunning})
	if err != nil {
		return nil, fmt.Errorf("look for cancel requests of the runs %s*: %w", workflowPrefix, err)
	}
	var ids []string
	for _, r := range runs {
		if r.CancelRequested && strings.HasPrefix(r.Workflow, workflowPrefix) {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}
