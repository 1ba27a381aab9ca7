package lua

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
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
      -- caught leaves the pcall level, raises limit errors again and hides Go
      -- addresses in the message.
      local e = go.caught(r[2], co)
      if handler then
        -- An error inside the handler stays inside xpcall, as in Lua 5.1.
        local hr = pack(protected(nil, handler, e))
        if hr[1] then return false, hr[2] end
        if type(hr[2]) == "string" then return false, "error in error handling: " .. hr[2] end
        return false, "error in error handling"
      end
      return false, e
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

	v.libs = map[string]*glua.LTable{
		"string": v.stringLib(g.RawGetString("string").(*glua.LTable)),
		"table":  copyTable(L, g.RawGetString("table").(*glua.LTable)),
		"math":   copyTable(L, g.RawGetString("math").(*glua.LTable)),
	}
	v.libs["table"].RawSetString("concat", L.NewFunction(v.tableConcat))
	v.libs["table"].RawSetString("insert", L.NewFunction(v.tableInsert))
	v.guards = [2]*glua.LFunction{L.NewFunction(v.indexFn), L.NewFunction(v.fieldFn)}
	v.libs["math"].RawSetString("random", glua.LNil)
	v.libs["math"].RawSetString("randomseed", glua.LNil)

	// The string metatable is one per Lua state, shared by every workflow of the run, so
	// it holds no library: its __index asks the running workflow's own string library
	// (see stringIndex). gopher-lua's stock module, which is its own metatable and
	// __index, is no longer reachable from anywhere a script can look. __metatable makes
	// the real metatable impossible to replace with setmetatable.
	strMT := L.CreateTable(0, 2)
	strMT.RawSetString("__index", L.NewFunction(v.stringIndex))
	strMT.RawSetString("__metatable", glua.LFalse)
	L.SetMetatable(glua.LString(""), strMT)
	v.base["getmetatable"] = L.NewFunction(v.getmetatable)
	v.base["setmetatable"] = L.NewFunction(setmetatable)
	v.base["tostring"] = L.NewFunction(v.tostringFn)
	v.base["unpack"] = L.NewFunction(unpack)
	v.base["rawset"] = L.NewFunction(v.rawset)
	v.orphanMeta = L.CreateTable(0, 1)
	v.orphanMeta.RawSetString("__index", copyTable(L, v.libs["string"]))

	// Nothing a script can reach may refer to the stock globals any more.
	for _, name := range []string{"io", "os", "debug", "package", "require", "load", "loadstring",
		"loadfile", "dofile", "collectgarbage", "module", "getfenv", "setfenv", "newproxy",
		"_printregs", "print", "coroutine", "channel", "string", "table", "math", "_G"} {
		g.RawSetString(name, glua.LNil)
	}

	goFns := L.CreateTable(0, 8)
	for name, fn := range map[string]glua.LGFunction{
		"pcall_enter": v.pcallEnter, "pcall_leave": v.pcallLeave, "caught": v.caught,
		"agent": v.agentFn, "parallel": v.parallelFn(false), "pmap": v.parallelFn(true),
		"pipeline": v.pipelineFn, "workflow": v.workflowFn,
	} {
		goFns.RawSetString(name, L.NewFunction(fn))
	}
	proto, err := preludeProto()
	if err != nil {
		return fmt.Errorf("lua: prelude: %w", err)
	}
	L.Push(L.NewFunctionFromProto(proto))
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
func (v *vm) newEnv(wf *workflowState, args any) (*glua.LTable, error) {
	L := v.L
	env := L.CreateTable(0, 48)
	for _, name := range allowedBase {
		env.RawSetString(name, v.base[name])
	}
	for name, lib := range v.libs {
		env.RawSetString(name, copyTable(L, lib))
	}
	// The metatable view getmetatable("") returns here, and through which this
	// workflow's ("x"):method() calls resolve (stringIndex).
	wf.strMeta = L.CreateTable(0, 1)
	wf.strMeta.RawSetString("__index", env.RawGetString("string"))
	for _, name := range []string{"pcall", "xpcall", "agent", "parallel", "pmap", "pipeline", "workflow", "converge"} {
		env.RawSetString(name, v.wrap.RawGetString(name))
	}
	env.RawSetString(concatGlobal, L.NewFunction(v.concatFn))
	env.RawSetString(indexGlobal, v.guards[0])
	env.RawSetString(fieldGlobal, v.guards[1])
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
	if err != nil {
		// Never a silent {}: args the script cannot see whole are refused.
		return nil, fmt.Errorf("args: %w", err)
	}
	if a == glua.LNil {
		a = L.CreateTable(0, 0)
	}
	env.RawSetString("args", a)
	env.RawSetString("_args", a)
	c := L.CreateTable(0, 3)
	c.RawSetString("run_id", glua.LString(v.cfg.RunID))
	c.RawSetString("resumed", glua.LBool(v.cfg.Resumed))
	c.RawSetString("attempt", glua.LNumber(max(v.cfg.Attempt, 1)))
	env.RawSetString("ctx", c)
	return env, nil
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

// caught is called by the yield-safe pcall with the error it caught: it leaves the pcall
// level, raises the error again when it is a limit or the run is ending (pcall cannot
// catch those), and returns the error with any Go address replaced by a reference name and
// a nil call or index explained (explain).
func (v *vm) caught(L *glua.LState) int {
	v.pcallLeave(L)
	e := L.Get(1)
	if th, ok := L.Get(2).(*glua.LState); ok && v.fatal == nil {
		// The call depth limit is a limit: pcall cannot catch it either.
		if se := v.overflowError(th, &glua.ApiError{Object: e}); se != nil {
			v.fatal = se
		}
	}
	if v.fatal != nil || v.ctx.Err() != nil {
		L.Error(e, 0)
	}
	if s, ok := e.(glua.LString); ok {
		e = glua.LString(v.explain(scrubAddrs(dropPreludePos(string(s)))))
	}
	L.Push(e)
	return 1
}

// dropPreludePos drops a "<prelude>:N: " position from a caught message. A function pcall
// calls directly (pcall(error, "x"), pcall(string.rep)) raises from the prelude's frame
// that called it, a line of luft's own Lua the script cannot see; stock Lua gives no
// position there.
func dropPreludePos(msg string) string {
	rest, ok := strings.CutPrefix(msg, "<prelude>:")
	if !ok {
		return msg
	}
	line, text, ok := strings.Cut(rest, ": ")
	if !ok || line == "" || strings.Trim(line, "0123456789") != "" {
		return msg
	}
	return text
}

// stockStringFuncs are the functions of gopher-lua's string module a script may use as
// they are: their results are never larger than their arguments. Everything else is
// luft's own (see stringLib); dump is absent.
var stockStringFuncs = []string{"char", "len", "lower", "reverse", "sub", "upper"}

// maxResults is how many values unpack and string.byte may push, Lua 5.1's
// LUAI_MAXCSTACK: gopher-lua would push until its registry overflows, growing it in small
// steps (seconds of copying) for a script that asks for 10^8 values.
const maxResults = 8000

// stringLib builds the sandbox's string library from an allow-list: the stock functions
// that cannot build large strings, and luft's own rep and format (output size checked
// before anything is allocated) and find, match, gmatch and gsub (an interruptible,
// bounded matcher). It has no __index field: that was gopher-lua's way of making the
// module its own metatable, and would hand a script the stock table.
func (v *vm) stringLib(stock *glua.LTable) *glua.LTable {
	L := v.L
	str := L.CreateTable(0, 16)
	for _, name := range stockStringFuncs {
		str.RawSetString(name, stock.RawGetString(name))
	}
	str.RawSetString("byte", L.NewFunction(strByte))
	str.RawSetString("rep", L.NewFunction(v.strRep))
	str.RawSetString("format", L.NewFunction(v.strFormat))
	// Pattern matching runs on an interruptible matcher: gopher-lua's backtracks
	// exponentially inside one Go call that no cancel or timeout could stop.
	ctxOf := func() context.Context {
		if v.current != nil {
			return v.current.ctx
		}
		return v.ctx
	}
	for name, fn := range patternLib(ctxOf, v.lim.MaxStringBytes, v.raiseFatal) {
		str.RawSetString(name, L.NewFunction(fn))
	}
	str.RawSetString("gfind", str.RawGetString("gmatch")) // Lua 5.1's old name
	return str
}

// strRep is string.rep(s, n [, sep]) with the result size checked, without overflow,
// before it is built. sep is Lua 5.2's; Lua 5.1 ignores a third argument, so scripts
// written for it are unaffected.
func (v *vm) strRep(L *glua.LState) int {
	s := L.CheckString(1)
	n := L.CheckNumber(2)
	sep := L.OptString(3, "")
	if !(n >= 1) { // also NaN
		L.Push(glua.LString(""))
		return 1
	}
	limit := int64(v.lim.MaxStringBytes)
	unit := int64(len(s)) + int64(len(sep))
	// n can be any float; compare in floats first so the multiplication cannot wrap.
	if unit > 0 && float64(n) > float64(limit+int64(len(sep)))/float64(unit) {
		return v.raiseFatal(L, "string limit (%d bytes) exceeded: string.rep would build %s bytes", limit, repSize(len(s), len(sep), float64(n)))
	}
	count := int(n)
	if sep == "" {
		L.Push(glua.LString(strings.Repeat(s, count)))
		return 1
	}
	var b strings.Builder
	b.Grow(count*len(s) + (count-1)*len(sep))
	for i := range count {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s)
	}
	L.Push(glua.LString(b.String()))
	return 1
}

