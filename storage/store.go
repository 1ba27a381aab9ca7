package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/luft-run/luft/event"
)

// Run statuses. A run is resumable in running (its process died), failed, cancelled and
// suspended (SPEC §4); queued is a run that was created but has not started yet.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	StatusSuspended = "suspended"
	// StatusInterrupted is never stored: it is how a run stored as running is shown once
	// the process that drove it is gone (killed, crashed, or it could not record its end).
	// Such a run is resumable (SPEC §4); the runtime's queries apply the word.
	StatusInterrupted = "interrupted"
)

// Journal entry statuses.
const (
	EntryScheduled = "scheduled"
	EntryCompleted = "completed"
	EntryFailed    = "failed"
)

// Phase statuses.
const (
	PhaseRunning = "running"
	PhaseDone    = "done"
)

var (
	// ErrRunNotFound means no run has the given id (or id prefix).
	ErrRunNotFound = errors.New("run not found")
	// ErrAmbiguousRun means an id prefix matches more than one run; the error that wraps
	// it is an *AmbiguousRunError listing candidates.
	ErrAmbiguousRun = errors.New("ambiguous run id")
	// ErrRunExists means CreateRun was given an id that is already stored.
	ErrRunExists = errors.New("run already exists")
	// ErrRunChanged means a conditional UpdateRun found the run changed by someone else.
	ErrRunChanged = errors.New("run was changed by another process")
	// ErrClosed is returned by every call made after Close.
	ErrClosed = errors.New("storage: the store is closed")
	// ErrCorruptState means luft.db is not a SQLite database or its schema is broken.
	// The error that wraps it is a *CorruptError naming the file.
	ErrCorruptState = errors.New("state dir is corrupt")
	// ErrSchemaTooNew means luft.db was written by a newer luft.
	ErrSchemaTooNew = errors.New("database schema is newer than this luft")
	// ErrUnwritable means the state dir could not be written: the disk is full, a file
	// reached the size limit, the disk failed or is read-only. The error that wraps it is
	// a *UnwritableError naming the dir. Nothing stored is lost: what was committed stays.
	ErrUnwritable = errors.New("state dir cannot be written")
)

// Broken reports whether err means the state dir itself failed (ErrUnwritable or
// ErrCorruptState), as opposed to a refused operation: a run must stop on it rather than
// let its script go on as if a call had failed.
func Broken(err error) bool {
	return errors.Is(err, ErrUnwritable) || errors.Is(err, ErrCorruptState)
}

// AmbiguousRunError is returned by ResolveRun when a prefix matches several runs.
// errors.Is(err, ErrAmbiguousRun) holds. Its message names the prefix and lists the
// candidates, one a line, so a person can pick the one meant.
type AmbiguousRunError struct {
	Prefix     string
	Candidates []string // up to 5 matching ids, newest first
	// Runs are the candidates' runs, in the same order (id, status, workflow for the
	// message); it may be left empty.
	Runs []Run
	More bool // more runs match than are listed
}

func (e *AmbiguousRunError) Error() string {
	var b strings.Builder
	n := fmt.Sprintf("%d runs", len(e.Candidates))
	if e.More {
		n = fmt.Sprintf("more than %d runs, the newest", len(e.Candidates))
	}
	fmt.Fprintf(&b, "%v %q: it is the start of %s; give more characters of the one you mean (luft list shows them all):",
		ErrAmbiguousRun, e.Prefix, n)
	for i, id := range e.Candidates {
		b.WriteString("\n  " + id)
		if i < len(e.Runs) && e.Runs[i].ID == id {
			fmt.Fprintf(&b, "  %s  %s", e.Runs[i].Status, e.Runs[i].CreatedAt.UTC().Format("2006-01-02 15:04:05Z"))
			if w := e.Runs[i].Workflow; w != "" {
				b.WriteString("  " + strings.Join(strings.Fields(w), " "))
			}
		}
	}
	if e.More {
		b.WriteString("\n  ...")
	}
	return b.String()
}

// Unwrap lets errors.Is find ErrAmbiguousRun.
func (e *AmbiguousRunError) Unwrap() error { return ErrAmbiguousRun }

// CorruptError says which database file could not be used. errors.Is finds both
// ErrCorruptState and the underlying SQLite error.
type CorruptError struct {
	Dir  string // the state dir
	File string // the database file
	Err  error  // what SQLite or the schema check said
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%v: %s: %v; luft never deletes state: move the file aside "+
		"(mv %s %s.corrupt, and its -wal and -shm files if present) and run again to start "+
		"with an empty state in %s", ErrCorruptState, e.File, e.Err, e.File, e.File, e.Dir)
}

