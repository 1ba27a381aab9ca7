package lua

import (
	goruntime "runtime"
	"strings"

	glua "github.com/yuin/gopher-lua"
)

// guardYield refuses to yield when a Go function sits between the caller and the task's
// root: gopher-lua cannot suspend a Go frame (a table.sort comparator, a string.gsub
// callback, a metamethod), and would panic or silently end the coroutine. Every Lua call
// made from Go runs a nested VM loop on the Go stack, so the guard counts those loops: one
// is expected for the task and one for each coroutine of the yield-safe pcall in between;
// any more means a Go frame would be crossed.
func (v *vm) guardYield(L *glua.LState, what string) {
	want := 1
	for th := L; th != nil && (v.current == nil || th != v.current.th); th = th.Parent {
		want++
	}
	if v.vmLoops() > want {
		v.raiseFatal(L, "%s cannot wait inside a callback run by a Go function (a table.sort comparator, a string.gsub replacement, a metamethod or an iterator); call it outside the callback and pass the result in", what)
	}
}

// vmLoops counts gopher-lua VM loops on the calling goroutine's stack. Frames are
// recognised by function entry, symbolised once per entry and cached on the VM.
func (v *vm) vmLoops() int {
	var buf [512]uintptr
	pcs := buf[:goruntime.Callers(2, buf[:])]
	count := 0
	for _, pc := range pcs {
		fn := goruntime.FuncForPC(pc - 1)
		if fn == nil {
			continue
		}
		entry := fn.Entry()
		isLoop, ok := v.loopFuncs[entry]
		if !ok {
			isLoop = strings.HasPrefix(fn.Name(), "github.com/yuin/gopher-lua.mainLoop")
			v.loopFuncs[entry] = isLoop
		}
		if isLoop {
			count++
		}
	}
	return count
}

// checkNesting ends the run when a primitive that starts child tasks (parallel, pmap,
// pipeline, workflow) is called more than MaxNesting levels deep: a workflow that calls
// itself, or a branch that starts a parallel of itself, would otherwise nest until memory
// runs out. The depth is read from the branch path, which gains one "par[i]", "item[i]"
// or "wf" segment per level, so no per-task state is needed.
func (v *vm) checkNesting(L *glua.LState, t *task, what string) {
	depth := 0
	for seg := range strings.SplitSeq(t.br.path, "/") {
		if seg == "wf" || strings.HasPrefix(seg, "par[") || strings.HasPrefix(seg, "item[") {
			depth++
		}
	}
	if depth >= v.lim.MaxNesting {
		v.raiseFatal(L, "nesting limit (%d levels of workflow/parallel/pmap/pipeline) exceeded by %s at depth %d: does a workflow or a branch call itself without end?", v.lim.MaxNesting, what, depth+1)
	}
}

func (v *vm) checkEffect(L *glua.LState, what string) *task {
	t := v.current
	if t == nil {
		L.RaiseError("%s: no running task (internal error)", what)
		return nil
	}
	if t.topLevel {
		v.raiseAt(L, "%s is not allowed in a script's top-level code; call it from main() (top-level code only defines meta and functions)", what)
	}
	v.guardYield(L, what)
	return t
}
