package lua

import (
	"strings"

	"github.com/luft-run/luft/event"
	glua "github.com/yuin/gopher-lua"
)

var logLevels = map[string]bool{"trace": true, "debug": true, "info": true, "warn": true, "error": true}

func (v *vm) logFn(L *glua.LState) int {
	msg := v.tostring(L, L.Get(1))
	level := L.OptString(2, "info")
	if !logLevels[level] {
		L.RaiseError("log: unknown level %q (use trace, debug, info, warn or error)", level)
	}
	v.emit(event.Log, map[string]any{"level": level, "msg": event.Cut(msg, v.lim.MaxLogBytes, limitLogBytes)})
	return 0
}

// limitLogBytes and limitReportBytes name the caps in cut markers and limit errors, as
// luft.toml spells them.
const (
	limitLogBytes    = "limits.max_log_bytes"
	limitReportBytes = "limits.max_report_bytes"
)

// printFn joins its arguments with tabs, as Lua's print does. The message is capped like
// log()'s; arguments past the cap are not even converted.
func (v *vm) printFn(L *glua.LState) int {
	var b strings.Builder
	for i := 1; i <= L.GetTop(); i++ {
		if i > 1 {
			b.WriteByte('\t')
		}
		b.WriteString(v.tostring(L, L.Get(i)))
		if b.Len() > v.lim.MaxLogBytes {
			break
		}
	}
	v.emit(event.Log, map[string]any{"level": "info", "msg": event.Cut(b.String(), v.lim.MaxLogBytes, limitLogBytes)})
	return 0
}
