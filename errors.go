package luft

import (
	"errors"
	"strings"

	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// Errors the Engine returns that callers test with errors.Is. The typed errors below
// (ScriptError, LimitError, BudgetError, DivergenceError, NotFoundError) are matched with
// errors.As; each unwraps to the runtime's own error.
var (
	// ErrCancelled: the run was cancelled (Run.Cancel, Engine.Cancel, or its context ended).
	ErrCancelled = runtime.ErrCancelled
	// ErrTimeout: the run reached Script.Timeout.
	ErrTimeout = runtime.ErrTimeout
	// ErrSuspended: the scheduler suspended the run because a turn would wait longer
	// than suspend_after for its lane's rate-limit budget; Result.ResumeAfter says when
	// it can go on.
	ErrSuspended = runtime.ErrSuspended
	// ErrShutdown: the run's Engine was closed while it ran; the journal holds every
	// finished call, so Resume goes on from there.
	ErrShutdown = runtime.ErrShutdown
	// ErrNotResumable: Resume of a run that is neither running, failed, cancelled nor
	// suspended.
	ErrNotResumable = runtime.ErrNotResumable
	// ErrScriptChanged: Resume of a run whose workflow file changed since it started
	// (ResumeOptions.AllowChangedScript runs the new version).
	ErrScriptChanged = runtime.ErrScriptChanged
	// ErrStillRunning: Resume of a run another Engine or process is still driving.
	ErrStillRunning = runtime.ErrStillRunning
	// ErrClosed: the Engine has been closed.
	ErrClosed = errors.New("luft: the engine is closed")
)

// ScriptError is a workflow that cannot run or that raised an error nothing caught.
type ScriptError struct {
	// Kind is "syntax" (it does not parse), "invalid" (no main(), a bad meta table, an
	// error in its top-level code) or "runtime" (main() raised an error).
	Kind  string
	Where string // "file.lua:12"; "" when unknown
	Msg   string
	Trace string // the Lua stack traceback, when there is one
	err   error
}

func (e *ScriptError) Error() string { return e.err.Error() }
func (e *ScriptError) Unwrap() error { return e.err }

// LimitError is a run stopped by a sandbox limit: call depth, string size, memory, agent
// calls per run, log or event volume. A limit is not catchable by the script's pcall.
type LimitError struct {
	Where string
	Msg   string
	err   error
}

func (e *LimitError) Error() string { return e.err.Error() }
func (e *LimitError) Unwrap() error { return e.err }

// BudgetError is a run stopped by its budget{}: a call refused because it would pass the
// token or USD budget (Time false; the run failed), or the time budget used up (Time
// true; the run is suspended and resumes with a fresh time budget).
type BudgetError struct {
	Where string
	Msg   string
	Time  bool
	err   error
}

func (e *BudgetError) Error() string { return e.err.Error() }
func (e *BudgetError) Unwrap() error { return e.err }

// DivergenceError is a resumed run whose call's inputs differ from what the journal
// recorded under the same call key: the script or its inputs changed. Resume with
// ResumeOptions.RerunFromDivergence to run from that call on, or start a new run.
type DivergenceError struct {
	CallKey string // e.g. "main/3"
	Where   string
	Msg     string
	err     error
}

func (e *DivergenceError) Error() string { return e.err.Error() }
func (e *DivergenceError) Unwrap() error { return e.err }

// NotFoundError is a run id (or id prefix) that names no run, or more than one.
type NotFoundError struct {
	Ref       string
	Ambiguous bool // the prefix matches several runs; give more of the id
	err       error
}

func (e *NotFoundError) Error() string { return e.err.Error() }
func (e *NotFoundError) Unwrap() error { return e.err }

// typed maps an error of the runtime, the VM or the store to the typed errors above;
// anything else comes back as it is. The message is the runtime's, unchanged.
func typed(err error, ref string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, storage.ErrRunNotFound) || errors.Is(err, storage.ErrAmbiguousRun) {
		return &NotFoundError{Ref: ref, Ambiguous: errors.Is(err, storage.ErrAmbiguousRun), err: err}
	}
	if errors.Is(err, runtime.ErrTimeBudget) {
		return &BudgetError{Msg: runtime.ErrTimeBudget.Error(), Time: true, err: err}
	}
	var se *lua.ScriptError
	if !errors.As(err, &se) {
		return err
	}
	switch se.Kind {
	case lua.KindSyntax, lua.KindInvalid, lua.KindRuntime:
		return &ScriptError{Kind: string(se.Kind), Where: se.Where, Msg: se.Msg, Trace: se.Trace, err: err}
	case lua.KindLimit:
		if errors.Is(err, runtime.ErrBudgetExceeded) {
			return &BudgetError{Where: se.Where, Msg: se.Msg, err: err}
		}
		return &LimitError{Where: se.Where, Msg: se.Msg, err: err}
	case lua.KindDivergence:
		return &DivergenceError{CallKey: divergentKey(se.Msg), Where: se.Where, Msg: se.Msg, err: err}
	}
	return err // cancelled: errors.Is(err, ErrCancelled) and friends match its cause
}

// divergentKey reads the call key from the runtime's divergence message ("... divergence
// at call main/3: ...").
func divergentKey(msg string) string {
	const at = "divergence at call "
	i := strings.Index(msg, at)
	if i < 0 {
		return ""
	}
	rest := msg[i+len(at):]
	if j := strings.IndexAny(rest, ": "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}
