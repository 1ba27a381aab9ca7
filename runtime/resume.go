package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// Resume runs a stopped run again from the top: every call the journal has completed
// returns its recorded result without the scheduler or a backend. A run that has already
// completed is not run again: the returned Run has ended with the stored result
// (AlreadyCompleted).
func (s *Service) Resume(ctx context.Context, rs ResumeSpec) (*Run, error) {
	row, err := s.resumable(ctx, rs)
	if err != nil {
		return nil, err
	}
	if row.Status == storage.StatusCompleted {
		return s.completed(row), nil
	}
	var spec Spec
	if err := json.Unmarshal(row.Spec, &spec); err != nil {
		return nil, fmt.Errorf("run %s: resume: its stored spec is unreadable: %w", row.ID, err)
	}
	if spec.PlanFailed {
		return nil, fmt.Errorf("run %s: resume refused: its planning found no valid workflow, so it has no script to run "+
			"(plan again with luft run %q, perhaps with a stronger --planner-model, or write the workflow and run it with --workflow): %w",
			short(row.ID), spec.Plan.Task, ErrNotResumable)
	}
	src, pinned, err := s.scripts(ctx, row, spec, rs)
	if err != nil {
		return nil, err
	}
	spec.Source = src
	prog, _, err := s.Load(spec)
	if err != nil {
		return nil, err
	}
	attempt, err := s.claim(ctx, row, src)
	if err != nil {
		return nil, err
	}
	defer func() {
		s.mu.Lock()
		delete(s.claimed, row.ID)
		s.mu.Unlock()
	}()
	// The journal is read after the claim, not before: until the claim commits, the
	// process that held the run may still finish calls (its writes are fenced on its
	// attempt, and the claim waits for the row lock of one in progress), and a journal
	// read before would miss them and run those calls again. After the claim nothing of
	// the old attempt lands. Should the read fail, the claimed run is not driven here:
	// its lease lapses and a node takes it over again.
	journal, err := s.journalOf(ctx, row.ID)
	if err != nil {
		return nil, err
	}
	return s.launch(ctx, row.ID, attempt, row.Workspace, spec, prog, journal, pinned, rs), nil
}

// resumable finds the run rs names (the newest unfinished one when it names none),
// settles its record when its process died, and checks that it may be resumed: by the
// settings given again, its status, and no live process driving it. A completed run is
// returned as it is (a resume of it runs nothing).
func (s *Service) resumable(ctx context.Context, rs ResumeSpec) (storage.Run, error) {
	var (
		row storage.Run
		err error
	)
	if rs.Run == "" {
		row, err = s.newestResumable(ctx)
		if errors.Is(err, storage.ErrRunNotFound) {
			return row, fmt.Errorf("resume: no unfinished run to resume: %w", err)
		}
	} else {
		row, err = s.opts.Store.ResolveRun(ctx, rs.Run)
	}
	if err != nil {
		return row, fmt.Errorf("resume %s: %w", rs.Run, err)
	}
	// Settle only a run whose process is gone: a run another process has just claimed may
	// not have stored its run_started yet, and its row must not be taken for a dead one.
	if row.Status == storage.StatusRunning && !s.driven(row) {
		if row, err = s.settle(ctx, row); err != nil {
			return row, err
		}
	}
	if len(rs.Repeated) > 0 {
		var started Spec
		if err := json.Unmarshal(row.Spec, &started); err != nil {
			return row, fmt.Errorf("run %s: resume: its stored spec is unreadable: %w", row.ID, err)
		}
		if err := sameSettings(started, rs.Repeated); err != nil {
			return row, fmt.Errorf("run %s: resume refused: %w", row.ID, err)
		}
	}
	if row.Status == storage.StatusCompleted {
		return row, nil
	}
	if !row.Resumable() {
		return row, fmt.Errorf("run %s: resume refused: it is %s (only running, failed, cancelled and suspended runs resume): %w", row.ID, row.Status, ErrNotResumable)
	}
	if !s.Serves(row.Workspace) {
		return row, fmt.Errorf("run %s: resume refused: %s: %w", row.ID, s.notServed(row.Workspace), ErrWorkspaceNotServed)
	}
	// Asked again of the settled row: another process may have claimed the run meanwhile.
	if s.driven(row) {
		return row, fmt.Errorf("run %s: resume refused: process %d is still running it (stop it with luft cancel %s): %w", row.ID, row.PID, short(row.ID), ErrStillRunning)
	}
	return row, nil
}

