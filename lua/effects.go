package lua

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	glua "github.com/yuin/gopher-lua"
)

// fail returns (false, message) from a yielding primitive's Go half; the Lua wrapper
// raises the message.
func fail(L *glua.LState, where, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	if where != "" {
		msg = where + ": " + msg
	}
	L.Push(glua.LFalse)
	L.Push(glua.LString(msg))
	return 2
}

func (v *vm) deliver(t *task, f func() []glua.LValue) {
	select {
	case v.compl <- completion{t: t, deliver: f}:
	case <-v.done:
	}
}

// hostError ends the run when the host refused an effect with a *ScriptError (a budget,
// a divergence); other errors are the effect's own failure and the script may catch them.
func (v *vm) hostError(L *glua.LState, err error) {
	var se *ScriptError
	if errors.As(err, &se) {
		v.fatal = se
		L.RaiseError("%s", se.Msg)
	}
}

// errMessage is the text of a branch's error as a script sees it.
func (v *vm) errMessage(err error) string {
	var ae *glua.ApiError
	if errors.As(err, &ae) {
		return v.explain(v.errorText(ae.Object))
	}
	return err.Error()
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
