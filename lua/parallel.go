package lua

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		items, fn, opts, err := v.parallelArgs(L, pmap)
		if err != nil {
			return fail(L, where, "%s: %s", name, err)
		}
		j := v.startJoin(t, where, items, fn)
		if j.n == 0 {
			return j.finishEmpty(L)
		}
		j.open(L, opts)
		j.startNext()
		return v.yield(L)
	}
}

// parallelOpts are the options of parallel; pmap takes none.
type parallelOpts struct {
	maxConcurrency int // 0 when the script set none
	failFast       bool
}

// parallelArgs reads the items, the branch function and the options of parallel or pmap.
func (v *vm) parallelArgs(L *glua.LState, pmap bool) (*glua.LTable, *glua.LFunction, parallelOpts, error) {
	var opts parallelOpts
	items, ok := L.Get(1).(*glua.LTable)
	if !ok {
		return nil, nil, opts, fmt.Errorf("argument 1 must be a list of items, got a %s", L.Get(1).Type())
	}
	fn, ok := L.Get(2).(*glua.LFunction)
	if !ok {
		return nil, nil, opts, fmt.Errorf("argument 2 must be a function(item, index), got a %s", L.Get(2).Type())
	}
	if pmap || L.Get(3) == glua.LNil {
		return items, fn, opts, nil
	}
	o, ok := L.Get(3).(*glua.LTable)
	if !ok {
		return nil, nil, opts, fmt.Errorf("argument 3 must be an options table, got a %s", L.Get(3).Type())
	}
	opts, err := v.parallelOptions(L, o)
	return items, fn, opts, err
}

// parallelOptions reads parallel's options table {max_concurrency=, fail_fast=}.
func (v *vm) parallelOptions(L *glua.LState, o *glua.LTable) (parallelOpts, error) {
	var opts parallelOpts
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
			opts.maxConcurrency = int(f)
		case "fail_fast":
			b, ok := val.(glua.LBool)
			if !ok {
				err = fmt.Errorf("option fail_fast must be true or false, got %s", val.String())
			}
			opts.failFast = bool(b)
		default:
			err = errors.New(unknownOption(k.String(), []string{"max_concurrency", "fail_fast"}))
		}
	})
	return opts, err
}

// join is the state of one parallel call: branches 0..next-1 have started, slots[i] is
// set when branch i has finished (or was cancelled by fail_fast). At most width branches
// run at once.
type join struct {
	v           *vm
	t           *task
	where, span string
	start       time.Time
	items       *glua.LTable
	fn          *glua.LFunction
	n           int

	results  *glua.LTable
	width    int
	failFast bool
	// Branches share one context per parallel call: fail_fast cancels the ones still
	// running together, and no context is made per branch.
	ctx    context.Context
	cancel context.CancelFunc

	next, running, done, ok, failed int
	slots                           []glua.LValue
	stopped, resumed                bool
}

// startJoin emits parallel_started for a call over items.
func (v *vm) startJoin(t *task, where string, items *glua.LTable, fn *glua.LFunction) *join {
	j := &join{v: v, t: t, where: where, items: items, fn: fn, n: items.Len()}
	j.span = t.br.next()
	j.start = v.cfg.Now()
	v.emit(event.ParallelStarted, map[string]any{"span_id": j.span, "count": j.n, "phase_id": v.phaseID()})
	return j
}

// finishEmpty returns the result of a call without items at once.
func (j *join) finishEmpty(L *glua.LState) int {
	j.v.emit(event.ParallelDone, map[string]any{"span_id": j.span, "count": 0, "ok": 0, "failed": 0, "elapsed_ms": 0})
	L.Push(glua.LTrue)
	L.Push(j.v.codec.NewArray(0))
	return 2
}

// open prepares the slots, the shared context and the width of a call with items.
func (j *join) open(L *glua.LState, opts parallelOpts) {
	j.results = L.CreateTable(j.n, 0)
	j.slots = make([]glua.LValue, j.n)
	j.failFast = opts.failFast
	j.ctx, j.cancel = j.t.ctx, context.CancelFunc(func() {})
	if j.failFast {
		j.ctx, j.cancel = context.WithCancel(j.t.ctx)
	}
	j.width = opts.maxConcurrency
	if j.width == 0 {
		j.width = min(j.n, j.v.cfg.BranchWindow)
	}
}

