package runtime

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// host is the lua.Host of one run: the journal, budgets, backends, the scheduler and
// events.
type host struct {
	e     *Service
	run   *Run
	ctx   context.Context
	start time.Time
	rs    ResumeSpec

	// journal holds the entries of earlier attempts by call key; pinned the files the
	// run loaded before. Both are read and changed on the VM goroutine only.
	journal  map[string]storage.Entry
	pinned   map[string]storage.File
	diverged bool
	// heldPhase is the phase a quiesced Service did not start (Emit); VM goroutine only.
	heldPhase int

	mu        sync.Mutex
	usage     agent.Usage
	cost      float64
	counts    Counts
	started   int
	budget    lua.Budget
	ledger    ledger          // reservations of running turns against the budget
	timer     scheduler.Timer // the time budget
	before    time.Duration   // driven time of earlier attempts, counted by the time budget
	beforeErr error
	calls     sync.WaitGroup // call goroutines still running
	live      *totals        // writes the counts to the run's row as calls finish

	// sessions holds the latest transcript of each session_id of the run (SPEC §2:
	// openai agents continue a conversation from it), from the journal and from live calls.
	sessions map[string][]agent.Message
}

var _ lua.Host = (*host)(nil)

func newHost(s *Service, r *Run, ctx context.Context, journal map[string]storage.Entry, pinned map[string]storage.File, rs ResumeSpec) *host {
	if journal == nil {
		journal = map[string]storage.Entry{}
	}
	if pinned == nil {
		pinned = map[string]storage.File{}
	}
	h := &host{e: s, run: r, ctx: ctx, start: s.opts.Now(), journal: journal, pinned: pinned, rs: rs,
		sessions: journaledSessions(journal), ledger: newLedger()}
	if r.Attempt > 1 {
		h.before, h.beforeErr = drivenBefore(ctx, s.opts.Store, r.ID)
	}
	h.live = newTotals(r.store, r.ID, h.result)
	return h
}

// journaledSessions collects the transcripts that completed calls of earlier attempts
// returned, the latest per session winning.
func journaledSessions(journal map[string]storage.Entry) map[string][]agent.Message {
	var withTranscript []storage.Entry
	for _, e := range journal {
		if e.Kind == "agent" && e.Status == storage.EntryCompleted && bytes.Contains(e.Result, []byte(`"transcript"`)) {
			withTranscript = append(withTranscript, e)
		}
	}
	slices.SortFunc(withTranscript, func(a, b storage.Entry) int { return cmp.Compare(a.CompletedSeq, b.CompletedSeq) })
	out := map[string][]agent.Message{}
	for _, e := range withTranscript {
		var r struct {
			SessionID  string          `json:"session_id"`
			Transcript []agent.Message `json:"transcript"`
		}
		if json.Unmarshal(e.Result, &r) == nil && r.SessionID != "" && r.Transcript != nil {
			out[r.SessionID] = r.Transcript
		}
	}
	return out
}