// repSize is the size string.rep would build, as text (it may not fit an int64).
func repSize(s, sep int, n float64) string {
	if math.IsInf(n, 1) {
		return "infinitely many"
	}
	size := float64(s)*math.Floor(n) + float64(sep)*(math.Floor(n)-1)
	if size < 1e18 {
		return strconv.FormatInt(int64(size), 10)
	}
	return strconv.FormatFloat(size, 'g', 4, 64)
}

// tableConcat is table.concat(t [, sep [, i [, j]]]) with the result size checked
// before it is built: the first pass only measures (and stops at the first value that is
// not a string or a number, or when the limit is passed), so a huge i..j range costs
// nothing but the values that are really there.
func (v *vm) tableConcat(L *glua.LState) int {
	tbl := L.CheckTable(1)
	sep := L.OptString(2, "")
	i := optIndex(L, 3, 1)
	j := optIndex(L, 4, int64(tbl.Len()))
	if i > j {
		L.Push(glua.LString(""))
		return 1
	}
	limit := int64(v.lim.MaxStringBytes)
	size := int64(0)
	for k := i; ; k++ {
		switch s := tbl.RawGetInt(int(k)).(type) {
		case glua.LString:
			size += int64(len(s))
		case glua.LNumber:
			size += int64(len(s.String()))
		default:
			L.RaiseError("invalid value (at index %d) in table for 'concat' (a %s; only strings and numbers can be joined)", k, s.Type())
		}
		if k == j {
			break
		}
		size += int64(len(sep))
		if size > limit {
			break
		}
	}
	if size > limit {
		return v.raiseFatal(L, "string limit (%d bytes) exceeded by table.concat", limit)
	}
	var b strings.Builder
	b.Grow(int(size))
	for k := i; ; k++ {
		switch s := tbl.RawGetInt(int(k)).(type) {
		case glua.LString:
			b.WriteString(string(s))
		case glua.LNumber:
			b.WriteString(s.String())
		}
		if k == j {
			break
		}
		b.WriteString(sep)
	}
	L.Push(glua.LString(b.String()))
	return 1
}

