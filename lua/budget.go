package lua

import (
	"math"

	glua "github.com/yuin/gopher-lua"
)

// budgetFn is budget{time_ms=, agents=, tokens=, usd=} and budget(time_ms [, rounds]).
func (v *vm) budgetFn(L *glua.LState, wf *workflowState) int {
	b := v.budgetArgs(L)
	if err := v.host.SetBudget(b); err != nil {
		L.RaiseError("budget: %s", err)
	}
	v.rounds = b.Rounds
	showBudget(L, wf, b)
	return 0
}

// budgetArgs reads either form of budget; a bad limit raises.
func (v *vm) budgetArgs(L *glua.LState) Budget {
	var b Budget
	switch a := L.Get(1).(type) {
	case *glua.LTable:
		a.ForEach(func(k, val glua.LValue) {
			switch k.String() {
			case "time_ms":
				b.TimeMS = int64(v.budgetLimit(L, "time_ms", val))
			case "agents":
				b.Agents = int(v.budgetLimit(L, "agents", val))
			case "tokens":
				b.Tokens = int(v.budgetLimit(L, "tokens", val))
			case "usd":
				b.USD = v.budgetLimit(L, "usd", val)
			default:
				L.RaiseError("budget: unknown limit %q (known: time_ms, agents, tokens, usd)", k.String())
			}
		})
	case glua.LNumber, *glua.LNilType:
		// Luft's positional form: the second number is its "rounds", a hint for loops
		// and converge's default max_rounds, never a cap on agent calls.
		b.TimeMS = int64(v.budgetLimit(L, "time_ms", L.Get(1)))
		if r := v.budgetLimit(L, "rounds", L.Get(2)); r > 0 {
			if r != math.Trunc(r) || r > 1000 {
				L.RaiseError("budget: rounds must be a whole number from 1 to 1000, got %s", L.Get(2).String())
			}
			b.Rounds = int(r)
		}
	default:
		L.RaiseError("budget: expected budget{time_ms=, agents=, tokens=, usd=} or budget(time_ms [, rounds])")
	}
	return b
}

// budgetLimit reads the limit name of budget: 0 (no limit) when nil, else a number
// from 0 to the limit's bound, whole except for time_ms and usd; anything else raises.
func (v *vm) budgetLimit(L *glua.LState, name string, val glua.LValue) float64 {
	if val == glua.LNil {
		return 0
	}
	hi, whole := float64(maxBudgetCount), true
	switch name {
	case "time_ms":
		hi, whole = maxBudgetTimeMS, false
	case "usd":
		hi, whole = maxBudgetUSD, false
	}
	n, ok := val.(glua.LNumber)
	f := float64(n)
	if !ok || !(f >= 0 && f <= hi) || whole && f != math.Trunc(f) {
		kind := "a number"
		if whole {
			kind = "a whole number"
		}
		L.RaiseError("budget: %s must be %s from 0 to %.0f (0 means no limit), got %s", name, kind, hi, v.tostring(L, val))
	}
	return f
}

// showBudget sets ctx.budget, which shows the script what it asked for.
func showBudget(L *glua.LState, wf *workflowState, b Budget) {
	c, ok := wf.env.RawGetString("ctx").(*glua.LTable)
	if !ok {
		return
	}
	bt := L.CreateTable(0, 5)
	for _, kv := range []struct {
		k string
		n float64
	}{{"agents", float64(b.Agents)}, {"rounds", float64(b.Rounds)}, {"time_ms", float64(b.TimeMS)}, {"tokens", float64(b.Tokens)}, {"usd", b.USD}} {
		if kv.n > 0 {
			bt.RawSetString(kv.k, glua.LNumber(kv.n))
		}
	}
	c.RawSetString("budget", bt)
}