// session returns the kept transcript of a session, nil when the run knows none.
func (h *host) session(id string) []agent.Message {
	if id == "" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

// keepSession records the transcript a call returned for its session.
func (h *host) keepSession(res agent.Result) {
	if res.SessionID == "" || res.Transcript == nil {
		return
	}
	h.mu.Lock()
	h.sessions[res.SessionID] = res.Transcript
	h.mu.Unlock()
}

// store is the store as the run's attempt writes to it (fenced on the attempt).
func (h *host) store() storage.Store { return h.run.store }

// recorded returns the journal entry for c when it may stand in for running c again: same
// key, same inputs, completed. A differing input hash is a divergence: the run fails
// naming the call, unless the caller asked to rerun from the first divergent call, which
// drops that entry and every entry completed after it.
func (h *host) recorded(c lua.Call, hash string) (storage.Entry, bool, error) {
	e, ok := h.journal[c.Key]
	if !ok {
		return e, false, nil
	}
	if e.InputHash != hash || e.Kind != c.Kind {
		if e.Status != storage.EntryCompleted {
			return e, false, nil // never finished: it runs again anyway
		}
		if !h.rs.RerunFromDivergence {
			return e, false, &lua.ScriptError{Kind: lua.KindDivergence, Where: c.Where, Msg: fmt.Sprintf(
				"LUFT1001 divergence at call %s: its inputs differ from the journal (recorded %s %.12s, now %s %.12s); "+
					"the script or its inputs changed since the call ran: resume with --rerun-from-divergence to run "+
					"from this call on, or start a new run", c.Key, e.Kind, e.InputHash, c.Kind, hash)}
		}
		if !h.diverged {
			h.diverged = true
			if _, err := h.store().InvalidateFrom(h.ctx, h.run.ID, e.CompletedSeq); err != nil {
				return e, false, h.stopIfBroken(fmt.Errorf("rerun from divergence at %s: %w", c.Key, err))
			}
			for k, x := range h.journal {
				if x.Status != storage.EntryCompleted || x.CompletedSeq >= e.CompletedSeq {
					delete(h.journal, k)
				}
			}
			h.emit(event.Log, map[string]any{"level": "warn", "msg": fmt.Sprintf("rerunning from call %s (%s): its inputs changed", c.Key, c.Where)})
		}
		return e, false, nil
	}
	return e, e.Status == storage.EntryCompleted, nil
}
func (h *host) emit(typ string, data map[string]any) {
	h.run.bus.emit(event.New(typ, data))
}

// Emit implements lua.Host. Once the Service is quiesced, a phase the script starts is
// not started: the run is suspended there, and neither the phase's start nor its end is
// emitted (the resume starts it).
func (h *host) Emit(ev event.Event) {
	switch ev.Type {
	case event.PhaseStarted:
		if h.e.quiesced.Load() {
			h.heldPhase = phaseIDOf(ev)
			h.run.Suspend()
			return
		}
	case event.PhaseDone:
		if h.heldPhase != 0 && phaseIDOf(ev) == h.heldPhase {
			return
		}
	}
	h.run.bus.emit(ev)
}

// phaseIDOf is the phase_id of a phase event.
func phaseIDOf(ev event.Event) int {
	switch id := ev.Data["phase_id"].(type) {
	case int:
		return id
	case int64:
		return int(id)
	case float64:
		return int(id)
	}
	return 0
}

// Value implements lua.Host: a recorded value is returned as it was; a fresh one is
// journaled before the script sees it.
func (h *host) Value(c lua.Call, fresh func() any) (any, error) {
	e, ok, err := h.recorded(c, c.Hash)
	if err != nil {
		return nil, err
	}
	if ok {
		var v any
		if err := json.Unmarshal(e.Result, &v); err != nil {
			return nil, fmt.Errorf("journal entry %s is unreadable: %w", c.Key, err)
		}
		return v, nil
	}
	v := fresh()
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", c.Key, err)
	}
	if err := h.journalDone(c, b); err != nil {
		return nil, err
	}
	return v, nil
}

// journalDone journals c as completed with result, for calls that finish at once (values,
// sub-workflow loads).
func (h *host) journalDone(c lua.Call, result []byte) error {
	if _, err := h.store().JournalFinish(h.ctx, storage.Entry{RunID: h.run.ID, CallKey: c.Key, Kind: c.Kind,
		InputHash: c.Hash, Status: storage.EntryCompleted, Result: result, WherePos: c.Where, Attempts: 1}); err != nil {
		return h.stopIfBroken(fmt.Errorf("journal %s: %w", c.Key, err))
	}
	return nil
}

// stopIfBroken passes err on; when it is a failure of the state dir (a full or failing
// disk, a corrupt database) it first stops the run with it as the cause. The script never
// sees such a failure as an ordinary one: the run's context is done, so pcall does not
// catch it and a pipeline does not mark items failed, and the run ends as the disk's
// failure, not a script line's (see classify).
func (h *host) stopIfBroken(err error) error {
	if storage.Broken(err) || ownershipLost(err) {
		h.run.cancel(err)
	}
	return err
}

