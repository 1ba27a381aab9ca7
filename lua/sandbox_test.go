package lua

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSandboxGlobals(t *testing.T) {
	forbidden := []string{"io", "os", "debug", "package", "require", "load", "loadstring", "loadfile", "dofile",
		"collectgarbage", "module", "getfenv", "setfenv", "newproxy", "coroutine", "_printregs", "_G", "channel"}
	var cases []scriptCase
	for _, name := range forbidden {
		cases = append(cases, scriptCase{name: name, src: fmt.Sprintf(`function main() report(type(%s)) end`, name), want: `"nil"`})
	}
	for _, expr := range []string{"math.random", "math.randomseed", "string.dump"} {
		cases = append(cases, scriptCase{name: expr, src: fmt.Sprintf(`function main() report(type(%s)) end`, expr), want: `"nil"`})
	}
	allowed := []string{"assert", "error", "ipairs", "next", "pairs", "pcall", "xpcall", "select", "tonumber", "tostring",
		"type", "unpack", "rawequal", "rawget", "rawset", "setmetatable", "getmetatable", "agent", "parallel", "pmap",
		"pipeline", "phase", "log", "print", "budget", "workflow", "report"}
	for _, name := range allowed {
		cases = append(cases, scriptCase{name: name, src: fmt.Sprintf(`function main() report(type(%s)) end`, name), want: `"function"`})
	}
	for _, name := range []string{"string", "table", "math", "json", "args", "_args", "ctx", "luft"} {
		cases = append(cases, scriptCase{name: name, src: fmt.Sprintf(`function main() report(type(%s)) end`, name), want: `"table"`})
	}
	cases = append(cases,
		scriptCase{name: "goto works", src: `function main()
  local n = 0
  ::again::
  n = n + 1
  if n < 3 then goto again end
  report(n)
end`, want: `3`},
		scriptCase{name: "a workflow's own patch is its own", src: `function main()
  string.upper = nil
  report(type(("x").upper))
end`, want: `"nil"`},
	)
	runCases(t, cases)
}

func TestSandboxLimits(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "string.rep", src: `function main() local s = string.rep("x", 1e9) end`, kind: KindLimit, errSub: "test.lua:1: string limit"},
		{name: "string.rep as a method", src: `function main() local s = ("xx"):rep(1e9) end`, kind: KindLimit, errSub: "string.rep would build"},
		{name: "string.rep within the limit", src: `function main() report(#string.rep("ab", 1000)) end`, want: `2000`},
		{name: "string.format width", src: `function main() string.format("%999999999d", 1) end`, kind: KindRuntime, errSub: "test.lua:1: invalid format (width or precision too long)"},
		{name: "string.format ok", src: `function main() report(string.format("%5.2f|%-3s|%%", 3.14159, "a")) end`, want: `" 3.14|a  |%"`},
		{name: "table.concat", src: `function main()
  local s = string.rep("x", 1000000)
  local t = {}
  for i = 1, 20 do t[i] = s end
  table.concat(t)
end`, kind: KindLimit, errSub: "exceeded by table.concat"},
		{name: "table.concat ok", src: `function main() report(table.concat({1, "b", 3}, "-")) end`, want: `"1-b-3"`},
		{name: "string.gsub", src: `function main()
  local s = string.rep("x", 100000)
  s:gsub("x", string.rep("y", 1000))
end`, kind: KindLimit, errSub: "exceeded by string.gsub"},
		{name: "string.gsub ok", src: `function main() report((("a-b"):gsub("-", "+"))) end`, want: `"a+b"`},
		{name: "call depth", src: `local function f(n) return 1 + f(n + 1) end
function main() f(1) end`, kind: KindLimit, errSub: "call depth limit (200 frames)"},
		{name: "pcall nesting", src: `local function f() pcall(f) end
function main() f() end`, kind: KindLimit, errSub: "pcall nesting limit (64)"},
		{name: "pcall of error names no prelude line", src: `function main()
  local _, a = pcall(error, "x")
  local _, b = pcall(error, "y", 2)
  local _, c = pcall(function() error("z") end)
  local _, d = xpcall(error, function(m) return "got " .. m end, "w")
  report({a, b, c, d})
end`, want: `["x","y","test.lua:4: z","got w"]`},
		{name: "limits cannot be caught", src: `function main()
  local ok = pcall(string.rep, "x", 1e9)
  report("caught")
end`, kind: KindLimit, errSub: "string limit"},
		{name: "agent call limit", src: `function main()
  for i = 1, 4 do pcall(agent, {prompt="p"..i}) end
  report("not reached")
end`, kind: KindLimit, errSub: "agent call limit (3 per run)", config: func(c *Config) { c.Limits.MaxAgentCalls = 3 }},
	})
}

