package lua

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/metrics"
	"strings"
	"time"

	"github.com/google/uuid"
	glua "github.com/yuin/gopher-lua"
)

// allowedBase is the part of the base library a script gets (SPEC §3). pcall and xpcall
// are replaced by yield-safe versions from the prelude.
var allowedBase = []string{
	"assert", "error", "ipairs", "next", "pairs", "select", "tonumber", "tostring", "type",
	"unpack", "rawequal", "rawget", "rawset", "setmetatable", "getmetatable",
}

// prelude is Lua code run once per state. It receives the captured coroutine functions and
// the Go halves of the yielding primitives, and returns the functions scripts see. It is
// written in Lua because only Lua frames can be suspended by gopher-lua.
const prelude = `
local co_create, co_resume, co_status, co_yield, go = ...
local select, unpack, error, type, getmetatable = select, unpack, error, type, getmetatable

local function pack(...) return { n = select('#', ...), ... } end

-- The trampoline starts every task: it calls f in non-tail position, so a tail call at a
-- coroutine's root (return agent{...}) cannot end the coroutine at its first yield.
local function trampoline(f, ...)
  local r = pack(f(...))
  return unpack(r, 1, r.n)
end

-- A pcall that survives yields: f runs in an inner coroutine and every yield inside it is
-- passed up to the driver and the reply passed back down. Limit errors are never caught.
local function protected(handler, f, ...)
  if type(f) ~= "function" then
    local mt = getmetatable(f)
    if type(mt) ~= "table" or mt.__call == nil then
      return false, "attempt to call a " .. type(f) .. " value"
    end
  end
  go.pcall_enter()
  local co = co_create(function(...)
    local r = pack(f(...))
    return r
  end)
  local r = pack(co_resume(co, ...))
  while true do
    if not r[1] then
      go.pcall_leave()
      if go.is_fatal() then error(r[2], 0) end
      local msg = go.explain(r[2])
      if handler then return false, handler(msg) end
      return false, msg
    end
    if co_status(co) == "dead" then
      go.pcall_leave()
      local v = r[2]
      return true, unpack(v, 1, v.n)
    end
    r = pack(co_resume(co, co_yield(unpack(r, 2, r.n))))
  end
end

local function pcall(f, ...)
  return protected(nil, f, ...)
end

local function xpcall(f, handler, ...)
  if type(handler) ~= "function" then error("bad argument #2 to 'xpcall' (function expected)", 2) end
  return protected(handler, f, ...)
end

-- The yielding primitives return (true, value) or (false, message); a failure is raised
-- here, in Lua, so pcall(agent, opts) sees an ordinary error.
local function raising(g)
  return function(...)
    local ok, v = g(...)
    if not ok then error(v, 0) end
    return v
  end
end

return {
  trampoline = trampoline,
  pcall = pcall,
  xpcall = xpcall,
  agent = raising(go.agent),
  parallel = raising(go.parallel),
  pmap = raising(go.pmap),
  pipeline = raising(go.pipeline),
  workflow = raising(go.workflow),
}
`

