package lua

import (
	"errors"
	"fmt"
	"time"

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
	items, defs, maxInflight, err := v.pipelineArgs(L)
	if err != nil {
		return fail(L, where, "pipeline: %s", err)
	}
	p := v.startPipeline(L, t, where, items, defs, maxInflight)
	if len(p.state) == 0 {
		return p.finishEmpty()
	}
	p.pump()
	return v.yield(L)
}

// pipelineArgs reads the items, the stages and max_inflight of either form of pipeline.
func (v *vm) pipelineArgs(L *glua.LState) (items *glua.LTable, defs []stageDef, maxInflight int, err error) {
	items, stages, opts, err := pipelineForm(L)
	if err != nil {
		return nil, nil, 0, err
	}
	if items == nil {
		return nil, nil, 0, errors.New("items must be a list")
	}
	if defs, err = pipelineStages(stages); err != nil {
		return nil, nil, 0, err
	}
	if maxInflight, err = v.pipelineMaxInflight(L, opts); err != nil {
		return nil, nil, 0, err
	}
	return items, defs, maxInflight, nil
}

// pipelineForm tells pipeline{items=, stages=, max_inflight=} from pipeline(items, stages
// [, opts]) and returns the tables each names; the fields of the table form are checked.
func pipelineForm(L *glua.LState) (items, stages, opts *glua.LTable, err error) {
	if L.Get(2) != glua.LNil {
		items, _ = L.Get(1).(*glua.LTable)
		stages, _ = L.Get(2).(*glua.LTable)
		opts, _ = L.Get(3).(*glua.LTable)
		return items, stages, opts, nil
	}
	spec, ok := L.Get(1).(*glua.LTable)
	if !ok {
		return nil, nil, nil, errors.New("expected pipeline{items=..., stages=...} or pipeline(items, stages)")
	}
	items, _ = spec.RawGetString("items").(*glua.LTable)
	stages, _ = spec.RawGetString("stages").(*glua.LTable)
	var bad string
	spec.ForEach(func(k, _ glua.LValue) {
		switch k.String() {
		case "items", "stages", "max_inflight":
		default:
			bad = k.String()
		}
	})
	if bad != "" {
		return nil, nil, nil, fmt.Errorf("unknown field %q (known: items, stages, max_inflight)", bad)
	}
	return items, stages, spec, nil
}

// pipelineStages reads the stage list: functions, or {label=, handler=} tables.
func pipelineStages(stages *glua.LTable) ([]stageDef, error) {
	if stages == nil || stages.Len() == 0 {
		return nil, errors.New("stages must be a non-empty list of functions or {label=..., handler=function(data, item, index) ... end}")
	}
	var defs []stageDef
	for k := 1; k <= stages.Len(); k++ {
		switch s := stages.RawGetInt(k).(type) {
		case *glua.LFunction:
			defs = append(defs, stageDef{label: fmt.Sprintf("stage %d", k), fn: s})
		case *glua.LTable:
			fn, ok := s.RawGetString("handler").(*glua.LFunction)
			if !ok {
				return nil, fmt.Errorf("stages[%d].handler must be a function(data, item, index)", k)
			}
			label := fmt.Sprintf("stage %d", k)
			if l, ok := s.RawGetString("label").(glua.LString); ok {
				label = string(l)
			} else if l, ok := s.RawGetString("name").(glua.LString); ok {
				label = string(l)
			}
			defs = append(defs, stageDef{label: label, fn: fn})
		default:
			return nil, fmt.Errorf("stages[%d] must be a function or {label=..., handler=...}, got a %s", k, s.Type())
		}
	}
	return defs, nil
}

// pipelineMaxInflight is the max_inflight option; the run's concurrency when unset.
func (v *vm) pipelineMaxInflight(L *glua.LState, opts *glua.LTable) (int, error) {
	if opts == nil {
		return v.cfg.Concurrency, nil
	}
	mv := opts.RawGetString("max_inflight")
	if mv == glua.LNil {
		return v.cfg.Concurrency, nil
	}
	f, ok := mv.(glua.LNumber)
	if !ok || !wholeIn(float64(f), 1, maxWidth) {
		return 0, fmt.Errorf("max_inflight must be a whole number from 1 to %d, got %s", maxWidth, v.tostring(L, mv))
	}
	return int(f), nil
}

// pipeRun is one pipeline call while its items move through the stages: every item
// waits in the queue of its next stage, and each stage runs at most maxInflight items
// at once.
type pipeRun struct {
	v           *vm
	L           *glua.LState
	t           *task
	where, span string
	start       time.Time
	items       *glua.LTable
	defs        []stageDef
	maxInflight int

	state    []*pipeItem
	queues   [][]int // item indexes waiting for each stage
	inflight []int   // items running in each stage
	ok       int
	failed   int
	done     int // items finished; one more once the pipeline has finished
}

// startPipeline emits pipeline_started and queues every item for the first stage.
func (v *vm) startPipeline(L *glua.LState, t *task, where string, items *glua.LTable, defs []stageDef, maxInflight int) *pipeRun {
	n, S := items.Len(), len(defs)
	p := &pipeRun{v: v, L: L, t: t, where: where, items: items, defs: defs, maxInflight: maxInflight}
	p.span = t.br.next()
	p.start = v.cfg.Now()
	v.emit(event.PipelineStarted, map[string]any{"span_id": p.span, "items": n, "total_stages": S, "phase_id": v.phaseID()})
	p.state = make([]*pipeItem, n)
	p.queues = make([][]int, S)
	p.inflight = make([]int, S)
	for i := range n {
		p.state[i] = &pipeItem{data: items.RawGetInt(i + 1)}
		p.queues[0] = append(p.queues[0], i)
	}
	return p
}