func TestInfiniteLoopStops(t *testing.T) {
	prog, err := Compile("loop.lua", "loop.lua", []byte(`function main() log("spin") while true do end end`))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		_, err := Run(ctx, Config{Host: &cancelOnLog{fakeHost: newFakeHost(), cancel: cancel}}, prog)
		if ErrorKindOf(err) != KindCancelled {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := Run(ctx, Config{Host: newFakeHost()}, prog)
		if ErrorKindOf(err) != KindCancelled || !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("pcall does not swallow cancellation", func(t *testing.T) {
		prog, _ := Compile("loop.lua", "loop.lua", []byte(`function main() log("spin") while true do pcall(function() while true do end end) end end`))
		ctx, cancel := context.WithCancel(t.Context())
		_, err := Run(ctx, Config{Host: &cancelOnLog{fakeHost: newFakeHost(), cancel: cancel}}, prog)
		if ErrorKindOf(err) != KindCancelled {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestTraps(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "pcall across a yield, script continues", src: `function main()
  local ok, r = pcall(function() return agent{prompt="a"}.output end)
  local after = agent{prompt="b"}.output
  report({ok, r, after})
end`, want: `[true,"echo: a","echo: b"]`},
		{name: "error after a resumed yield inside pcall", src: `function main()
  local ok, err = pcall(function()
    agent{prompt="first"}
    error("late")
  end)
  report({ok, err})
end`, want: `[false,"test.lua:4: late"]`},
		{name: "nested pcall", src: `function main()
  local ok1, v = pcall(function()
    local ok2, e = pcall(function() agent{prompt="x"} error({code=7}) end)
    return e.code + #agent{prompt="yy"}.output
  end)
  report({ok1, v})
end`, want: `[true,15]`},
		{name: "pcall multiple returns", src: `function main()
  report({pcall(function() agent{prompt="x"} return 1, nil, 3 end)})
end`, want: `{"1":true,"2":1,"4":3}`},
		{name: "xpcall handler", src: `function main()
  local ok, msg = xpcall(function() error(agent{prompt="fail"}.error) end, function(e) return "handled: " .. e end)
  report({ok, msg})
end`, want: `[false,"handled: test.lua:2: scripted failure"]`},
		{name: "pcall of a non-function", src: `function main() report({pcall(42)}) end`, want: `[false,"attempt to call a number value"]`},
		{name: "table.sort comparator", src: `function main()
  local t = {3, 1, 2}
  table.sort(t, function(a, b) agent{prompt="cmp"} return a < b end)
end`, kind: KindLimit, errSub: "agent() cannot wait inside a callback run by a Go function"},
		{name: "pcall inside a sort comparator", src: `function main()
  local t = {3, 1, 2}
  table.sort(t, function(a, b) pcall(agent, {prompt="cmp"}) return a < b end)
end`, kind: KindLimit, errSub: "cannot wait inside a callback"},
		{name: "string.gsub callback", src: `function main()
  local s = ("abc"):gsub("%w", function(c) return agent{prompt=c}.output end)
end`, kind: KindLimit, errSub: "agent() cannot wait inside a callback"},
		{name: "a call or ... as an operand is one value", src: `local function f() return "a", "b" end
function main()
  local function g(...) return "z" .. ..., ... .. "z" end
  report({"x" .. f(), #("y" .. f()), f() .. "x", g("1", "2")})
end`, want: `["xa",2,"ax","z1","1z"]`},
		{name: "metamethod", src: `function main()
  local t = setmetatable({}, {__index = function(_, k) return agent{prompt=k}.output end})
  local v = t.x
end`, kind: KindLimit, errSub: "cannot wait inside a callback"},
		{name: "parallel in a comparator", src: `function main()
  table.sort({2, 1}, function(a, b) parallel({1}, function() end) return a < b end)
end`, kind: KindLimit, errSub: "parallel() cannot wait"},
	})
}

func TestGsubMatchesStock(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "captures", src: `function main() report((("hello world"):gsub("(%w+) (%w+)", "%2 %1 %0 %%"))) end`, want: `"world hello hello world %"`},
		{name: "table repl", src: `function main() report((("$a and $b and $c"):gsub("%$(%w+)", {a="1", b=2}))) end`, want: `"1 and 2 and $c"`},
		{name: "function repl and count", src: `function main()
  local s, n = ("abc"):gsub("%w", function(c) if c == "b" then return nil end return c:upper() end)
  report({s, n})
end`, want: `["AbC",3]`},
		{name: "limit and anchors", src: `function main() report({("aaa"):gsub("a", "b", 2)}) end`, want: `["bba",2]`},
		{name: "position capture", src: `function main() report((("ab"):gsub("()", "%1"))) end`, want: `"1a2b3"`},
		{name: "empty pattern", src: `function main() report((("ab"):gsub("", "-"))) end`, want: `"-a-b-"`},
	})
}

