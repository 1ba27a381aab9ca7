package lua

import (
	"fmt"
	"regexp"
	"strings"

	glua "github.com/yuin/gopher-lua"
)

// scriptFrame is the position of th's innermost script frame ("file.lua:12"), or "".
func scriptFrame(th *glua.LState) string {
	for level := 0; level < 256; level++ {
		dbg, ok := th.GetStack(level)
		if !ok {
			break
		}
		if _, err := th.GetInfo("Sl", dbg, glua.LNil); err == nil && dbg.CurrentLine > 0 && dbg.Source != "" && dbg.Source != "<prelude>" {
			return fmt.Sprintf("%s:%d", dbg.Source, dbg.CurrentLine)
		}
	}
	return ""
}

// where returns the script position of the innermost script frame ("file.lua:12"). It
// looks through the coroutines of yield-safe pcall into the task that resumed them.
func (v *vm) where(L *glua.LState) string {
	for th := L; th != nil; th = th.Parent {
		for level := 1; level < 256; level++ {
			dbg, ok := th.GetStack(level)
			if !ok {
				break
			}
			if _, err := th.GetInfo("Sl", dbg, glua.LNil); err != nil {
				continue
			}
			// Chunks of luft's own ("<prelude>", "<converge>") are skipped: a position names
			// the script line that called into them.
			if dbg.CurrentLine > 0 && dbg.Source != "" && !strings.HasPrefix(dbg.Source, "<") {
				return fmt.Sprintf("%s:%d", dbg.Source, dbg.CurrentLine)
			}
		}
		if v.current != nil && th == v.current.th {
			break
		}
	}
	// No script frame on this branch's stack (its function is luft's own, or a tail call
	// replaced the frame): the line that started the branch.
	if v.current != nil {
		return v.current.site
	}
	return ""
}

// raiseAt raises a Lua error positioned at the script line that called the primitive,
// not at the Lua wrapper the primitive is reached through.
func (v *vm) raiseAt(L *glua.LState, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if where := v.where(L); where != "" {
		msg = where + ": " + msg
	}
	L.Error(glua.LString(msg), 0)
}

var traceWhereRe = regexp.MustCompile(`(?m)^\s*([^\s:]+\.lua:\d+):`)

var whereRe = regexp.MustCompile(`^([^\s:]+\.lua:\d+):\s?(.*)$`)

// splitWhere separates a "file.lua:12: message" prefix from a Lua error message.
func splitWhere(msg string) (string, string) {
	if m := whereRe.FindStringSubmatch(msg); m != nil {
		return m[1], m[2]
	}
	return "", msg
}
