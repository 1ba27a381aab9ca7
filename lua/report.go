package lua

import (
	"errors"
	"fmt"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua/luaval"
	glua "github.com/yuin/gopher-lua"
)

func (v *vm) reportFn(L *glua.LState, wf *workflowState) int {
	where := v.where(L)
	if wf.hasReport {
		// The first value stays (Luft's scripts and skill rely on it); a second call is a
		// mistake worth a warning that names both lines.
		v.emit(event.Log, map[string]any{"level": "warn", "msg": fmt.Sprintf(
			"report() called again at %s and ignored: the run's result is the value reported at %s (call report once)", where, wf.reportWhere)})
		return 0
	}
	val, err := v.codec.FromLua(L.Get(1))
	if err != nil {
		if errors.Is(err, luaval.ErrTooLarge) {
			return v.raiseFatal(L, "report: the value is too large to store: %s", err)
		}
		L.RaiseError("report: the value cannot be stored as JSON: %s", err)
	}
	// A report over the cap keeps its shape with its longest strings cut; one whose
	// structure alone is too big cannot be cut into anything a reader could use.
	fitted, ok := event.Fit(val, v.lim.MaxReportBytes, limitReportBytes)
	if !ok {
		return v.raiseFatal(L, "report: the value takes %s as JSON even with its strings cut, more than the %s limit (%s in luft.toml); report a smaller table, or a string, which is cut with a marker",
			event.FormatBytes(int64(event.Size(val))), event.FormatBytes(int64(v.lim.MaxReportBytes)), limitReportBytes)
	}
	// The report event is emitted once, when main returns (see run): repeated report()
	// calls then never add to the run's stored events.
	wf.report, wf.hasReport, wf.reportWhere = fitted, true, where
	return 0
}