func TestConcatenationIsCapped(t *testing.T) {
	// `..` is compiled to a call that checks the result's size before building it, so a
	// doubling loop stops at the string limit instead of copying gigabytes (it reached
	// 16 GB of RSS before the heap watchdog could stop it).
	h := newFakeHost()
	_, err := runScript(t, h, `function main()
  local s = string.rep("x", 1024 * 1024)
  while #s < 2^31 do
    s = s .. s
  end
end`, nil)
	if ErrorKindOf(err) != KindLimit || !strings.Contains(err.Error(), "string limit (16777216 bytes) exceeded: `..` would build 33554432 bytes") || !strings.HasPrefix(err.Error(), "test.lua:4:") {
		t.Fatalf("err = %v", err)
	}
}

func TestMemoryLimitStopsGrowth(t *testing.T) {
	// Many strings under the string limit still add up: the heap watchdog stops them.
	h := newFakeHost()
	_, err := runScript(t, h, `function main()
  local t, s = {}, string.rep("x", 1024 * 1024)
  for i = 1, 1e6 do t[i] = s .. i end
end`, func(c *Config) { c.Limits.MaxMemoryBytes = 64 << 20 })
	if ErrorKindOf(err) != KindLimit || !strings.Contains(err.Error(), "memory limit (64 MiB)") || !strings.HasPrefix(err.Error(), "test.lua:") {
		t.Fatalf("err = %v", err)
	}
}

// Concatenation keeps Lua's meaning: numbers as text, right-to-left grouping, __concat
// on either side, clear errors for other values, and positions on the right line.
func TestConcatSemantics(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "strings and numbers", src: `function main() report("a" .. 1 .. "b" .. 2.5 .. 10) end`, want: `"a1b2.510"`},
		{name: "nested and in expressions", src: `function main()
  local function f(x) return "<" .. x .. ">" end
  local t = {k = "v" .. "w", ["x" .. "y"] = f("z" .. 1)}
  report(t.k .. t.xy .. (#("ab" .. "c")) .. (("p" .. "q")):upper())
end`, want: `"vw<z1>3PQ"`},
		{name: "a call or ... as an operand is one value", src: `local function f() return "a", "b" end
function main()
  local function g(...) return "z" .. ..., ... .. "z" end
  report({"x" .. f(), #("y" .. f()), f() .. "x", g("1", "2")})
end`, want: `["xa",2,"ax","z1","1z"]`},
		{name: "metamethod", src: `function main()
  local mt = {__concat = function(a, b)
    local x = type(a) == "table" and a.n or a
    local y = type(b) == "table" and b.n or b
    return x .. "+" .. y
  end}
  local o = setmetatable({n = "o"}, mt)
  report({"a" .. o, o .. "b", "x" .. "y" .. o})
end`, want: `["a+o","o+b","xy+o"]`},
	})
	long := strings.Repeat(`"ab" .. `, 999) + `"c"`
	runCases(t, []scriptCase{{name: "a chain longer than a call's registers", src: "function main() report(#(" + long + ")) end", want: "1999"}})
	h := newFakeHost()
	_, err := runScript(t, h, `function main()
  local x
  return "a" .. x
end`, nil)
	if err == nil || !strings.Contains(err.Error(), "test.lua:3:") || !strings.Contains(err.Error(), "attempt to concatenate a nil value") {
		t.Fatalf("err = %v", err)
	}
}

// Args nested deeper than the conversion limit are refused as invalid input for every
// caller (not only the CLI), never handed to the script as an empty table.
func TestArgsTooDeepAreRefused(t *testing.T) {
	var deep any = "leaf"
	for range 200 {
		deep = map[string]any{"a": deep}
	}
	for _, validate := range []bool{false, true} {
		h := newFakeHost()
		prog, err := Compile("test.lua", "test.lua", []byte(`function main() report(args) end`))
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Host: h, RunID: "run-1", Now: fixedClock(), Args: map[string]any{"x": deep}}
		if validate {
			_, err = Validate(t.Context(), cfg, prog)
		} else {
			_, err = Run(t.Context(), cfg, prog)
		}
		if ErrorKindOf(err) != KindInvalid || !strings.Contains(err.Error(), "args:") || !strings.Contains(err.Error(), "deep") {
			t.Fatalf("validate=%t: err = %v, want invalid args naming the depth", validate, err)
		}
	}
}

// A run whose context has ended before its sandbox is built is reported as stopped
// (the state's setup code runs under the run's context too).
func TestRunCancelledBeforeTheSandboxIsReady(t *testing.T) {
	prog, err := Compile("m.lua", "m.lua", []byte(`function main() end`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Run(ctx, Config{Host: newFakeHost()}, prog); ErrorKindOf(err) != KindCancelled {
		t.Fatalf("err = %v, want the run stopped", err)
	}
}
