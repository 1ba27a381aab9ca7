package lua

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	glua "github.com/yuin/gopher-lua"
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

// maxErrorObjectText is the most of an error object's rendering (its __tostring or its
// JSON) an error message carries: enough to read, never a flood through every view of
// the run.
const maxErrorObjectText = 4096

// errorTostringTimeout bounds an error object's __tostring. It runs after the raising
// code has stopped, while the run waits for it, so a loop in it must not hold the run.
const errorTostringTimeout = 100 * time.Millisecond

// errorText is the text of a value raised with error(): what its __tostring returns, else
// a table's message field, else the table as JSON (never its address, which differs from
// run to run), else the value's string form. A table's rendering is cut to
// maxErrorObjectText bytes.
func (v *vm) errorText(obj glua.LValue) string {
	tbl, ok := obj.(*glua.LTable)
	if !ok {
		if s, isStr := obj.(glua.LString); isStr {
			return scrubAddrs(string(s))
		}
		return refName(obj)
	}
	if s, ok := v.errorTostring(tbl); ok {
		return clipErrorText(s)
	}
	if m := tbl.RawGetString("message"); m != glua.LNil {
		if s, isStr := m.(glua.LString); isStr {
			return scrubAddrs(string(s))
		}
		return refName(m)
	}
	if b, err := v.codec.Encode(tbl, ""); err == nil {
		return clipErrorText(string(b))
	}
	return refName(obj)
}

// errorTostring calls an error object's __tostring and reports whether it gave a string
// or a number. The call is contained: it runs on a thread of its own with a short
// deadline (and the run's memory and string limits), it cannot reach a running task (so
// no primitive may wait in it), and whatever goes wrong in it (an error, a limit, a
// panic inside the VM) only means the object is shown another way.
func (v *vm) errorTostring(tbl *glua.LTable) (s string, ok bool) {
	mt, _ := tbl.Metatable.(*glua.LTable)
	if mt == nil {
		return "", false
	}
	fn, isFn := mt.RawGetString("__tostring").(*glua.LFunction)
	if !isFn || v.ctx.Err() != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(v.ctx, errorTostringTimeout)
	th, cancelTh := v.L.NewThread()
	th.SetContext(ctx)
	current, fatal := v.current, v.fatal
	v.current = nil
	defer func() {
		if r := recover(); r != nil {
			s, ok = "", false
		}
		v.current, v.fatal = current, fatal
		cancelTh()
		cancel()
	}()
	th.Push(fn)
	th.Push(tbl)
	if err := th.PCall(1, 1, nil); err != nil {
		return "", false
	}
	switch r := th.Get(-1).(type) {
	case glua.LString:
		return scrubAddrs(string(r)), true
	case glua.LNumber:
		return r.String(), true
	}
	return "", false
}

// clipErrorText cuts s to maxErrorObjectText bytes on a rune boundary, saying how much
// is left out.
func clipErrorText(s string) string {
	if len(s) <= maxErrorObjectText {
		return s
	}
	n := maxErrorObjectText
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("… (%d bytes more)", len(s)-n)
}

func (v *vm) cancelled(err error) error {
	cause := context.Cause(v.ctx)
	if cause == nil {
		cause = err
	}
	var se *ScriptError
	if errors.As(cause, &se) {
		return se
	}
	return &ScriptError{Kind: KindCancelled, Msg: "run stopped: " + cause.Error(), Cause: cause}
}

// interrupted is cancelled for an error raised inside the VM by the context check: it
// keeps the script position the VM was at, so a limit names the line it stopped.
func (v *vm) interrupted(resumeErr error, th *glua.LState) error {
	err := v.cancelled(v.ctx.Err())
	var ae *glua.ApiError
	var se *ScriptError
	if errors.As(resumeErr, &ae) && errors.As(err, &se) && se.Where == "" {
		where, _ := splitWhere(ae.Object.String())
		if where == "" {
			// Stopped in the prelude (the Lua side of pcall): the coroutine's frames are
			// still there, the script's below the prelude's.
			where = scriptFrame(th)
		}
		if where != "" {
			cp := *se
			cp.Where = where
			return &cp
		}
	}
	return err
}

// overflowError turns gopher-lua's call stack overflow, raised without a script position
// (and as a Go panic inside the VM), into the call depth limit error at the script line
// of the innermost frame of th, the coroutine that overflowed. It returns nil for any
// other error.
func (v *vm) overflowError(th *glua.LState, err error) *ScriptError {
	var ae *glua.ApiError
	if !errors.As(err, &ae) {
		return nil
	}
	// The exact text of gopher-lua's panic: a script's own error("... stack overflow")
	// stays an ordinary error that pcall may catch.
	if msg, ok := ae.Object.(glua.LString); !ok || msg != "lua callstack overflow" {
		return nil
	}
	where := ""
	for level := 0; where == "" && level < 8; level++ {
		dbg, ok := th.GetStack(level)
		if !ok {
			break
		}
		if _, err := th.GetInfo("Sl", dbg, glua.LNil); err == nil && dbg.CurrentLine > 0 && dbg.Source != "<prelude>" {
			where = fmt.Sprintf("%s:%d", dbg.Source, dbg.CurrentLine)
		}
	}
	return &ScriptError{Kind: KindLimit, Where: where, Msg: fmt.Sprintf("call depth limit (%d frames) exceeded: unbounded recursion?", v.lim.MaxCallDepth)}
}

// raiseFatal ends the run with a limit error that pcall cannot catch.
func (v *vm) raiseFatal(L *glua.LState, format string, args ...any) int {
	return v.raiseFatalKind(L, KindLimit, format, args...)
}

// raiseFatalKind ends the run with an error of the given kind that pcall cannot catch
// (a limit, or an invalid agent option: mistakes in the script, not failures of a call).
func (v *vm) raiseFatalKind(L *glua.LState, kind ErrorKind, format string, args ...any) int {
	where := v.where(L)
	se := &ScriptError{Kind: kind, Where: where, Msg: fmt.Sprintf(format, args...)}
	v.fatal = se
	L.RaiseError("%s", se.Msg)
	return 0
}

// scriptError turns an error from Resume into a *ScriptError with a script position.
func (v *vm) scriptError(err error, kind ErrorKind) error {
	if v.fatal != nil {
		return v.fatal
	}
	var se *ScriptError
	if errors.As(err, &se) {
		return se
	}
	if v.ctx.Err() != nil {
		return v.cancelled(v.ctx.Err())
	}
	var ae *glua.ApiError
	if errors.As(err, &ae) {
		where, rest := splitWhere(v.errorText(ae.Object))
		if where == "" {
			// gopher-lua raises its depth errors ("stack overflow") without a
			// position; the traceback's innermost script frame has it.
			if m := traceWhereRe.FindStringSubmatch(ae.StackTrace); m != nil {
				where = m[1]
			}
		}
		if strings.Contains(rest, "stack overflow") {
			return &ScriptError{Kind: KindLimit, Where: where, Msg: fmt.Sprintf("call depth limit (%d frames) exceeded: unbounded recursion?", v.lim.MaxCallDepth), Trace: ae.StackTrace}
		}
		if strings.Contains(rest, "registry overflow") {
			return &ScriptError{Kind: KindLimit, Where: where, Msg: "Lua stack limit exceeded (too many values on the stack)", Trace: ae.StackTrace}
		}
		if where != "" {
			_, rest = splitWhere(v.explain(where + ": " + rest))
		}
		return &ScriptError{Kind: kind, Where: where, Msg: rest, Trace: ae.StackTrace}
	}
	return &ScriptError{Kind: kind, Msg: err.Error()}
}