// Unwrap returns ErrCorruptState and the cause.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorruptState, e.Err} }

// UnwritableError says which state dir could not be written and why. errors.Is finds both
// ErrUnwritable and the underlying error.
type UnwritableError struct {
	Dir    string // the state dir
	Reason string // what most likely happened, in words: "the disk is full", ...
	Err    error  // the failed operation and what the system said
}

func (e *UnwritableError) Error() string {
	return fmt.Sprintf("%v: %s: %s (%v); free space on the disk that holds %s "+
		"(or raise the file size limit, or use another --state-dir), then try again",
		ErrUnwritable, e.Dir, e.Reason, e.Err, e.Dir)
}

// Unwrap returns ErrUnwritable and the cause.
func (e *UnwritableError) Unwrap() []error { return []error{ErrUnwritable, e.Err} }

// Unwritable returns err as an *UnwritableError of dir when it is a failure of the disk
// under dir (no space, file size limit, quota, I/O error, read-only) from SQLite or from the
// file system, and err unchanged otherwise. what names the operation ("" when err does).
func Unwritable(dir, what string, err error) error {
	if err == nil || errors.Is(err, ErrUnwritable) || errors.Is(err, ErrCorruptState) {
		return err
	}
	reason := diskFailure(err)
	if reason == "" {
		return err
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // the message names the disk to free: no relative path
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	return &UnwritableError{Dir: dir, Reason: reason, Err: err}
}

// Usage counts tokens. Its fields match agent.Usage, so the two convert directly.
type Usage struct {
	Input  int `json:"input"`
	Output int `json:"output"`
	Cached int `json:"cached"`
}

// AgentCounts counts a run's finished agent calls. Cancelled calls (cut off by a cancel,
// a timeout or a suspension) are not Failed: each call is in exactly one count.
type AgentCounts struct {
	OK        int `json:"ok"`
	Failed    int `json:"failed"`
	Cached    int `json:"cached"`
	Cancelled int `json:"cancelled"`
}

// String is the counts as a person reads them: "3 ok, 1 failed, 0 cached", with
// ", 4 cancelled" when any call was cancelled.
func (c AgentCounts) String() string {
	s := fmt.Sprintf("%d ok, %d failed, %d cached", c.OK, c.Failed, c.Cached)
	if c.Cancelled > 0 {
		s += fmt.Sprintf(", %d cancelled", c.Cancelled)
	}
	return s
}

// Finished is the number of finished calls, whatever their outcome.
func (c AgentCounts) Finished() int { return c.OK + c.Failed + c.Cached + c.Cancelled }

// Run is one execution of a workflow.
type Run struct {
	ID         string // UUIDv7 string
	Workflow   string // the workflow's path or name
	ScriptHash string
	Status     string // one of the Status constants
	Error      string
	Args       json.RawMessage // nil: none
	Report     json.RawMessage // valid when HasReport
	HasReport  bool
	Usage      Usage
	Cost       float64
	Agents     AgentCounts
	Attempt    int // 1 on the first start, +1 per resume
	PID        int // the process driving the run
	// Node is the id of the node (daemon, or the host of a CLI process: see package
	// node) that drives the run; "" for a run recorded before nodes existed.
	Node string
	// LeaseUntil is when the lease of Node on the run ends (zero: the run is held by its
	// process, PID, not by a lease). A running run whose lease has ended may be claimed by
	// any node; its attempt is the epoch every later write is fenced on (WithFence).
	LeaseUntil time.Time
	// Workspace is the workspace the run needs ("" = none): a run whose agents use local
	// tools or an ACP coding agent records one before the first such call, and only a node
	// that serves it may take the run over (see package runtime, Options.Workspaces).
	Workspace       string
	CreatedAt       time.Time
	UpdatedAt       time.Time
	FinishedAt      time.Time // zero: not finished
	ResumeAfter     time.Time // zero: none
	CancelRequested bool
	Spec            json.RawMessage // whatever the runtime needs to resume
}

// Resumable reports whether a run in this status may be resumed (a running one only once
// its process is gone, which the caller checks).
func (r Run) Resumable() bool {
	switch r.Status {
	case StatusRunning, StatusInterrupted, StatusFailed, StatusCancelled, StatusSuspended:
		return true
	}
	return false
}

// RunUpdate changes the fields whose pointers are set; nil fields stay as they are.
// A non-nil Report also sets HasReport; a non-nil HasReport wins over that (false clears the
// report). A pointer to the zero time clears FinishedAt or ResumeAfter.
type RunUpdate struct {
	Status          *string
	Error           *string
	ScriptHash      *string
	Report          *json.RawMessage
	HasReport       *bool
	Usage           *Usage
	Cost            *float64
	Agents          *AgentCounts
	Attempt         *int
	PID             *int
	Node            *string
	LeaseUntil      *time.Time // a pointer to the zero time clears it
	Workspace       *string    // "" clears it
	FinishedAt      *time.Time
	ResumeAfter     *time.Time
	CancelRequested *bool // false clears a cancel request (on resume)
	Spec            *json.RawMessage
	// IfAttempt makes the update conditional: it applies only while the run's attempt
	// is this value, and otherwise fails with ErrRunChanged. Two processes resuming one
	// run claim it this way, so only one of them drives it.
	IfAttempt *int
	// IfWorkspace makes the update conditional on the run's workspace too (ErrRunChanged
	// otherwise): a claim decided on the workspace it read must not take a run whose
	// owner recorded another one since.
	IfWorkspace *string
	// IfStatus makes the update conditional on the run's status as well, failing with
	// ErrRunChanged otherwise: a process that writes the end of another's attempt (a
	// settle) must not write over an end that attempt's own process has written since.
	IfStatus *string
}

// ListOptions filter ListRuns.
type ListOptions struct {
	Status string // "" = any
	Limit  int    // <= 0 = all
	// Before, a run id, lists only the runs after it in this order (older ones): the
	// cursor of the next page. "" = from the newest.
	Before string
}

// Phase is the projection of a run's phase_started and phase_done events.
type Phase struct {
	RunID       string
	ID          int
	Label       string
	Planned     int
	Description string
	Status      string // PhaseRunning or PhaseDone
	OK          int
	Failed      int
	Cancelled   int       // calls cut off by a cancel, not counted in Failed
	StartedAt   time.Time // zero when only phase_done was seen
	DoneAt      time.Time // zero while running
}

// File is a file a run pinned (its script and every file it loaded).
type File struct {
	RunID     string
	Path      string
	SHA256    string // hex
	Content   []byte
	CreatedAt time.Time
}

// Entry is one journaled effect of a run (agent call, luft.now/random/uuid, sub-workflow).
type Entry struct {
	RunID        string
	CallKey      string // branch path + per-branch counter, e.g. "main/2/par[4]/1"
	Kind         string // "agent", "now", "random", "uuid", "workflow", ...
	InputHash    string // SHA-256 of the canonical inputs
	Status       string // one of the Entry constants
	Result       json.RawMessage
	Error        string
	Usage        Usage
	Cost         float64
	Attempts     int
	CompletedSeq int64  // 0 while scheduled; per-run completion order otherwise
	WherePos     string // script position, e.g. "flow.lua:12"
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// ToolCall is one tool call an agent call's model asked for (SPEC §4: a tool's side effect
// happens once). It belongs to the journal entry of its call key and is found again by
// (conversation, turn, tool call id).
type ToolCall struct {
	RunID   string
	CallKey string
	// Conversation is the hash of the request that began the conversation: the agent
	// call's input hash, or a schema re-prompt's.
	Conversation string
	Turn         int    // the model turn that asked for it, from 1 within its conversation
	ID           string // the model's tool call id
	Name         string
	ArgsHash     string // SHA-256 of the arguments as the model sent them
	Done         bool   // false: begun and never finished
	Output       string // what the model was given, when Done
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// EventLog is an append-only, ordered log of events per run.
type EventLog interface {
	// Append stamps each event with the run's next sequence numbers and stores them, in
	// order. It returns the stamped events.
	Append(ctx context.Context, runID string, evs ...event.Event) ([]event.Event, error)
	// Events returns up to limit events of the run with seq > since (limit <= 0: all).
	Events(ctx context.Context, runID string, since int64, limit int) ([]event.Event, error)
	// EventsOfType is Events restricted to the given types (none: every type).
	EventsOfType(ctx context.Context, runID string, since int64, limit int, types []string) ([]event.Event, error)
}

// Store is everything the runtime keeps durable: runs, their events, phases, pinned files
// and the journal of effects. *SQLite and *Postgres implement it.
type Store interface {
	EventLog

	// CreateRun stores a new run. Status defaults to running, Attempt to 1 and CreatedAt to
	// now. An existing id gives ErrRunExists.
	CreateRun(ctx context.Context, r Run) error
	// UpdateRun changes the set fields of u and updated_at.
	UpdateRun(ctx context.Context, id string, u RunUpdate) error
	// GetRun returns the run with exactly this id.
	GetRun(ctx context.Context, id string) (Run, error)
	// ResolveRun returns the run with this id or, failing that, the only run whose id
	// starts with it (ErrRunNotFound, ErrAmbiguousRun).
	ResolveRun(ctx context.Context, idOrPrefix string) (Run, error)
	// LatestResumable returns the newest run in status running, failed, cancelled or
	// suspended (ErrRunNotFound when there is none). Whether a running run's process is
	// still alive is for the caller to check (PID).
	LatestResumable(ctx context.Context) (Run, error)
	// ListRuns returns runs, newest first.
	ListRuns(ctx context.Context, opts ListOptions) ([]Run, error)
	// Phases returns the run's phases by id.
	Phases(ctx context.Context, runID string) ([]Phase, error)
	// RequestCancel flags the run for cancellation; the process driving it polls
	// CancelRequested.
	RequestCancel(ctx context.Context, runID string) error
	CancelRequested(ctx context.Context, runID string) (bool, error)
	// SaveFile pins a file of the run (replacing one of the same path) and returns its
	// SHA-256 in hex.
	SaveFile(ctx context.Context, runID, path string, content []byte) (string, error)
	// Files returns the run's pinned files by path.
	Files(ctx context.Context, runID string) ([]File, error)

	// JournalScheduled records that an effect is about to run: it inserts the entry or
	// resets an existing one to scheduled, dropping any earlier result.
	JournalScheduled(ctx context.Context, e Entry) error
	// JournalFinish records a completed or failed effect and returns its completed_seq,
	// the run's previous maximum + 1. It returns once the entry is committed.
	JournalFinish(ctx context.Context, e Entry) (int64, error)
	// Journal returns the run's entries ordered by call key.
	Journal(ctx context.Context, runID string) ([]Entry, error)
	// InvalidateFrom deletes the entries with completed_seq >= completedSeq and every
	// entry still scheduled, and returns how many it deleted.
	InvalidateFrom(ctx context.Context, runID string, completedSeq int64) (int, error)

	// ToolStarted records that a tool call is about to run; a call already recorded
	// (started or done) is left as it is. The call key's journal entry must exist.
	ToolStarted(ctx context.Context, tc ToolCall) error
	// ToolDone records a tool call's output; it returns once that is committed.
	ToolDone(ctx context.Context, tc ToolCall) error
	// ToolCalls returns the tool calls recorded for a call key, by conversation, turn
	// and id.
	ToolCalls(ctx context.Context, runID, callKey string) ([]ToolCall, error)

	// AskApproval records a tool call that waits for a person's answer and returns the
	// stored row: a call already recorded (same id, or same call key, conversation, turn
	// and tool call id) is returned as it is, answered or not. The call key's journal
	// entry must exist.
	AskApproval(ctx context.Context, a Approval) (Approval, error)
	// DecideApproval answers a pending approval and returns it answered
	// (ErrApprovalNotFound, ErrApprovalDecided).
	DecideApproval(ctx context.Context, runID, id string, allow bool) (Approval, error)
	// Approvals returns the approvals f selects, by run and creation.
	Approvals(ctx context.Context, f ApprovalFilter) ([]Approval, error)

	// Heartbeat records that node n is alive (its row in nodes, heartbeat now) and
	// extends to until the lease of each run it holds, at the attempt it holds it. It
	// returns the leases it no longer holds: the run is at another attempt or another
	// node's (it was claimed by someone else), or gone. Those runs are lost to n.
	Heartbeat(ctx context.Context, n Node, until time.Time, held []Lease) (lost []Lease, err error)
	// Nodes returns the nodes that ever sent a heartbeat, by id, each with the number of
	// running runs it owns.
	Nodes(ctx context.Context) ([]Node, error)
	// Claimable returns up to limit runs (<= 0: all) another process may take over now, in
	// the order they should be taken: running runs whose lease ended before now (the
	// longest lapsed first), then running runs held by a process rather than a lease (the
	// caller checks that process), then suspended runs whose resume time is not after now.
	Claimable(ctx context.Context, now time.Time, limit int) ([]Run, error)
}

// Node is a daemon (or another process that drives runs) as the store knows it.
type Node struct {
	ID          string
	Address     string // where its API listens ("" = its unix socket only)
	PID         int
	StartedAt   time.Time
	HeartbeatAt time.Time // the last heartbeat, by the store's clock
	Runs        int       // running runs whose owner it is (Nodes only)
}

// Lease is a run held by a node at an attempt.
type Lease struct {
	RunID   string
	Attempt int
}

var _ Store = (*SQLite)(nil)
