package lua

import (
	"context"
	"errors"
	"fmt"

	"github.com/luft-run/luft/event"
	glua "github.com/yuin/gopher-lua"
)

// errorSlot is the slot of a parallel branch that raised or was cancelled. It has the
// fields of a failed agent result that scripts read unconditionally (tokens, findings),
// so Luft-style loops over the results (#r.findings, r.tokens) work on every slot.
func (v *vm) errorSlot(status, msg string) *glua.LTable {
	t := v.L.CreateTable(0, 5)
	t.RawSetString("error", glua.LString(msg))
	t.RawSetString("findings", v.codec.NewArray(0))
	t.RawSetString("ok", glua.LFalse)
	t.RawSetString("status", glua.LString(status))
	t.RawSetString("tokens", glua.LNumber(0))
	return t
}

// parallelFn is the Go half of parallel(items, fn [, opts]) and pmap(items, fn).
func (v *vm) parallelFn(pmap bool) glua.LGFunction {
	name := "parallel"
	if pmap {
		name = "pmap"
	}
	return func(L *glua.LState) int {
		t := v.checkEffect(L, name+"()")
		v.checkNesting(L, t, name+"()")
		where := v.where(L)
		items, ok := L.Get(1).(*glua.LTable)
		if !ok {
			return fail(L, where, "%s: argument 1 must be a list of items, got a %s", name, L.Get(1).Type())
		}
		fn, ok := L.Get(2).(*glua.LFunction)
		if !ok {
			return fail(L, where, "%s: argument 2 must be a function(item, index), got a %s", name, L.Get(2).Type())
		}
		n := items.Len()
		maxConc, failFast, explicitMax := n, false, false
		if o, ok := L.Get(3).(*glua.LTable); ok && !pmap {
			var err error
			o.ForEach(func(k, val glua.LValue) {
				if err != nil {
					return
				}
				switch k.String() {
				case "max_concurrency":
					f, ok := val.(glua.LNumber)
					if !ok || !wholeIn(float64(f), 1, maxWidth) {
						err = fmt.Errorf("option max_concurrency must be a whole number from 1 to %d, got %s", maxWidth, v.tostring(L, val))
					}
					maxConc, explicitMax = int(f), true
				case "fail_fast":
					b, ok := val.(glua.LBool)
					if !ok {
						err = fmt.Errorf("option fail_fast must be true or false, got %s", val.String())
					}
					failFast = bool(b)
				default:
					err = errors.New(unknownOption(k.String(), []string{"max_concurrency", "fail_fast"}))
				}
			})
			if err != nil {
				return fail(L, where, "%s: %s", name, err)
			}
		} else if L.Get(3) != glua.LNil && !pmap {
			return fail(L, where, "%s: argument 3 must be an options table, got a %s", name, L.Get(3).Type())
		}
		span := t.br.next()
		start := v.cfg.Now()
		v.emit(event.ParallelStarted, map[string]any{"span_id": span, "count": n, "phase_id": v.phaseID()})
		if n == 0 {
			v.emit(event.ParallelDone, map[string]any{"span_id": span, "count": 0, "ok": 0, "failed": 0, "elapsed_ms": 0})
			L.Push(glua.LTrue)
			L.Push(v.codec.NewArray(0))
			return 2
		}
		results := L.CreateTable(n, 0)
		j := &join{slots: make([]glua.LValue, n)}
		// Branches share one context per parallel call: fail_fast cancels the ones
		// still running together, and no context is made per branch.
		jctx, jcancel := t.ctx, context.CancelFunc(func() {})
		if failFast {
			jctx, jcancel = context.WithCancel(t.ctx)
		}
		if maxConc == n && !explicitMax {
			maxConc = min(n, v.cfg.BranchWindow)
		}
		var startNext func()
		finishSlot := func(i int, val glua.LValue, failed bool) {
			if j.slots[i] != nil {
				return
			}
			j.slots[i] = val
			j.running--
			j.done++
			if failed {
				j.failed++
			} else {
				j.ok++
			}
			if failed && failFast && !j.stopped {
				j.stopped = true
				jcancel()
				for k := range n {
					if j.slots[k] != nil {
						continue
					}
					if k < j.next { // started, still running
						j.running--
					}
					j.slots[k] = v.errorSlot("cancelled", "cancelled: another branch failed (fail_fast)")
					j.done++
					j.failed++
				}
			}
			startNext()
			if j.done == n && !j.resumed {
				j.resumed = true
				jcancel()
				for k, s := range j.slots {
					if s != glua.LNil {
						results.RawSetInt(k+1, s)
					}
				}
				v.emit(event.ParallelDone, map[string]any{"span_id": span, "count": n, "ok": j.ok, "failed": j.failed,
					"elapsed_ms": v.cfg.Now().Sub(start).Milliseconds()})
				v.resumeLater(t, glua.LTrue, results)
			}
		}
		startNext = func() {
			for j.running < maxConc && j.next < n && !j.stopped {
				i := j.next
				j.next++
				j.running++
				br := &branch{path: fmt.Sprintf("%s/par[%d]", span, i+1)}
				child := v.newTask(jctx, fn, []glua.LValue{items.RawGetInt(i + 1), glua.LNumber(i + 1)}, br, t.wf,
					func(rets []glua.LValue, err error) {
						if err != nil {
							finishSlot(i, v.errorSlot("error", v.errMessage(err)), true)
							return
						}
						val := glua.LValue(glua.LNil)
						if len(rets) > 0 {
							val = rets[0]
						}
						// Compatibility form: fn returned agent options and called no agent.
						if opts, ok := val.(*glua.LTable); ok && br.agents == 0 && opts.RawGetString("prompt").Type() == glua.LTString {
							agentTask := v.newTask(jctx, v.wrap.RawGetString("agent").(*glua.LFunction), []glua.LValue{opts}, br, t.wf,
								func(rets []glua.LValue, err error) {
									if err != nil {
										finishSlot(i, v.errorSlot("error", v.errMessage(err)), true)
										return
									}
									// agent() returns a failed call's result (ok=false) rather than raising.
									failed := false
									if r, ok := rets[0].(*glua.LTable); ok {
										failed = r.RawGetString("ok") == glua.LFalse
									}
									finishSlot(i, rets[0], failed)
								})
							agentTask.site = where
							v.runq = append(v.runq, agentTask)
							return
						}
						finishSlot(i, val, false)
					})
				child.site = where
				v.runq = append(v.runq, child)
			}
		}
		startNext()
		return v.yield(L)
	}
}

// join is the state of one parallel call: branches 0..next-1 have started, slots[i] is
// set when branch i has finished (or was cancelled by fail_fast).
type join struct {
	next, running, done, ok, failed int
	slots                           []glua.LValue
	stopped, resumed                bool
}