// scripts returns the main script this attempt runs and the files the run pinned.
// Every file the run loaded must be unchanged, unless rs accepts changes: a changed
// one is pinned again, since it is what a later resume compares against.
func (s *Service) scripts(ctx context.Context, row storage.Run, spec Spec, rs ResumeSpec) ([]byte, map[string]storage.File, error) {
	files, err := s.opts.Store.Files(ctx, row.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("run %s: resume: %w", row.ID, err)
	}
	pinned := map[string]storage.File{}
	for _, f := range files {
		pinned[f.Path] = f
	}
	var src []byte
	for _, f := range files {
		var cur []byte
		var rerr error
		if f.Path == spec.Path && rs.Source != nil {
			cur = rs.Source
		} else if f.Path == spec.Path {
			cur, rerr = s.opts.ReadFile(f.Path)
		} else {
			// A sub-workflow is read as workflow() reads it: from inside the main
			// script's folder, so a file swapped for a symlink out of it since the
			// run started is never read, let alone pinned.
			cur, rerr = readPinnedWorkflow(filepath.Dir(spec.Path), f.Path)
		}
		switch {
		case rerr != nil:
			cur = f.Content // gone from disk: the pinned copy is the script
		case sha(cur) != f.SHA256 && !rs.AllowChangedScript:
			return nil, nil, fmt.Errorf("run %s: resume refused: %s changed since the run started (use --allow-changed-script to run the new version; calls whose inputs changed then count as divergence): %w", short(row.ID), f.Path, ErrScriptChanged)
		case sha(cur) != f.SHA256:
			// The new version is what this attempt runs, so it is what a later resume
			// compares against.
			if err := s.pin(ctx, row.ID, f.Path, cur); err != nil {
				return nil, nil, err
			}
		}
		if f.Path == spec.Path {
			src = cur
		}
	}
	if src == nil {
		// The process died between recording the run and pinning its script, so no call
		// ran: the file on disk is the script it was started with.
		if src, err = s.opts.ReadFile(spec.Path); err != nil {
			return nil, nil, fmt.Errorf("run %s: resume: its script was never pinned and cannot be read: %w", row.ID, err)
		}
		if err := s.pin(ctx, row.ID, spec.Path, src); err != nil {
			return nil, nil, err
		}
	}
	return src, pinned, nil
}

// journalOf is the run's journal by call key.
func (s *Service) journalOf(ctx context.Context, id string) (map[string]storage.Entry, error) {
	entries, err := s.opts.Store.Journal(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("run %s: resume: %w", id, err)
	}
	journal := make(map[string]storage.Entry, len(entries))
	for _, e := range entries {
		journal[e.CallKey] = e
	}
	return journal, nil
}

// claim makes the run this process's next attempt of it, running src: it fails when
// another process claimed the attempt first.
func (s *Service) claim(ctx context.Context, row storage.Run, src []byte) (int, error) {
	attempt := row.Attempt + 1
	running, clear, zero, pid := storage.StatusRunning, "", time.Time{}, s.opts.PID
	hash := sha(src)
	node, lease := s.opts.Node, s.leaseUntil()
	u := storage.RunUpdate{Status: &running, Error: &clear, Attempt: &attempt,
		PID: &pid, FinishedAt: &zero, ResumeAfter: &zero, ScriptHash: &hash,
		Node: &node, LeaseUntil: &lease, IfAttempt: &row.Attempt, IfWorkspace: &row.Workspace}
	// A cancel request of a run that had ended belongs to the attempt that ended: this
	// one starts without it. One of a run still running (taken over from a node that
	// stopped, died or was cancelled meanwhile) is kept, and the new attempt acts on it
	// at once: a cancel given during a takeover is never lost. The claim is conditional
	// on the attempt, so a request stored since row was read stays too.
	if row.Status != storage.StatusRunning {
		no := false
		u.CancelRequested = &no
	}
	if err := s.opts.Store.UpdateRun(ctx, row.ID, u); err != nil {
		if errors.Is(err, storage.ErrRunChanged) {
			if now, gerr := s.opts.Store.GetRun(ctx, row.ID); gerr == nil && now.Attempt == row.Attempt && now.Workspace != row.Workspace {
				return 0, fmt.Errorf("run %s: resume refused: its owner recorded meanwhile that it needs workspace %q (the next claim decides on that): %w", row.ID, now.Workspace, ErrStillRunning)
			}
			return 0, fmt.Errorf("run %s: resume refused: another process resumed it first: %w", row.ID, ErrStillRunning)
		}
		return 0, fmt.Errorf("run %s: resume: %w", row.ID, err)
	}
	// Held (its lease renewed) from now on, not only once it is launched.
	s.mu.Lock()
	s.claimed[row.ID] = attempt
	s.mu.Unlock()
	return attempt, nil
}

// completed is a run that has already completed, as a *Run that has ended: resuming it
// again runs nothing (SPEC §1: a resume is idempotent). Wait returns its stored result and
// report; Subscribe replays its stored events.
func (s *Service) completed(row storage.Run) *Run {
	r := &Run{ID: row.ID, Attempt: row.Attempt, cancel: func(error) {}, done: make(chan struct{}),
		bus: newBus(s.opts.Store, row.ID, s.opts.Now, s.opts.Events, nil), already: true}
	r.bus.close()
	r.result = Result{RunID: row.ID, Status: StatusCompleted, Usage: agent.Usage(row.Usage), Cost: row.Cost,
		Agents: row.Agents, Attempt: row.Attempt}
	if !row.FinishedAt.IsZero() {
		r.result.Elapsed = row.FinishedAt.Sub(row.CreatedAt)
	}
	if row.HasReport && json.Unmarshal(row.Report, &r.result.Report) == nil {
		r.result.HasReport = true
	}
	close(r.done)
	return r
}