// LoadWorkflow implements lua.Host: it reads a sub-workflow inside the calling script's
// folder (readWorkflowFile), pins its content to the run and journals the call with the
// file's hash. A file that is gone from disk is read from the run's pinned copy.
func (h *host) LoadWorkflow(c lua.Call, dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	b, err := readWorkflowFile(dir, name)
	if err != nil {
		f, ok := h.pinned[path]
		if !ok || !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		b = f.Content
	}
	if f, ok := h.pinned[path]; !ok || f.SHA256 != sha(b) {
		if err := h.e.pin(h.ctx, h.run.ID, path, b); err != nil {
			return nil, h.stopIfBroken(err)
		}
		h.pinned[path] = storage.File{RunID: h.run.ID, Path: path, SHA256: sha(b), Content: b}
	}
	if _, ok, err := h.recorded(c, c.Hash); err != nil {
		return nil, err
	} else if !ok {
		res, _ := json.Marshal(map[string]string{"path": path, "sha256": sha(b)})
		if err := h.journalDone(c, res); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// SetBudget implements lua.Host.
func (h *host) SetBudget(b lua.Budget) error {
	h.mu.Lock()
	h.budget = b
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	if b.TimeMS > 0 {
		if h.beforeErr != nil {
			h.emit(event.Log, map[string]any{"level": "warn", "msg": "time budget counts this attempt only: " + h.beforeErr.Error()})
		}
		left := time.Duration(b.TimeMS)*time.Millisecond - h.before - h.e.opts.Now().Sub(h.start)
		h.timer = h.e.opts.Clock.AfterFunc(max(left, 0), func() { h.run.cancel(ErrTimeBudget) })
	}
	h.mu.Unlock()
	h.emit(event.Budget, map[string]any{"time_ms": b.TimeMS, "agents": b.Agents, "tokens": b.Tokens, "usd": b.USD, "rounds": b.Rounds})
	return nil
}

func (h *host) stopTimer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
	}
}

func (h *host) result() Result {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Result{Usage: h.usage, Cost: h.cost, Agents: h.counts}
}

// checkBudget refuses a call that would exceed the run's budget. The refusal ends the run.
func (h *host) checkBudget(c lua.Call) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.budget
	var used int
	var usedUSD float64
	if b.Tokens > 0 || b.USD > 0 {
		used, usedUSD = h.usedLocked()
	}
	var limit string
	switch {
	case b.Agents > 0 && h.started >= b.Agents:
		limit = fmt.Sprintf("agents=%d (%d calls made)", b.Agents, h.started)
	case b.Tokens > 0 && used >= b.Tokens:
		limit = fmt.Sprintf("tokens=%d (%d used)", b.Tokens, used)
	case b.USD > 0 && usedUSD >= b.USD:
		limit = fmt.Sprintf("usd=%g ($%.4f spent)", b.USD, usedUSD)
	}
	if limit != "" {
		return budgetRefusal(c, limit)
	}
	h.started++
	return nil
}

// ErrBudgetExceeded is the cause a budget refusal carries (errors.Is), so callers tell a
// used-up token or USD budget from the sandbox's other limits.
var ErrBudgetExceeded = errors.New("budget exceeded")

// budgetRefusal is the error of call c refused because it would pass limit, a budget{}
// field with what the run has used.
func budgetRefusal(c lua.Call, limit string) error {
	return &lua.ScriptError{Kind: lua.KindLimit, Where: c.Where, Cause: ErrBudgetExceeded,
		Msg: fmt.Sprintf("budget exceeded: %s; call %s refused (raise the limit in budget{})", limit, c.Key)}
}