// startNext starts branches while fewer than width run and fail_fast has not stopped
// the call.
func (j *join) startNext() {
	for j.running < j.width && j.next < j.n && !j.stopped {
		i := j.next
		j.next++
		j.running++
		j.startBranch(i)
	}
}

// startBranch runs fn(items[i+1], i+1) as a task of its own.
func (j *join) startBranch(i int) {
	br := &branch{path: fmt.Sprintf("%s/par[%d]", j.span, i+1)}
	child := j.v.newTask(j.ctx, j.fn, []glua.LValue{j.items.RawGetInt(i + 1), glua.LNumber(i + 1)}, br, j.t.wf,
		func(rets []glua.LValue, err error) { j.branchDone(i, br, rets, err) })
	child.site = j.where
	j.v.runq = append(j.v.runq, child)
}

// branchDone fills the slot of branch i with what fn returned or raised.
func (j *join) branchDone(i int, br *branch, rets []glua.LValue, err error) {
	if err != nil {
		j.finishSlot(i, j.v.errorSlot("error", j.v.errMessage(err)), true)
		return
	}
	val := glua.LValue(glua.LNil)
	if len(rets) > 0 {
		val = rets[0]
	}
	// Compatibility form: fn returned agent options and called no agent.
	if opts, ok := val.(*glua.LTable); ok && br.agents == 0 && opts.RawGetString("prompt").Type() == glua.LTString {
		j.startAgent(i, br, opts)
		return
	}
	j.finishSlot(i, val, false)
}

// startAgent runs agent(opts) for branch i, whose fn returned agent options, in the
// branch's namespace; its result fills the slot.
func (j *join) startAgent(i int, br *branch, opts *glua.LTable) {
	agentTask := j.v.newTask(j.ctx, j.v.wrap.RawGetString("agent").(*glua.LFunction), []glua.LValue{opts}, br, j.t.wf,
		func(rets []glua.LValue, err error) {
			if err != nil {
				j.finishSlot(i, j.v.errorSlot("error", j.v.errMessage(err)), true)
				return
			}
			// agent() returns a failed call's result (ok=false) rather than raising.
			failed := false
			if r, ok := rets[0].(*glua.LTable); ok {
				failed = r.RawGetString("ok") == glua.LFalse
			}
			j.finishSlot(i, rets[0], failed)
		})
	agentTask.site = j.where
	j.v.runq = append(j.v.runq, agentTask)
}

// finishSlot sets slot i once, stops the other branches on a failure under fail_fast,
// starts the next branches and resumes the caller once every slot is set.
func (j *join) finishSlot(i int, val glua.LValue, failed bool) {
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
	if failed && j.failFast && !j.stopped {
		j.stopRest()
	}
	j.startNext()
	if j.done == j.n && !j.resumed {
		j.resume()
	}
}

// stopRest cancels the branches still running and fills every empty slot with a
// cancelled one (fail_fast).
func (j *join) stopRest() {
	j.stopped = true
	j.cancel()
	for k := range j.n {
		if j.slots[k] != nil {
			continue
		}
		if k < j.next { // started, still running
			j.running--
		}
		j.slots[k] = j.v.errorSlot("cancelled", "cancelled: another branch failed (fail_fast)")
		j.done++
		j.failed++
	}
}

// resume emits parallel_done and resumes the caller with the results.
func (j *join) resume() {
	j.resumed = true
	j.cancel()
	for k, s := range j.slots {
		if s != glua.LNil {
			j.results.RawSetInt(k+1, s)
		}
	}
	j.v.emit(event.ParallelDone, map[string]any{"span_id": j.span, "count": j.n, "ok": j.ok, "failed": j.failed,
		"elapsed_ms": j.v.cfg.Now().Sub(j.start).Milliseconds()})
	j.v.resumeLater(j.t, glua.LTrue, j.results)
}