func withConfigDefaults(cfg Config) Config {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.UUID == nil {
		cfg.UUID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.BranchWindow <= 0 {
		cfg.BranchWindow = 32 * cfg.Concurrency
	}
	return cfg
}

// openSandbox opens the allowed standard libraries into a scratch global table, keeps the
// allowed parts, and compiles the prelude.
func (v *vm) openSandbox() error {
	L := v.L
	for _, open := range []glua.LGFunction{glua.OpenBase, glua.OpenTable, glua.OpenString, glua.OpenMath, glua.OpenCoroutine} {
		L.Push(L.NewFunction(open))
		L.Call(0, 0)
	}
	g := L.G.Global
	v.base = map[string]glua.LValue{}
	for _, name := range allowedBase {
		v.base[name] = g.RawGetString(name)
	}
	co := g.RawGetString("coroutine").(*glua.LTable)

	str := copyTable(L, g.RawGetString("string").(*glua.LTable))
	str.RawSetString("dump", glua.LNil)
	v.capStrings(str)
	tbl := copyTable(L, g.RawGetString("table").(*glua.LTable))
	tbl.RawSetString("concat", L.NewFunction(v.tableConcat))
	mth := copyTable(L, g.RawGetString("math").(*glua.LTable))
	mth.RawSetString("random", glua.LNil)
	mth.RawSetString("randomseed", glua.LNil)
	v.libs = map[string]*glua.LTable{"string": str, "table": tbl, "math": mth}

	// Method calls on strings ("x"):rep(n) go through the string metatable; point it at
	// the capped library so the caps cannot be side-stepped.
	if mt, ok := L.GetMetatable(glua.LString("")).(*glua.LTable); ok {
		mt.RawSetString("__index", str)
	}

	// Nothing a script can reach may refer to the stock globals any more.
	for _, name := range []string{"io", "os", "debug", "package", "require", "load", "loadstring",
		"loadfile", "dofile", "collectgarbage", "module", "getfenv", "setfenv", "newproxy",
		"_printregs", "print", "coroutine", "channel"} {
		g.RawSetString(name, glua.LNil)
	}

	goFns := L.CreateTable(0, 8)
	for name, fn := range map[string]glua.LGFunction{
		"pcall_enter": v.pcallEnter, "pcall_leave": v.pcallLeave, "is_fatal": v.isFatal, "explain": v.explainFn,
		"agent": v.agentFn, "parallel": v.parallelFn(false), "pmap": v.parallelFn(true),
		"pipeline": v.pipelineFn, "workflow": v.workflowFn,
	} {
		goFns.RawSetString(name, L.NewFunction(fn))
	}
	fn, err := L.Load(strings.NewReader(prelude), "<prelude>")
	if err != nil {
		return fmt.Errorf("lua: prelude: %w", err)
	}
	L.Push(fn)
	for _, name := range []string{"create", "resume", "status", "yield"} {
		L.Push(co.RawGetString(name))
	}
	L.Push(goFns)
	if err := L.PCall(5, 1, nil); err != nil {
		return fmt.Errorf("lua: prelude: %w", err)
	}
	v.wrap = L.Get(-1).(*glua.LTable)
	L.Pop(1)
	v.trampo = v.wrap.RawGetString("trampoline").(*glua.LFunction)
	conv, err := v.loadConverge(v.codec.Module())
	if err != nil {
		return err
	}
	v.wrap.RawSetString("converge", conv)
	return nil
}

func copyTable(L *glua.LState, src *glua.LTable) *glua.LTable {
	dst := L.CreateTable(0, 32)
	src.ForEach(func(k, val glua.LValue) { dst.RawSet(k, val) })
	return dst
}

// newEnv builds the global table of one workflow: the allowed libraries (fresh copies, so
// a child workflow cannot patch its parent's) and the primitives.
func (v *vm) newEnv(wf *workflowState, args any) *glua.LTable {
	L := v.L
	env := L.CreateTable(0, 48)
	for _, name := range allowedBase {
		env.RawSetString(name, v.base[name])
	}
	for name, lib := range v.libs {
		env.RawSetString(name, copyTable(L, lib))
	}
	for _, name := range []string{"pcall", "xpcall", "agent", "parallel", "pmap", "pipeline", "workflow", "converge"} {
		env.RawSetString(name, v.wrap.RawGetString(name))
	}
	for name, fn := range map[string]glua.LGFunction{
		"phase": v.phaseFn, "log": v.logFn, "print": v.printFn,
		"budget": func(L *glua.LState) int { return v.budgetFn(L, wf) },
		"report": func(L *glua.LState) int { return v.reportFn(L, wf) },
	} {
		env.RawSetString(name, L.NewFunction(fn))
	}
	env.RawSetString("json", v.codec.Module())
	lt := L.CreateTable(0, 3)
	lt.RawSetString("now", L.NewFunction(v.nowFn))
	lt.RawSetString("random", L.NewFunction(v.randomFn))
	lt.RawSetString("uuid", L.NewFunction(v.uuidFn))
	env.RawSetString("luft", lt)

	a, err := v.codec.ToLua(args)
	if err != nil || a == glua.LNil {
		a = L.CreateTable(0, 0)
	}
	env.RawSetString("args", a)
	env.RawSetString("_args", a)
	c := L.CreateTable(0, 3)
	c.RawSetString("run_id", glua.LString(v.cfg.RunID))
	c.RawSetString("resumed", glua.LBool(v.cfg.Resumed))
	c.RawSetString("attempt", glua.LNumber(max(v.cfg.Attempt, 1)))
	env.RawSetString("ctx", c)
	return env
}

func (v *vm) pcallEnter(L *glua.LState) int {
	t := v.current
	if t != nil {
		t.pdepth++
		if t.pdepth > v.lim.MaxPcallDepth {
			return v.raiseFatal(L, "pcall nesting limit (%d) exceeded: unbounded recursion through pcall?", v.lim.MaxPcallDepth)
		}
	}
	return 0
}

func (v *vm) pcallLeave(L *glua.LState) int {
	if t := v.current; t != nil && t.pdepth > 0 {
		t.pdepth--
	}
	return 0
}

func (v *vm) isFatal(L *glua.LState) int {
	L.Push(glua.LBool(v.fatal != nil || v.ctx.Err() != nil))
	return 1
}

// capStrings replaces the string builders whose output size a script controls.
func (v *vm) capStrings(str *glua.LTable) {
	L := v.L
	max := v.lim.MaxStringBytes
	rep := str.RawGetString("rep").(*glua.LFunction)
	str.RawSetString("rep", L.NewFunction(func(L *glua.LState) int {
		s := L.CheckString(1)
		n := L.CheckInt(2)
		if n > 0 && int64(len(s))*int64(n) > int64(max) {
			return v.raiseFatal(L, "string limit (%d bytes) exceeded: string.rep would build %d bytes", max, int64(len(s))*int64(n))
		}
		return callGo(L, rep)
	}))
	format := str.RawGetString("format").(*glua.LFunction)
	str.RawSetString("format", L.NewFunction(func(L *glua.LState) int {
		f := L.CheckString(1)
		if err := checkFormatWidths(f); err != nil {
			L.RaiseError("string.format: %s", err)
		}
		n := callGo(L, format)
		if s, ok := L.Get(-1).(glua.LString); ok && len(s) > max {
			return v.raiseFatal(L, "string limit (%d bytes) exceeded by string.format", max)
		}
		return n
	}))
	// Pattern matching runs on an interruptible matcher: gopher-lua's backtracks
	// exponentially inside one Go call that no cancel or timeout could stop.
	ctxOf := func() context.Context {
		if v.current != nil {
			return v.current.ctx
		}
		return v.ctx
	}
	for name, fn := range patternLib(ctxOf, max, v.raiseFatal) {
		str.RawSetString(name, L.NewFunction(fn))
	}
}

// callGo calls a stock Go library function with the current arguments and leaves its
// results on the stack.
func callGo(L *glua.LState, fn *glua.LFunction) int {
	top := L.GetTop()
	L.Push(fn)
	for i := 1; i <= top; i++ {
		L.Push(L.Get(i))
	}
	L.Call(top, glua.MultRet)
	n := L.GetTop() - top
	return n
}

// checkFormatWidths refuses widths and precisions of more than two digits, as C Lua does;
// Go's fmt would otherwise allocate whatever width a script asks for.
func checkFormatWidths(f string) error {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			continue
		}
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			i++
		}
		digits := 0
		for i < len(f) && f[i] >= '0' && f[i] <= '9' {
			digits++
			i++
		}
		if i < len(f) && f[i] == '.' {
			i++
			pd := 0
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				pd++
				i++
			}
			if pd > 2 {
				return fmt.Errorf("invalid format (precision of more than 2 digits)")
			}
		}
		if digits > 2 {
			return fmt.Errorf("invalid format (width of more than 2 digits)")
		}
	}
	return nil
}