// Agent implements lua.Host. A call the journal has completed with the same inputs
// returns its recorded result at once, touching neither the scheduler nor a backend.
// Otherwise the call is journaled as scheduled, run on its own goroutine, and journaled
// as completed or failed before the script sees its result.
func (h *host) Agent(ctx context.Context, c lua.Call, req agent.Request, complete func(agent.Result, error)) (agent.Result, bool, error) {
	if err := h.checkBudget(c); err != nil {
		return agent.Result{}, false, err
	}
	if req.Backend == "" {
		req.Backend = h.run.spec.Backend
	}
	if req.Model == "" {
		req.Model = h.run.spec.Model
	}
	if req.Class == "" {
		req.Class = h.run.spec.Class
	}
	b, berr := h.e.opts.Backends.Get(req.Backend)
	if berr == nil {
		req.Backend = b.ID()
	}
	// The hash is taken after defaults are filled in, so a resume with another default
	// backend or model is a divergence, not a silent replay.
	c.Hash = req.Hash()
	e, ok, err := h.recorded(c, c.Hash)
	if err != nil {
		return agent.Result{}, false, err
	}
	if ok {
		var res agent.Result
		if err := json.Unmarshal(e.Result, &res); err != nil {
			return agent.Result{}, false, fmt.Errorf("journal entry %s is unreadable: %w", c.Key, err)
		}
		res.Cached = true
		h.done(c, req, res, nil, callTime{})
		return res, true, nil
	}
	h.emit(event.AgentStarted, map[string]any{"call_key": c.Key, "name": req.Name, "phase_id": c.PhaseID,
		"backend": req.Backend, "model": req.Model, "class": string(req.Class)})
	if berr != nil {
		h.done(c, req, agent.Result{Status: agent.StatusError, Backend: req.Backend, Model: req.Model}, berr, callTime{})
		return agent.Result{}, false, berr
	}
	h.calls.Add(1)
	go func() {
		defer h.calls.Done()
		start := h.e.opts.Now()
		tally := &turnTally{}
		res, err := h.journaled(ctx, c, req, b, tally)
		h.done(c, req, res, err, tally.split(h.e.opts.Now().Sub(start)))
		complete(res, err)
	}()
	return agent.Result{}, false, nil
}

// journaled runs a live call between its scheduled and its finished journal entries.
func (h *host) journaled(ctx context.Context, c lua.Call, req agent.Request, b adapters.Backend, tally *turnTally) (agent.Result, error) {
	entry := storage.Entry{RunID: h.run.ID, CallKey: c.Key, Kind: c.Kind, InputHash: c.Hash,
		Status: storage.EntryScheduled, WherePos: c.Where}
	// The self-fence: no call starts once the node's lease may have lapsed.
	if err := h.e.leaseValid(); err != nil {
		return agent.Result{Status: agent.StatusError, Backend: req.Backend, Model: req.Model}, h.stopIfBroken(fmt.Errorf("call %s: %w", c.Key, err))
	}
	if usesWorkspace(req, b) {
		if err := h.bindWorkspace(ctx); err != nil {
			return agent.Result{Status: agent.StatusError, Backend: req.Backend, Model: req.Model}, h.stopIfBroken(fmt.Errorf("call %s: %w", c.Key, err))
		}
	}
	if err := h.store().JournalScheduled(ctx, entry); err != nil {
		return agent.Result{Status: agent.StatusError, Backend: req.Backend, Model: req.Model}, h.stopIfBroken(fmt.Errorf("journal %s: %w", c.Key, err))
	}
	res, callErr := h.call(ctx, c, req, b, tally)
	if callErr != nil && ownershipLost(callErr) {
		// A turn refused by the self-fence: not a failure of the call, which runs again
		// on whichever node claims the run.
		return res, h.stopIfBroken(fmt.Errorf("call %s: %w", c.Key, callErr))
	}
	entry.Status, entry.Attempts, entry.Usage = storage.EntryCompleted, res.Attempts, storage.Usage(res.Usage)
	if res.Cost != nil {
		entry.Cost = *res.Cost
	}
	if callErr != nil || !res.OK() {
		entry.Status, entry.Error = storage.EntryFailed, res.Error
		if callErr != nil {
			entry.Error = callErr.Error()
		}
	}
	var err error
	if entry.Result, err = json.Marshal(res); err != nil {
		return res, fmt.Errorf("journal %s: encode the result: %w", c.Key, err)
	}
	// The entry is written even when the run is being cancelled: a finished call must not
	// run again.
	if _, err := h.store().JournalFinish(context.WithoutCancel(ctx), entry); err != nil {
		// Not journaled, so not done: a resume runs the call again.
		res.Status, res.Error = agent.StatusError, err.Error()
		return res, h.stopIfBroken(fmt.Errorf("journal %s: %w", c.Key, err))
	}
	return res, callErr
}

