package lua

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/schema"
	"github.com/luft-run/luft/internal/suggest"
	"github.com/luft-run/luft/lua/luaval"
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

// agentFn is the Go half of agent(opts).
func (v *vm) agentFn(L *glua.LState) int {
	t := v.checkEffect(L, "agent()")
	where := v.where(L)
	req, err := v.parseAgentOpts(L.Get(1))
	if err != nil {
		return v.raiseFatalKind(L, KindRuntime, "agent: %s", err)
	}
	v.agentCalls++
	if v.agentCalls > v.lim.MaxAgentCalls {
		return v.raiseFatal(L, "agent call limit (%d per run) reached; raise it with --max-agent-calls if the workflow really needs more", v.lim.MaxAgentCalls)
	}
	t.br.agents++
	c := Call{Key: t.br.next(), Kind: KindAgent, Hash: req.Hash(), Where: where, PhaseID: v.phaseID()}
	ph := v.phase
	res, done, err := v.host.Agent(t.ctx, c, req, func(r agent.Result, err error) {
		v.deliver(t, func() []glua.LValue { return v.agentOutcome(c, req, ph, r, err) })
	})
	v.hostError(L, err)
	if err != nil {
		// Refused before it started for a reason the script cannot fix at run time (an
		// unknown backend, an unreadable journal): the run ends.
		return v.raiseFatalKind(L, KindRuntime, "agent: %s", err)
	}
	if done {
		vals := v.agentOutcome(c, req, ph, res, err)
		for _, val := range vals {
			L.Push(val)
		}
		return len(vals)
	}
	v.pending++
	return v.yield(L)
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

// agentOutcome turns a finished call into the (true, result) pair the Lua wrapper expects.
// A call that failed after its retries is not an error of the script: its result comes
// back with ok=false, status and error set, and tokens, usage and findings present, so
// scripts written as `if r.ok then ... end` (Luft's style) go on. Invalid options,
// limits, budgets, divergence and cancellation end the run elsewhere.
func (v *vm) agentOutcome(c Call, req agent.Request, ph *phaseState, r agent.Result, err error) []glua.LValue {
	if err != nil {
		if r.Error == "" {
			r.Error = err.Error()
		}
		if r.Status == "" || r.Status == agent.StatusOK {
			r.Status = agent.StatusError
		}
	}
	if !r.OK() && r.Error == "" {
		r.Error = "the agent reported status " + string(r.Status)
	}
	if ph != nil {
		switch {
		case r.OK():
			ph.ok++
		case r.Status == agent.StatusCancelled:
			ph.cancelled++
		default:
			ph.failed++
		}
	}
	if !r.OK() {
		// A failed call has no output: a script that uses it unchecked stops there.
		r.Output = nil
	}
	return []glua.LValue{glua.LTrue, v.resultTable(r)}
}

var agentOptions = []string{"prompt", "system", "schema", "model", "backend", "name", "role", "description",
	"tools", "max_tokens", "temperature", "timeout_ms", "retries", "session_id", "class"}

func (v *vm) parseAgentOpts(lv glua.LValue) (agent.Request, error) {
	var req agent.Request
	tbl, ok := lv.(*glua.LTable)
	if !ok {
		return req, fmt.Errorf("expected a table {prompt=..., ...}, got a %s", lv.Type())
	}
	var bad error
	tbl.ForEach(func(k, val glua.LValue) {
		if bad != nil {
			return
		}
		key, ok := k.(glua.LString)
		if !ok {
			bad = fmt.Errorf("option keys must be names, got %s", k.Type())
			return
		}
		str := func() string {
			s, ok := val.(glua.LString)
			if !ok {
				bad = fmt.Errorf("option %s must be a string, got a %s", key, val.Type())
			}
			return string(s)
		}
		num := func(lo, hi float64) float64 {
			n, ok := val.(glua.LNumber)
			if !ok || float64(n) < lo || float64(n) > hi || math.IsNaN(float64(n)) {
				bad = fmt.Errorf("option %s must be a number from %g to %g, got %s", key, lo, hi, val.String())
			}
			return float64(n)
		}
		integer := func(lo, hi float64) int {
			n := num(lo, hi)
			if bad == nil && n != math.Trunc(n) {
				bad = fmt.Errorf("option %s must be a whole number, got %s", key, val.String())
			}
			return int(n)
		}
		switch key {
		case "prompt":
			req.Prompt = str()
		case "system":
			req.System = str()
		case "schema":
			switch s := val.(type) {
			case glua.LString:
				dec, err := v.codec.Decode([]byte(s))
				if err != nil {
					bad = fmt.Errorf("option schema is not valid JSON: %v", err)
					return
				}
				req.Schema, bad = v.codec.FromLua(dec)
			case *glua.LTable:
				req.Schema, bad = v.codec.FromLua(s)
			default:
				bad = fmt.Errorf("option schema must be a table or a JSON string, got a %s", val.Type())
			}
			if bad == nil {
				if _, isObj := req.Schema.(map[string]any); !isObj {
					bad = errors.New("option schema must be a JSON Schema object, such as {type=\"object\", properties={...}}")
				} else if _, err := schema.Compile(req.Schema); err != nil {
					bad = fmt.Errorf("option schema is not a valid JSON Schema: %v", err)
				}
			}
		case "model":
			req.Model = str()
		case "backend":
			req.Backend = str()
		case "name":
			req.Name = str()
		case "role":
			req.Role = str()
		case "description":
			req.Description = str()
		case "tools":
			t, ok := val.(*glua.LTable)
			if !ok {
				bad = fmt.Errorf("option tools must be a list of tool names, got a %s", val.Type())
				return
			}
			for i := 1; i <= t.Len(); i++ {
				s, ok := t.RawGetInt(i).(glua.LString)
				if !ok {
					bad = fmt.Errorf("option tools[%d] must be a tool name (a string)", i)
					return
				}
				req.Tools = append(req.Tools, string(s))
			}
		case "max_tokens":
			req.MaxTokens = integer(1, 10_000_000)
		case "temperature":
			f := num(0, 2)
			req.Temperature = &f
		case "timeout_ms":
			req.TimeoutMS = integer(1, 7*24*3600*1000)
		case "retries":
			req.Retries = integer(0, 10)
		case "session_id":
			req.SessionID = str()
		case "class":
			c := agent.Class(str())
			if bad == nil && c != agent.ClassInteractive && c != agent.ClassBatch {
				bad = fmt.Errorf("option class must be \"interactive\" or \"batch\", got %q", c)
			}
			req.Class = c
		default:
			bad = errors.New(unknownOption(string(key), agentOptions))
		}
	})
	if bad != nil {
		return req, bad
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return req, errors.New("missing required 'prompt' (a non-empty string)")
	}
	return req, nil
}

// resultTable builds the agent result table of SPEC §2.1.
func (v *vm) resultTable(r agent.Result) *glua.LTable {
	L := v.L
	t := L.CreateTable(0, 16)
	out, err := v.codec.ToLua(r.Output)
	if err != nil {
		out = glua.LString(r.Text)
	}
	usage := L.CreateTable(0, 3)
	usage.RawSetString("cached", glua.LNumber(r.Usage.Cached))
	usage.RawSetString("input", glua.LNumber(r.Usage.Input))
	usage.RawSetString("output", glua.LNumber(r.Usage.Output))
	findings := v.codec.NewArray(len(r.Findings))
	for _, f := range r.Findings {
		ft := L.CreateTable(0, 4)
		ft.RawSetString("detail", glua.LString(f.Detail))
		ft.RawSetString("kind", glua.LString(f.Kind))
		ft.RawSetString("severity", glua.LString(f.Severity))
		ft.RawSetString("title", glua.LString(f.Title))
		findings.Append(ft)
	}
	// Set in sorted key order so pairs() over a result is deterministic; absent fields
	// (cost, error, session_id) are nil and not set at all.
	t.RawSetString("attempts", glua.LNumber(max(r.Attempts, 1)))
	t.RawSetString("backend", glua.LString(r.Backend))
	t.RawSetString("cached", glua.LBool(r.Cached))
	if r.Cost != nil {
		t.RawSetString("cost", glua.LNumber(*r.Cost))
	}
	if r.Error != "" {
		t.RawSetString("error", glua.LString(r.Error))
	}
	t.RawSetString("findings", findings)
	t.RawSetString("model", glua.LString(r.Model))
	t.RawSetString("ok", glua.LBool(r.OK()))
	if out != glua.LNil {
		t.RawSetString("output", out)
	}
	if r.SessionID != "" {
		t.RawSetString("session_id", glua.LString(r.SessionID))
	}
	t.RawSetString("status", glua.LString(r.Status))
	t.RawSetString("text", glua.LString(r.Text))
	t.RawSetString("tokens", glua.LNumber(r.Usage.Total()))
	t.RawSetString("usage", usage)
	return t
}

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

// errMessage is the text of a branch's error as a script sees it.
func (v *vm) errMessage(err error) string {
	var ae *glua.ApiError
	if errors.As(err, &ae) {
		return v.explain(v.errorText(ae.Object))
	}
	return err.Error()
}

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

// workflowFn is the Go half of workflow(path [, args]).
func (v *vm) workflowFn(L *glua.LState) int {
	t := v.checkEffect(L, "workflow()")
	where := v.where(L)
	p, ok := L.Get(1).(glua.LString)
	if !ok || p == "" {
		return fail(L, where, "workflow: argument 1 must be the path of a workflow file")
	}
	var args any
	if a := L.Get(2); a != glua.LNil {
		if _, ok := a.(*glua.LTable); !ok {
			return fail(L, where, "workflow: argument 2 (args) must be a table, got a %s", a.Type())
		}
		var err error
		if args, err = v.codec.FromLua(a); err != nil {
			return fail(L, where, "workflow: args: %s", err)
		}
	}
	shown := string(p)
	if len(shown) > shownWorkflowPath {
		shown = shown[:shownWorkflowPath] + "…"
	}
	name, err := WorkflowName(string(p))
	if err != nil {
		return fail(L, where, "workflow %q: %s", shown, err)
	}
	v.checkNesting(L, t, "workflow()")
	dir := scriptDir(t.wf.prog)
	path := filepath.Join(dir, name)
	key := t.br.next()
	c := Call{Key: key, Kind: KindWorkflow, Hash: hashStrings("workflow", path), Where: where, PhaseID: v.phaseID()}
	prog, ok := v.protos[path]
	if !ok {
		src, err := v.host.LoadWorkflow(c, dir, name)
		if err != nil {
			v.hostError(L, err)
			return fail(L, where, "workflow %q: %s", shown, err)
		}
		prog, err = CompileFile(path, src)
		if err != nil {
			return fail(L, where, "workflow %q: %s", shown, err)
		}
		v.protos[path] = prog
	}
	child, err := v.newWorkflow(prog, args)
	if err != nil {
		return fail(L, where, "workflow %q: %s", shown, err)
	}
	start := v.cfg.Now()
	v.emit(event.WorkflowStarted, map[string]any{"span_id": key, "path": path, "args": args})
	done := func(err error) {
		data := map[string]any{"span_id": key, "path": path, "ok": err == nil, "elapsed_ms": v.cfg.Now().Sub(start).Milliseconds()}
		if err != nil {
			msg := fmt.Sprintf("workflow %q failed: %s", shown, err)
			if where != "" { // empty when workflow() is a tail call
				msg = where + ": " + msg
			}
			data["error"] = msg
			v.emit(event.WorkflowDone, data)
			v.resumeLater(t, glua.LFalse, glua.LString(msg))
			return
		}
		rep, cerr := v.codec.ToLua(child.report)
		if cerr != nil {
			rep = glua.LNil
		}
		v.emit(event.WorkflowDone, data)
		v.resumeLater(t, glua.LTrue, rep)
	}
	fn := v.L.NewFunctionFromProto(prog.proto)
	fn.Env = child.env
	top := v.newTask(t.ctx, fn, nil, &branch{path: key + "/top"}, child, func(_ []glua.LValue, err error) {
		if err != nil {
			done(v.scriptError(err, KindInvalid))
			return
		}
		if err := v.checkWorkflow(child); err != nil {
			done(err)
			return
		}
		mainFn := child.env.RawGetString("main").(*glua.LFunction)
		m := v.newTask(t.ctx, mainFn, nil, &branch{path: key + "/wf"}, child, func(_ []glua.LValue, err error) {
			if err != nil {
				done(v.scriptError(err, KindRuntime))
				return
			}
			done(nil)
		})
		v.runq = append(v.runq, m)
	})
	top.topLevel = true
	v.runq = append(v.runq, top)
	return v.yield(L)
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// phaseFn is phase(label [, planned]) and phase{label=, planned=, description=}.
func (v *vm) phaseFn(L *glua.LState) int {
	var label, desc string
	planned := 0
	readPlanned := func(val glua.LValue) {
		switch n := val.(type) {
		case glua.LNumber:
			if !wholeIn(float64(n), 0, maxWidth) {
				L.RaiseError("phase: planned must be a whole number from 0 to %d, got %s", maxWidth, n.String())
			}
			planned = int(n)
		case *glua.LNilType:
		default:
			L.RaiseError("phase: planned must be a number, got a %s", val.Type())
		}
	}
	switch a := L.Get(1).(type) {
	case glua.LString:
		label = string(a)
		readPlanned(L.Get(2))
	case *glua.LTable:
		if l, ok := a.RawGetString("label").(glua.LString); ok {
			label = string(l)
		} else if l, ok := a.RawGetInt(1).(glua.LString); ok {
			label = string(l)
		}
		if p := a.RawGetString("planned"); p != glua.LNil {
			readPlanned(p)
		} else {
			readPlanned(a.RawGetInt(2))
		}
		if d, ok := a.RawGetString("description").(glua.LString); ok {
			desc = string(d)
		}
	default:
		L.RaiseError("phase: expected phase(label [, planned]) or phase{label=..., planned=..., description=...}")
	}
	if strings.TrimSpace(label) == "" {
		L.RaiseError("phase: the label must be a non-empty string")
	}
	if desc == "" && v.current != nil {
		desc = v.current.wf.metaDesc[label]
	}
	v.closePhase()
	v.phaseSeq++
	v.phase = &phaseState{id: v.phaseSeq, label: label}
	data := map[string]any{"phase_id": v.phaseSeq, "label": label, "planned": planned}
	if desc != "" {
		data["description"] = desc
	}
	v.emit(event.PhaseStarted, data)
	L.Push(glua.LNumber(v.phaseSeq))
	return 1
}

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

// Upper bounds of numeric options: large enough for any real use, small enough that the
// conversions to Go integers and durations cannot overflow.
const (
	maxWidth        = 1_000_000        // max_concurrency, max_inflight
	maxBudgetTimeMS = 1e12             // about 31 years
	maxBudgetCount  = 1 << 53          // agents, tokens: exact in a float
	maxBudgetUSD    = 1e12             // dollars
	maxRandom       = float64(1 << 53) // |m|, |n| of luft.random: exact in a float
)

// wholeIn reports whether f is a whole number in [lo, hi] (false for NaN and ±inf).
func wholeIn(f, lo, hi float64) bool {
	return f >= lo && f <= hi && f == math.Trunc(f)
}

func (v *vm) budgetFn(L *glua.LState, wf *workflowState) int {
	var b Budget
	num := func(name string, val glua.LValue) float64 {
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
	switch a := L.Get(1).(type) {
	case *glua.LTable:
		a.ForEach(func(k, val glua.LValue) {
			switch k.String() {
			case "time_ms":
				b.TimeMS = int64(num("time_ms", val))
			case "agents":
				b.Agents = int(num("agents", val))
			case "tokens":
				b.Tokens = int(num("tokens", val))
			case "usd":
				b.USD = num("usd", val)
			default:
				L.RaiseError("budget: unknown limit %q (known: time_ms, agents, tokens, usd)", k.String())
			}
		})
	case glua.LNumber, *glua.LNilType:
		// Luft's positional form: the second number is its "rounds", a hint for loops
		// and converge's default max_rounds, never a cap on agent calls.
		b.TimeMS = int64(num("time_ms", L.Get(1)))
		if r := num("rounds", L.Get(2)); r > 0 {
			if r != math.Trunc(r) || r > 1000 {
				L.RaiseError("budget: rounds must be a whole number from 1 to 1000, got %s", L.Get(2).String())
			}
			b.Rounds = int(r)
		}
	default:
		L.RaiseError("budget: expected budget{time_ms=, agents=, tokens=, usd=} or budget(time_ms [, rounds])")
	}
	if err := v.host.SetBudget(b); err != nil {
		L.RaiseError("budget: %s", err)
	}
	v.rounds = b.Rounds
	// ctx.budget shows the script what it asked for.
	if c, ok := wf.env.RawGetString("ctx").(*glua.LTable); ok {
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
	return 0
}

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

func (v *vm) valueEffect(L *glua.LState, kind string, hash string, fresh func() any) glua.LValue {
	t := v.current
	if t == nil || t.topLevel {
		v.raiseAt(L, "luft.%s() is not allowed in a script's top-level code; call it from main()", kind)
	}
	c := Call{Key: t.br.next(), Kind: kind, Hash: hash, Where: v.where(L), PhaseID: v.phaseID()}
	val, err := v.host.Value(c, fresh)
	if err != nil {
		v.hostError(L, err)
		L.RaiseError("luft.%s: %s", kind, err)
	}
	lv, err := v.codec.ToLua(val)
	if err != nil {
		L.RaiseError("luft.%s: %s", kind, err)
	}
	return lv
}

func (v *vm) nowFn(L *glua.LState) int {
	L.Push(v.valueEffect(L, KindNow, hashStrings(KindNow), func() any {
		return float64(v.cfg.Now().UnixMilli()) / 1000
	}))
	return 1
}

// randomFn is luft.random(), luft.random(n) and luft.random(m, n): m and n must be whole
// numbers within ±2^53 with m <= n, so the interval and its size are exact.
func (v *vm) randomFn(L *glua.LState) int {
	top := L.GetTop()
	bound := func(i int, name string) int64 {
		n, ok := L.Get(i).(glua.LNumber)
		if !ok || !wholeIn(float64(n), -maxRandom, maxRandom) {
			L.RaiseError("luft.random: %s must be a whole number from -2^53 to 2^53, got %s", name, v.tostring(L, L.Get(i)))
		}
		return int64(n)
	}
	lo, hi := int64(0), int64(0)
	switch top {
	case 0:
	case 1:
		lo, hi = 1, bound(1, "n")
	default:
		lo, hi = bound(1, "m"), bound(2, "n")
	}
	if top > 0 && lo > hi {
		L.RaiseError("luft.random: the interval [%d, %d] is empty (m must be at most n)", lo, hi)
	}
	L.Push(v.valueEffect(L, KindRandom, hashStrings(KindRandom, strconv.Itoa(top), strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)), func() any {
		r := v.cfg.Rand()
		if top == 0 {
			return r
		}
		// The size may be 2^54+1, beyond an int64's exactness in a float: pick in
		// floats and clamp, since r*size can round up to size itself.
		size := float64(hi) - float64(lo) + 1
		return math.Min(float64(lo)+math.Floor(r*size), float64(hi))
	}))
	return 1
}

func (v *vm) uuidFn(L *glua.LState) int {
	L.Push(v.valueEffect(L, KindUUID, hashStrings(KindUUID), func() any { return v.cfg.UUID() }))
	return 1
}

// unknownOption is the error text for an option name that is none of known: it names
// the nearest known one when the name looks like a typo of it (promt: prompt).
func unknownOption(key string, known []string) string {
	msg := fmt.Sprintf("unknown option %q", key)
	if near := suggest.Nearest(key, known); near != "" {
		msg += fmt.Sprintf(": did you mean %q?", near)
	}
	return msg + " (known: " + strings.Join(known, ", ") + ")"
}
