package lua

import (
	"fmt"

	"github.com/luft-run/luft/event"
	glua "github.com/yuin/gopher-lua"
)

type stageDef struct {
	label string
	fn    *glua.LFunction
}

type pipeItem struct {
	data    glua.LValue
	failed  bool
	errMsg  string
	stages  []*glua.LTable
	started int64 // elapsed ms offset when the item entered stage 1
}

// pipelineFn is the Go half of pipeline{items=, stages=, max_inflight=} and
// pipeline(items, stages [, opts]).
func (v *vm) pipelineFn(L *glua.LState) int {
	t := v.checkEffect(L, "pipeline()")
	v.checkNesting(L, t, "pipeline()")
	where := v.where(L)
	var items, stages *glua.LTable
	var opts *glua.LTable
	if L.Get(2) == glua.LNil {
		spec, ok := L.Get(1).(*glua.LTable)
		if !ok {
			return fail(L, where, "pipeline: expected pipeline{items=..., stages=...} or pipeline(items, stages)")
		}
		items, _ = spec.RawGetString("items").(*glua.LTable)
		stages, _ = spec.RawGetString("stages").(*glua.LTable)
		opts = spec
		var bad string
		spec.ForEach(func(k, _ glua.LValue) {
			switch k.String() {
			case "items", "stages", "max_inflight":
			default:
				bad = k.String()
			}
		})
		if bad != "" {
			return fail(L, where, "pipeline: unknown field %q (known: items, stages, max_inflight)", bad)
		}
	} else {
		items, _ = L.Get(1).(*glua.LTable)
		stages, _ = L.Get(2).(*glua.LTable)
		opts, _ = L.Get(3).(*glua.LTable)
	}
	if items == nil {
		return fail(L, where, "pipeline: items must be a list")
	}
	if stages == nil || stages.Len() == 0 {
		return fail(L, where, "pipeline: stages must be a non-empty list of functions or {label=..., handler=function(data, item, index) ... end}")
	}
	var defs []stageDef
	for k := 1; k <= stages.Len(); k++ {
		switch s := stages.RawGetInt(k).(type) {
		case *glua.LFunction:
			defs = append(defs, stageDef{label: fmt.Sprintf("stage %d", k), fn: s})
		case *glua.LTable:
			fn, ok := s.RawGetString("handler").(*glua.LFunction)
			if !ok {
				return fail(L, where, "pipeline: stages[%d].handler must be a function(data, item, index)", k)
			}
			label := fmt.Sprintf("stage %d", k)
			if l, ok := s.RawGetString("label").(glua.LString); ok {
				label = string(l)
			} else if l, ok := s.RawGetString("name").(glua.LString); ok {
				label = string(l)
			}
			defs = append(defs, stageDef{label: label, fn: fn})
		default:
			return fail(L, where, "pipeline: stages[%d] must be a function or {label=..., handler=...}, got a %s", k, s.Type())
		}
	}
	maxInflight := v.cfg.Concurrency
	if opts != nil {
		if mv := opts.RawGetString("max_inflight"); mv != glua.LNil {
			f, ok := mv.(glua.LNumber)
			if !ok || !wholeIn(float64(f), 1, maxWidth) {
				return fail(L, where, "pipeline: max_inflight must be a whole number from 1 to %d, got %s", maxWidth, v.tostring(L, mv))
			}
			maxInflight = int(f)
		}
	}
	n, S := items.Len(), len(defs)
	span := t.br.next()
	start := v.cfg.Now()
	elapsed := func() int64 { return v.cfg.Now().Sub(start).Milliseconds() }
	v.emit(event.PipelineStarted, map[string]any{"span_id": span, "items": n, "total_stages": S, "phase_id": v.phaseID()})

	state := make([]*pipeItem, n)
	queues := make([][]int, S)
	inflight := make([]int, S)
	for i := range n {
		state[i] = &pipeItem{data: items.RawGetInt(i + 1)}
		queues[0] = append(queues[0], i)
	}
	okCount, failCount, doneCount := 0, 0, 0
	result := func(list *glua.LTable, elapsedMS int64) *glua.LTable {
		res := L.CreateTable(0, 5)
		res.RawSetString("failed", glua.LNumber(failCount))
		res.RawSetString("items", list)
		res.RawSetString("ok", glua.LNumber(okCount))
		res.RawSetString("total_elapsed_ms", glua.LNumber(elapsedMS))
		res.RawSetString("total_stages", glua.LNumber(S))
		return res
	}
	if n == 0 {
		v.emit(event.PipelineDone, map[string]any{"span_id": span, "ok": 0, "failed": 0, "elapsed_ms": 0})
		L.Push(glua.LTrue)
		L.Push(result(v.codec.NewArray(0), 0))
		return 2
	}
	finish := func() {
		list := v.codec.NewArray(n)
		for i, it := range state {
			e := L.CreateTable(0, 5)
			if it.errMsg != "" {
				e.RawSetString("error", glua.LString(it.errMsg))
			}
			e.RawSetString("index", glua.LNumber(i+1))
			e.RawSetString("ok", glua.LBool(!it.failed))
			if !it.failed {
				e.RawSetString("output", it.data)
			}
			st := v.codec.NewArray(len(it.stages))
			for _, s := range it.stages {
				st.Append(s)
			}
			e.RawSetString("stages", st)
			list.Append(e)
		}
		res := result(list, elapsed())
		v.emit(event.PipelineDone, map[string]any{"span_id": span, "ok": okCount, "failed": failCount, "elapsed_ms": elapsed()})
		v.resumeLater(t, glua.LTrue, res)
	}
	stageRec := func(label, status string, ms int64, errMsg string) *glua.LTable {
		r := L.CreateTable(0, 4)
		r.RawSetString("elapsed_ms", glua.LNumber(ms))
		if errMsg != "" {
			r.RawSetString("error", glua.LString(errMsg))
		}
		r.RawSetString("label", glua.LString(label))
		r.RawSetString("status", glua.LString(status))
		return r
	}
	var pump func()
	itemDone := func(i int) {
		it := state[i]
		doneCount++
		if it.failed {
			failCount++
		} else {
			okCount++
		}
		data := map[string]any{"span_id": span, "index": i + 1, "ok": !it.failed, "elapsed_ms": elapsed() - it.started}
		if it.errMsg != "" {
			data["error"] = it.errMsg
		}
		v.emit(event.PipelineItemDone, data)
	}
	pump = func() {
		// Later stages first, so items already under way finish before new ones start.
		for s := S - 1; s >= 0; s-- {
			for inflight[s] < maxInflight && len(queues[s]) > 0 {
				i := queues[s][0]
				queues[s] = queues[s][1:]
				inflight[s]++
				it := state[i]
				if s == 0 {
					it.started = elapsed()
				}
				stageStart := elapsed()
				br := &branch{path: fmt.Sprintf("%s/item[%d]/stage[%d]", span, i+1, s+1)}
				child := v.newTask(t.ctx, defs[s].fn, []glua.LValue{it.data, items.RawGetInt(i + 1), glua.LNumber(i + 1)}, br, t.wf,
					func(rets []glua.LValue, err error) {
						inflight[s]--
						ms := elapsed() - stageStart
						if err != nil {
							it.failed = true
							it.errMsg = v.errMessage(err)
							it.stages = append(it.stages, stageRec(defs[s].label, "error", ms, it.errMsg))
							for k := s + 1; k < S; k++ {
								it.stages = append(it.stages, stageRec(defs[k].label, "skipped", 0, ""))
							}
							itemDone(i)
						} else {
							it.data = glua.LNil
							if len(rets) > 0 {
								it.data = rets[0]
							}
							it.stages = append(it.stages, stageRec(defs[s].label, "ok", ms, ""))
							if s+1 < S {
								queues[s+1] = append(queues[s+1], i)
							} else {
								itemDone(i)
							}
						}
						pump()
						if doneCount == n {
							doneCount++ // finish once
							finish()
						}
					})
				child.site = where
				v.runq = append(v.runq, child)
			}
		}
	}
	pump()
	return v.yield(L)
}