// unpack is Lua 5.1's unpack(t [, i [, j]]), refusing more than maxResults values as
// Lua 5.1 does.
func unpack(L *glua.LState) int {
	t := L.CheckTable(1)
	i := optIndex(L, 2, 1)
	j := optIndex(L, 3, int64(t.Len()))
	if i > j {
		return 0
	}
	if j-i+1 > maxResults {
		L.RaiseError("too many results to unpack (%d; at most %d)", j-i+1, maxResults)
	}
	for k := i; k <= j; k++ {
		L.Push(t.RawGetInt(int(k)))
	}
	return int(j - i + 1)
}

// strByte is Lua 5.1's string.byte(s [, i [, j]]), refusing more than maxResults values
// as Lua 5.1 does.
func strByte(L *glua.LState) int {
	s := L.CheckString(1)
	n := int64(len(s))
	i := optIndex(L, 2, 1)
	j := optIndex(L, 3, i)
	if i < 0 {
		i += n + 1
	}
	if j < 0 {
		j += n + 1
	}
	i, j = max(i, 1), min(j, n)
	if i > j {
		return 0
	}
	if j-i+1 > maxResults {
		L.RaiseError("string slice too long (%d bytes; string.byte returns at most %d)", j-i+1, maxResults)
	}
	for k := i; k <= j; k++ {
		L.Push(glua.LNumber(s[k-1]))
	}
	return int(j - i + 1)
}

// optIndex reads an optional integer argument as Lua 5.1 does (a float is truncated),
// clamped into the int32 range so loops over it cannot overflow; a table cannot hold
// more elements than that anyway.
func optIndex(L *glua.LState, n int, def int64) int64 {
	if L.Get(n) == glua.LNil {
		return def
	}
	f := float64(L.CheckNumber(n))
	switch {
	case math.IsNaN(f):
		return 0
	case f > math.MaxInt32:
		return math.MaxInt32
	case f < math.MinInt32:
		return math.MinInt32
	}
	return int64(f)
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

// preludeProto is the prelude, compiled once for the process.
var preludeProto = sharedProto("<prelude>", prelude)

// sharedProto compiles a chunk of luft's own Lua once for the process: every run's VM
// makes its functions from the same read-only prototype (gopher-lua shares prototypes
// between states) instead of compiling the source again, which was most of the memory
// a live run holds.
func sharedProto(name, src string) func() (*glua.FunctionProto, error) {
	return sync.OnceValues(func() (*glua.FunctionProto, error) {
		chunk, err := parse.Parse(strings.NewReader(src), name)
		if err != nil {
			return nil, err
		}
		return glua.Compile(chunk, name)
	})
}