func (p *pipeRun) elapsed() int64 { return p.v.cfg.Now().Sub(p.start).Milliseconds() }

// finishEmpty returns the result of a pipeline without items at once.
func (p *pipeRun) finishEmpty() int {
	p.v.emit(event.PipelineDone, map[string]any{"span_id": p.span, "ok": 0, "failed": 0, "elapsed_ms": 0})
	p.L.Push(glua.LTrue)
	p.L.Push(p.result(p.v.codec.NewArray(0), 0))
	return 2
}

// pump starts the queued items of every stage up to max_inflight. Later stages first, so
// items already under way finish before new ones start.
func (p *pipeRun) pump() {
	for s := len(p.defs) - 1; s >= 0; s-- {
		for p.inflight[s] < p.maxInflight && len(p.queues[s]) > 0 {
			i := p.queues[s][0]
			p.queues[s] = p.queues[s][1:]
			p.startStage(i, s)
		}
	}
}

// startStage runs stage s of item i as a task of its own.
func (p *pipeRun) startStage(i, s int) {
	p.inflight[s]++
	it := p.state[i]
	if s == 0 {
		it.started = p.elapsed()
	}
	stageStart := p.elapsed()
	br := &branch{path: fmt.Sprintf("%s/item[%d]/stage[%d]", p.span, i+1, s+1)}
	child := p.v.newTask(p.t.ctx, p.defs[s].fn, []glua.LValue{it.data, p.items.RawGetInt(i + 1), glua.LNumber(i + 1)}, br, p.t.wf,
		func(rets []glua.LValue, err error) {
			p.inflight[s]--
			p.stageDone(i, s, p.elapsed()-stageStart, rets, err)
		})
	child.site = p.where
	p.v.runq = append(p.v.runq, child)
}

// stageDone records how stage s of item i ended, moves the item on (or ends it), starts
// what may start now and finishes the pipeline after its last item.
func (p *pipeRun) stageDone(i, s int, ms int64, rets []glua.LValue, err error) {
	it := p.state[i]
	if err != nil {
		it.failed = true
		it.errMsg = p.v.errMessage(err)
		it.stages = append(it.stages, p.stageRecord(p.defs[s].label, "error", ms, it.errMsg))
		for k := s + 1; k < len(p.defs); k++ {
			it.stages = append(it.stages, p.stageRecord(p.defs[k].label, "skipped", 0, ""))
		}
		p.itemDone(i)
	} else {
		it.data = glua.LNil
		if len(rets) > 0 {
			it.data = rets[0]
		}
		it.stages = append(it.stages, p.stageRecord(p.defs[s].label, "ok", ms, ""))
		if s+1 < len(p.defs) {
			p.queues[s+1] = append(p.queues[s+1], i)
		} else {
			p.itemDone(i)
		}
	}
	p.pump()
	if p.done == len(p.state) {
		p.done++ // finish once
		p.finish()
	}
}

// itemDone counts item i as finished and emits pipeline_item_done.
func (p *pipeRun) itemDone(i int) {
	it := p.state[i]
	p.done++
	if it.failed {
		p.failed++
	} else {
		p.ok++
	}
	data := map[string]any{"span_id": p.span, "index": i + 1, "ok": !it.failed, "elapsed_ms": p.elapsed() - it.started}
	if it.errMsg != "" {
		data["error"] = it.errMsg
	}
	p.v.emit(event.PipelineItemDone, data)
}

// finish builds the result of every item, emits pipeline_done and resumes the caller.
func (p *pipeRun) finish() {
	list := p.v.codec.NewArray(len(p.state))
	for i, it := range p.state {
		e := p.L.CreateTable(0, 5)
		if it.errMsg != "" {
			e.RawSetString("error", glua.LString(it.errMsg))
		}
		e.RawSetString("index", glua.LNumber(i+1))
		e.RawSetString("ok", glua.LBool(!it.failed))
		if !it.failed {
			e.RawSetString("output", it.data)
		}
		st := p.v.codec.NewArray(len(it.stages))
		for _, s := range it.stages {
			st.Append(s)
		}
		e.RawSetString("stages", st)
		list.Append(e)
	}
	res := p.result(list, p.elapsed())
	p.v.emit(event.PipelineDone, map[string]any{"span_id": p.span, "ok": p.ok, "failed": p.failed, "elapsed_ms": p.elapsed()})
	p.v.resumeLater(p.t, glua.LTrue, res)
}

// result is the table pipeline returns.
func (p *pipeRun) result(list *glua.LTable, elapsedMS int64) *glua.LTable {
	res := p.L.CreateTable(0, 5)
	res.RawSetString("failed", glua.LNumber(p.failed))
	res.RawSetString("items", list)
	res.RawSetString("ok", glua.LNumber(p.ok))
	res.RawSetString("total_elapsed_ms", glua.LNumber(elapsedMS))
	res.RawSetString("total_stages", glua.LNumber(len(p.defs)))
	return res
}

// stageRecord is one entry of an item's stages list.
func (p *pipeRun) stageRecord(label, status string, ms int64, errMsg string) *glua.LTable {
	r := p.L.CreateTable(0, 4)
	r.RawSetString("elapsed_ms", glua.LNumber(ms))
	if errMsg != "" {
		r.RawSetString("error", glua.LString(errMsg))
	}
	r.RawSetString("label", glua.LString(label))
	r.RawSetString("status", glua.LString(status))
	return r
}