// tableConcat is table.concat with the result size checked before it is built.
func (v *vm) tableConcat(L *glua.LState) int {
	tbl := L.CheckTable(1)
	sep := L.OptString(2, "")
	i := L.OptInt(3, 1)
	j := L.OptInt(4, tbl.Len())
	if i > j {
		L.Push(glua.LString(""))
		return 1
	}
	parts := make([]string, 0, j-i+1)
	size := 0
	for k := i; k <= j; k++ {
		val := tbl.RawGetInt(k)
		switch s := val.(type) {
		case glua.LString:
			parts = append(parts, string(s))
		case glua.LNumber:
			parts = append(parts, s.String())
		default:
			L.RaiseError("table.concat: invalid value (at index %d) in table for 'concat' (a %s; only strings and numbers can be joined)", k, val.Type())
		}
		size += len(parts[len(parts)-1]) + len(sep)
		if size > v.lim.MaxStringBytes {
			return v.raiseFatal(L, "string limit (%d bytes) exceeded by table.concat", v.lim.MaxStringBytes)
		}
	}
	L.Push(glua.LString(strings.Join(parts, sep)))
	return 1
}

// watchMemory stops the run when the process heap passes limit. String concatenation with
// `..` happens inside the VM where no cap can be placed; this is the backstop for it.
func watchMemory(ctx context.Context, cancel context.CancelCauseFunc, limit int64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && int64(sample[0].Value.Uint64()) > limit {
				cancel(&ScriptError{Kind: KindLimit, Msg: fmt.Sprintf("memory limit (%d MiB) exceeded; a script building huge strings or tables?", limit>>20)})
				return
			}
		}
	}
}