// done accounts a finished call and records agent_done before the script sees the result:
// elapsed_ms is the call's whole time, queued_ms and approval_ms what of it went to the
// scheduler's queue and to a person's answers, run_ms the rest.
func (h *host) done(c lua.Call, req agent.Request, res agent.Result, err error, t callTime) {
	status := res.Status
	if status == "" {
		status = agent.StatusError
	}
	msg := res.Error
	if err != nil {
		msg = err.Error()
	}
	h.mu.Lock()
	h.usage = h.usage.Add(res.Usage)
	if res.Cost != nil {
		h.cost += *res.Cost
	}
	h.settleCallLocked(c.Key, req, res)
	switch {
	case res.Cached:
		h.counts.Cached++
	case err == nil && res.OK():
		h.counts.OK++
	case status == agent.StatusCancelled:
		h.counts.Cancelled++ // cut off by a cancel, a timeout or a suspension: not a failure
	default:
		h.counts.Failed++
	}
	h.mu.Unlock()
	h.live.changed()
	data := map[string]any{"call_key": c.Key, "name": req.Name, "status": string(status), "cached": res.Cached,
		"tokens": res.Usage.Total(), "usage": res.Usage, "elapsed_ms": t.elapsed.Milliseconds(),
		"queued_ms": t.queued.Milliseconds(), "approval_ms": t.approval.Milliseconds(), "run_ms": t.run.Milliseconds(),
		"attempts": res.Attempts, "backend": req.Backend, "model": res.Model}
	if res.Cost != nil {
		data["cost"] = *res.Cost
	}
	if msg != "" {
		data["error"] = msg
	}
	// A call that failed for want of a person's yes names the tool, so a caller (the Go
	// API's *ApprovalError) can tell it from other failures without reading the message.
	var ae *tools.ApprovalError
	if errors.As(err, &ae) {
		data["approval_needed"] = ae.Tool
	}
	h.emit(event.AgentDone, data)
}

// maxWorkflowFile is the largest file workflow() loads.
const maxWorkflowFile = 16 << 20

// ErrOutsideFolder is what the error of ReadWorkflowFile is (errors.Is) for a name that
// leads out of its folder through a symlink.
var ErrOutsideFolder = errors.New("the path leads outside its folder")

// outsideError is a name that left its folder; it reads as workflow()'s message.
type outsideError struct{ path, dir string }

func (e *outsideError) Error() string {
	return fmt.Sprintf("cannot read %s: it leads outside the calling script's folder %s (through a symlink?); workflow() loads only files inside that folder", e.path, e.dir)
}

func (e *outsideError) Is(target error) bool { return target == ErrOutsideFolder }

// ReadWorkflowFile reads the workflow file name (relative, already checked with
// lua.WorkflowName) inside dir with the confinement workflow() has: see readWorkflowFile.
// Other doors that load workflows inside a folder (MCP's roots) read them with it.
func ReadWorkflowFile(dir, name string) ([]byte, error) { return readWorkflowFile(dir, name) }

// readWorkflowFile reads the workflow file name inside dir. The file is opened through an
// os.Root on dir, which follows symlinks only while they stay inside dir (the kernel's
// openat2 RESOLVE_BENEATH where there is one), so no link can lead a script to
// /etc/passwd or /proc/self/environ; it must be a regular file (not a FIFO that would
// block, nor a device) of at most 16 MiB. Errors name the file, never its contents.
func readWorkflowFile(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	defer root.Close()
	// O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if strings.Contains(err.Error(), "path escapes from parent") {
			return nil, &outsideError{path: path, dir: dir}
		}
		return nil, fmt.Errorf("cannot read %s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("cannot read %s: not a regular file (%s); workflow() loads only .lua files", path, info.Mode().Type())
	}
	if info.Size() > maxWorkflowFile {
		return nil, fmt.Errorf("cannot read %s: %d bytes, more than the limit of %d bytes for a workflow file", path, info.Size(), maxWorkflowFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxWorkflowFile+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	if len(b) > maxWorkflowFile {
		return nil, fmt.Errorf("cannot read %s: more than the limit of %d bytes for a workflow file", path, maxWorkflowFile)
	}
	return b, nil
}

// readPinnedWorkflow reads a sub-workflow a run pinned, at path, with readWorkflowFile's
// confinement to dir, the main script's folder (every file workflow() loads lies inside
// it, since each lies inside its caller's folder).
func readPinnedWorkflow(dir, path string) ([]byte, error) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("cannot read %s: it is outside the script's folder %s", path, dir)
	}
	return readWorkflowFile(dir, rel)
}
