package lua

import (
	"errors"
	"fmt"
)

// ErrorKind classifies why a script stopped, so callers can map it to an exit code without
// reading messages.
type ErrorKind string

// Error kinds.
const (
	// KindSyntax: the script does not parse. Reported before anything runs.
	KindSyntax ErrorKind = "syntax"
	// KindInvalid: the script parses but cannot be run: no main(), a bad meta table, an
	// error in its top-level code. Reported before any agent runs.
	KindInvalid ErrorKind = "invalid"
	// KindRuntime: main() raised an error that nothing caught.
	KindRuntime ErrorKind = "runtime"
	// KindLimit: the script broke a sandbox limit (call depth, string size, agent calls,
	// memory, a yield under a Go frame). pcall cannot catch these.
	KindLimit ErrorKind = "limit"
	// KindCancelled: the run's context ended (cancel, timeout, time budget).
	KindCancelled ErrorKind = "cancelled"
	// KindDivergence: on resume, a call's inputs differ from the journal entry recorded
	// under its call key. pcall cannot catch it.
	KindDivergence ErrorKind = "divergence"
)

// ScriptError is an error that stopped a script, with the position it came from.
type ScriptError struct {
	Kind  ErrorKind
	Where string // "file.lua:12", empty when unknown
	Msg   string
	Trace string // Lua stack traceback, when there is one
	Cause error  // for KindCancelled: the context's cause; for a host's refusal, its reason
}

func (e *ScriptError) Error() string {
	if e.Where != "" {
		return fmt.Sprintf("%s: %s", e.Where, e.Msg)
	}
	return e.Msg
}

func (e *ScriptError) Unwrap() error { return e.Cause }

// ErrorKindOf returns the kind of a *ScriptError in err's chain, or "" for other errors.
func ErrorKindOf(err error) ErrorKind {
	var se *ScriptError
	if errors.As(err, &se) {
		return se.Kind
	}
	return ""
}