// AlreadyCompleted reports whether the run had completed before Resume was asked for it,
// so nothing ran: its result is the stored one.
func (r *Run) AlreadyCompleted() bool { return r.already }

// settle finishes the record of a run whose process stored its run_done but died before
// it updated the run's row: the last attempt's outcome is in run_done.
func (s *Service) settle(ctx context.Context, row storage.Run) (storage.Run, error) {
	evs, err := s.opts.Store.EventsOfType(ctx, row.ID, 0, 0, []string{event.RunStarted, event.RunDone})
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != event.RunDone {
		return row, nil
	}
	d := evs[len(evs)-1].Data
	status, _ := d["status"].(string)
	msg, _ := d["error"].(string)
	// Only over the running row it read: the attempt's process, alive after all, may have
	// written its end since.
	running := storage.StatusRunning
	up := storage.RunUpdate{Status: &status, Error: &msg, IfAttempt: &row.Attempt, IfStatus: &running}
	var u storage.Usage
	var agents storage.AgentCounts
	if b, err := json.Marshal(d["usage"]); err == nil && json.Unmarshal(b, &u) == nil {
		up.Usage = &u
	}
	if b, err := json.Marshal(d["agents"]); err == nil && json.Unmarshal(b, &agents) == nil {
		up.Agents = &agents
	}
	if cost, ok := d["cost"].(float64); ok {
		up.Cost = &cost
	}
	if rep, ok := d["report"]; ok && rep != nil && status == storage.StatusCompleted {
		if b, err := json.Marshal(rep); err == nil {
			raw := json.RawMessage(b)
			up.Report = &raw
		}
	}
	if err := s.opts.Store.UpdateRun(ctx, row.ID, up); err != nil {
		if errors.Is(err, storage.ErrRunChanged) {
			return row, fmt.Errorf("run %s: resume refused: another process resumed it first: %w", row.ID, ErrStillRunning)
		}
		return row, fmt.Errorf("run %s: settle its record: %w", row.ID, err)
	}
	return s.opts.Store.GetRun(ctx, row.ID)
}

// newestResumable is the newest run that may be resumed and that no live process drives.
func (s *Service) newestResumable(ctx context.Context) (storage.Run, error) {
	runs, err := s.opts.Store.ListRuns(ctx, storage.ListOptions{Limit: 500})
	if err != nil {
		return storage.Run{}, err
	}
	for _, r := range runs {
		if r.Resumable() && !s.driven(r) && !PlanFailed(r) {
			return r, nil
		}
	}
	return storage.Run{}, storage.ErrRunNotFound
}

// PlanFailed reports whether r is a run FailedPlan recorded: there is nothing to resume.
func PlanFailed(r storage.Run) bool {
	var spec struct {
		PlanFailed bool `json:"plan_failed"`
	}
	return json.Unmarshal(r.Spec, &spec) == nil && spec.PlanFailed
}

// sameSettings checks start settings given again on a resume against those the run was
// started with (ResumeSpec.Repeated): the same value is no change; any other is refused,
// naming the run's value.
func sameSettings(started Spec, given map[string]string) error {
	names := make([]string, 0, len(given))
	for name := range given {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v := given[name]
		var own string
		same := false
		switch name {
		case "backend":
			own, same = started.Backend, v == started.Backend
		case "model":
			own, same = started.Model, v == started.Model
		case "class":
			c := started.Class
			if c == "" {
				c = agent.ClassInteractive
			}
			own, same = string(c), v == string(c)
		case "timeout":
			own = started.Timeout.String()
			d, err := time.ParseDuration(v)
			same = err == nil && d == started.Timeout
		case "workflow":
			own, same = started.Path, samePath(v, started.Path)
		case "args":
			b, _ := json.Marshal(started.Args)
			own, same = string(b), sameJSON(v, started.Args)
		case "max-agent-calls":
			own = strconv.Itoa(started.Limits.MaxAgentCalls)
			n, err := strconv.Atoi(v)
			same = err == nil && n == started.Limits.MaxAgentCalls
		default:
			return fmt.Errorf("--%s is not a start setting a resume can check", name)
		}
		if same {
			continue
		}
		if own == "" {
			return fmt.Errorf("--%s %s: the run was started without --%s: %w (drop --%s)", name, v, name, ErrSettingChanged, name)
		}
		return fmt.Errorf("--%s %s differs from the run's %s: %w (drop --%s, or give --%s %s)", name, v, own, ErrSettingChanged, name, name, own)
	}
	return nil
}

// samePath reports whether two workflow paths name the same file, as this process reads
// them.
func samePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	x, err1 := filepath.Abs(a)
	y, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && x == y
}

// sameJSON reports whether the JSON text given holds the same value as v.
func sameJSON(given string, v any) bool {
	var g any
	if err := json.Unmarshal([]byte(given), &g); err != nil {
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var w any
	if err := json.Unmarshal(b, &w); err != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}
