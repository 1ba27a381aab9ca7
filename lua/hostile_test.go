package lua

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Scripts written to break the sandbox: the host's string library, builders that
// allocate before they check, workflow() paths, Go addresses in messages, numeric options.

func TestStringMetatableIsTheSandboxs(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "getmetatable is a view of the workflow's string library", src: `function main()
  local mt = getmetatable("")
  report({mt.__index == string, string.__index == nil, mt.__index.dump == nil, rawget(mt.__index, "rep") == string.rep})
end`, want: `[true,true,true,true]`},
		{name: "rep through the metatable is capped", src: `function main()
  local rep = getmetatable("").__index.rep
  local s = rep("x", 1e10)
end`, kind: KindLimit, errSub: "test.lua:3: string limit (16777216 bytes) exceeded: string.rep would build 10000000000 bytes"},
		{name: "format through the metatable is luft's", src: `function main()
  getmetatable("").__index.format("%p", {})
end`, kind: KindRuntime, errSub: "test.lua:2: invalid option '%p' to 'format'"},
		{name: "gfind is the interruptible gmatch", src: `function main()
  report(getmetatable("").__index.gfind == string.gmatch)
end`, want: `true`},
		{name: "the real metatable cannot be replaced", src: `function main() setmetatable("", {}) end`, kind: KindRuntime, errSub: "table expected, got string"},
		{name: "nor a type's metatable", src: `function main() setmetatable(1, {__index = {}}) end`, kind: KindRuntime, errSub: "table expected, got number"},
		{name: "a method added through the view works", src: `function main()
  getmetatable("").__index.shout = function(s) return s:upper() .. "!" end
  report(("hi"):shout())
end`, want: `"HI!"`},
		{name: "a child cannot patch its parent's string methods", src: `function main()
  local r = workflow("sub/patch.lua")
  report({r, ("x"):upper(), type(("x").lower), string.upper("y")})
end`, prepare: func(h *fakeHost) {
			h.files["sub/patch.lua"] = `function main()
  string.upper = function() return "patched" end
  getmetatable("").__index.lower = nil
  report(("x"):upper())
end`
		}, want: `["patched","X","function","Y"]`},
	})
}

func TestStringMatcherThroughMetatableInterrupted(t *testing.T) {
	prog, err := Compile("m.lua", "m.lua", []byte(`function main()
  local find = getmetatable("").__index.find
  find(string.rep("a", 40), "(.-)(.-)(.-)(.-)(.-)(.-)(.-)b")
end`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = Run(ctx, Config{Host: newFakeHost()}, prog)
	if ErrorKindOf(err) != KindCancelled {
		t.Fatalf("err = %v, want the run cancelled by its deadline", err)
	}
}

func TestBuildersCheckBeforeAllocating(t *testing.T) {
	small := func(c *Config) { c.Limits.MaxStringBytes = 1 << 20 }
	runCases(t, []scriptCase{
		{name: "format argument index", src: `function main() string.format("%[1]s%[1]s", "x") end`, kind: KindRuntime, errSub: "test.lua:1: invalid option '%[' to 'format'"},
		{name: "format precision after an index", src: `function main() string.format("%.[1]9999999d", 1) end`, kind: KindRuntime, errSub: "invalid option '%[' to 'format'"},
		{name: "format Go verbs", src: `function main() string.format("%v", 1) end`, kind: KindRuntime, errSub: "invalid option '%v' to 'format'"},
		{name: "format %T", src: `function main() string.format("%T", 1) end`, kind: KindRuntime, errSub: "invalid option '%T' to 'format'"},
		{name: "format result over the limit", src: `function main()
  local s = string.rep("x", 600000)
  local r = string.format("%s%s", s, s)
end`, config: small, kind: KindLimit, errSub: "test.lua:3: string limit (1048576 bytes) exceeded by string.format"},
		{name: "format %q measured before quoting", src: `function main()
  local s = string.rep("\0", 300000)
  local r = string.format("%q", s)
end`, config: small, kind: KindLimit, errSub: "test.lua:3: string limit (1048576 bytes) exceeded by string.format"},
		{name: "format is Lua 5.1's", src: `function main()
  report(string.format("%5.2f|%-3s|%%|%d|%x|%5.1s|%q|%g|%c", 3.14159, "a", 42.9, 255, "hello", 'a"\n', 1e20, 65))
end`, want: `" 3.14|a  |%|42|ff|    h|\"a\\\"\\\n\"|1e+20|A"`},
		{name: "rep whose size wraps", src: `function main() local s = string.rep(string.rep("x", 16), 2^60) end`, kind: KindLimit, errSub: "string limit (16777216 bytes) exceeded: string.rep would build 1.845e+19 bytes"},
		{name: "rep of inf", src: `function main() local s = ("x"):rep(1/0) end`, kind: KindLimit, errSub: "string.rep would build infinitely many bytes"},
		{name: "rep of nan and negatives is empty", src: `function main() report({("x"):rep(0/0), ("x"):rep(-5), ("x"):rep(2.7)}) end`, want: `["","","xx"]`},
		{name: "rep with a separator", src: `function main() report(("ab"):rep(3, ", ")) end`, want: `"ab, ab, ab"`},
		{name: "rep with a large separator", src: `function main() local s = ("x"):rep(200000, "yyyyyy") end`, config: small, kind: KindLimit, errSub: "test.lua:1: string limit (1048576 bytes) exceeded: string.rep would build 1399994 bytes"},
		{name: "concat of a huge range", src: `function main() table.concat({"a", "b"}, ",", 1, 1e9) end`, kind: KindRuntime, errSub: "test.lua:1: invalid value (at index 3) in table for 'concat'"},
		{name: "concat of a huge negative range", src: `function main() table.concat({}, "", -2^62, 2^62) end`, kind: KindRuntime, errSub: "invalid value (at index -2147483648)"},
		{name: "concat range", src: `function main() report({table.concat({1, 2, 3, 4}, "-", 2, 3), table.concat({}, "x", 5, 1)}) end`, want: `["2-3",""]`},
		{name: "report of a shared table", src: `function main()
  local t = {}
  for i = 1, 60 do t = {t, t} end
  report(t)
end`, kind: KindLimit, errSub: "test.lua:4: report: the value is too large to store: $[1]"},
		{name: "json.encode of a shared table cannot be caught", src: `function main()
  local t = {}
  for i = 1, 60 do t = {t, t} end
  local ok, e = pcall(json.encode, t)
  report("caught")
end`, kind: KindLimit, errSub: "test.lua:4: json.encode: $["},
	})
}

var goAddr = regexp.MustCompile(`0x[0-9a-f]{4,}`)

func TestNoGoAddressInMessages(t *testing.T) {
	noAddr := func(t *testing.T, h *fakeHost) {
		for _, ev := range h.events {
			if s, _ := ev.Data["msg"].(string); goAddr.MatchString(s) {
				t.Fatalf("log event carries a Go address: %q", s)
			}
		}
	}
	runCases(t, []scriptCase{
		{name: "tostring names a table without its address", src: `function main()
  local t = {}
  local a, b = tostring(t), tostring(t)
  log(a) print(t, function() end)
  report({a == b, a ~= tostring({}), a:match("^table: %x+$") ~= nil, tostring(print):match("^function: %x+$") ~= nil})
end`, want: `[true,true,true,true]`, check: noAddr},
		{name: "an error raised with a function", src: `function main() error(function() end) end`, kind: KindRuntime, check: func(t *testing.T, h *fakeHost) {}},
		{name: "a caught message built by the VM", src: `function main()
  local ok, e = pcall(function() local x; x[{}] = 1 end)
  log(e)
  report(e:find("0x") == nil)
end`, want: `true`, check: noAddr},
		{name: "__tostring must return a string", src: `function main()
  tostring(setmetatable({}, {__tostring = function() return {} end}))
end`, kind: KindRuntime, errSub: "'__tostring' must return a string (it returned a table)"},
		{name: "format %s of a table", src: `function main() report(string.format("%s", {}):find("0x") == nil) end`, want: `true`},
	})
	h := newFakeHost()
	_, err := runScript(t, h, `function main() error(function() end) end`)
	if err == nil || goAddr.MatchString(err.Error()) || !strings.Contains(err.Error(), "function: ") {
		t.Fatalf("err = %v, want a function named without its address", err)
	}
	_, err = runScript(t, h, `function main() local t = {} t[nil] = 1 end`)
	if err == nil || goAddr.MatchString(err.Error()) {
		t.Fatalf("err = %v", err)
	}
	_, err = runScript(t, h, `function main() local x; x[{}] = 1 end`)
	if err == nil || goAddr.MatchString(err.Error()) || !strings.Contains(err.Error(), "with key 'table: ") {
		t.Fatalf("err = %v, want the key named without its address", err)
	}
}

func TestXpcallHandlerErrorStaysInside(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "handler raises", src: `function main()
  local ok, e = xpcall(function() error("first") end, function(m) error("in handler") end)
  report({ok, e})
end`, want: `[false,"error in error handling: test.lua:2: in handler"]`},
		{name: "handler raises a table", src: `function main()
  report({xpcall(function() error("first") end, function(m) error({}) end)})
end`, want: `[false,"error in error handling"]`},
		{name: "handler result", src: `function main()
  report({xpcall(function() error("x", 0) end, function(m) return "got " .. m end)})
end`, want: `[false,"got x"]`},
		{name: "a limit in the handler still ends the run", src: `function main()
  xpcall(function() error("x") end, function(m) return string.rep("y", 1e12) end)
  report("not reached")
end`, kind: KindLimit, errSub: "test.lua:2: string limit"},
	})
}

func TestDepthLimitsHavePosition(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "call depth", src: `local function f(n) return 1 + f(n + 1) end
function main() f(1) end`, kind: KindLimit, errSub: "test.lua:1: call depth limit (200 frames)"},
		{name: "pcall nesting", src: `local function f() pcall(f) end
function main() f() end`, kind: KindLimit, errSub: "test.lua:1: pcall nesting limit (64)"},
		{name: "unpack of a huge range", src: `function main() local t = {unpack({}, 1, 1e8)} end`, kind: KindRuntime, errSub: "test.lua:1: too many results to unpack (100000000; at most 8000)"},
		{name: "byte of a huge range", src: `function main() local t = {string.byte(string.rep("x", 100000), 1, -1)} end`, kind: KindRuntime, errSub: "test.lua:1: string slice too long"},
		{name: "byte and unpack within range", src: `function main() report({select("#", string.byte("abc", 1, -1)), string.byte("abc", -1), select("#", unpack({1, 2, 3}, 2))}) end`, want: `[3,99,2]`},
		{name: "a script's own stack overflow message stays catchable", src: `function main()
  report({pcall(error, "stack overflow", 0)})
end`, want: `[false,"stack overflow"]`},
		{name: "call depth inside pcall cannot be caught", src: `local function f(n) return 1 + f(n + 1) end
function main() local ok = pcall(f, 1) report("caught") end`, kind: KindLimit, errSub: "test.lua:1: call depth limit (200 frames)"},
		{name: "a branch that starts itself", src: `local function f() parallel({1}, f) end
function main() f() end`, kind: KindLimit, errSub: "test.lua:1: nesting limit (32 levels of workflow/parallel/pmap/pipeline) exceeded by parallel() at depth 33"},
	})
}

func TestWorkflowPathConfined(t *testing.T) {
	files := func(h *fakeHost) {
		h.files["/etc/passwd.lua"] = `function main() report("outside") end`
		h.files["self.lua"] = `function main() workflow("self.lua") end`
		h.files["sub/ok.lua"] = `function main() report(workflow("../self.lua")) end`
		h.files["sub/bad.lua"] = "function main()\n  local secret = \"TOPSECRET\" +\nend"
		h.files["notes.txt"] = `function main() end`
	}
	runCases(t, []scriptCase{
		{name: "absolute", src: `function main() workflow("/etc/passwd.lua") end`, prepare: files, kind: KindRuntime, errSub: `test.lua:1: workflow "/etc/passwd.lua": absolute paths are not allowed`},
		{name: "dot dot", src: `function main() workflow("../../etc/hostname.lua") end`, prepare: files, kind: KindRuntime, errSub: "the path leaves the calling script's folder"},
		{name: "dot dot from a child", src: `function main() workflow("sub/ok.lua") end`, prepare: files, kind: KindRuntime, errSub: `sub/ok.lua:1: workflow "../self.lua": the path leaves`},
		{name: "not lua", src: `function main() workflow("notes.txt") end`, prepare: files, kind: KindRuntime, errSub: "only .lua files can be loaded"},
		{name: "inner dot dot stays inside", src: `function main() report(workflow("sub/../sub/../self.lua")) end`, prepare: files, kind: KindLimit, errSub: "nesting limit"},
		{name: "a workflow that calls itself", src: `function main() workflow("self.lua") end`, prepare: files, kind: KindLimit,
			errSub: "self.lua:1: nesting limit (32 levels of workflow/parallel/pmap/pipeline) exceeded by workflow() at depth 33"},
		{name: "syntax errors do not quote the file", src: `function main() workflow("sub/bad.lua") end`, prepare: files, kind: KindRuntime, check: func(t *testing.T, h *fakeHost) {},
			errSub: "sub/bad.lua:3: syntax error (column"},
	})
	long, err := runScript(t, newFakeHost(), `function main() workflow(string.rep("a/", 500000) .. "w.lua") end`)
	if err == nil || !strings.Contains(err.Error(), "test.lua:1: workflow \"a/a/") || !strings.Contains(err.Error(), "the path is longer than 4096 bytes") || len(err.Error()) > 1000 {
		t.Fatalf("a 1 MB path: got %v, err of %d bytes; want a short error saying the path is too long", long, len(fmt.Sprint(err)))
	}
	h := newFakeHost()
	files(h)
	_, err = runScript(t, h, `function main() workflow("sub/bad.lua") end`)
	if err == nil || strings.Contains(err.Error(), "TOPSECRET") {
		t.Fatalf("err = %v, must not quote the file", err)
	}
}

func TestNumericOptionsRefuseOverflow(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "max_inflight inf", src: `function main() pipeline{items={1}, stages={function(x) return x end}, max_inflight=1/0} end`, kind: KindRuntime,
			errSub: "test.lua:1: pipeline: max_inflight must be a whole number from 1 to 1000000, got +Inf"},
		{name: "max_inflight huge", src: `function main() pipeline{items={1}, stages={function(x) return x end}, max_inflight=2^63} end`, kind: KindRuntime, errSub: "max_inflight must be a whole number from 1 to 1000000"},
		{name: "max_concurrency nan", src: `function main() parallel({1}, function() end, {max_concurrency=0/0}) end`, kind: KindRuntime, errSub: "max_concurrency must be a whole number from 1 to 1000000"},
		{name: "random inf", src: `function main() luft.random(1, 1/0) end`, kind: KindRuntime, errSub: "test.lua:1: luft.random: n must be a whole number from -2^53 to 2^53, got +Inf"},
		{name: "random nan", src: `function main() luft.random(0/0) end`, kind: KindRuntime, errSub: "luft.random: n must be a whole number"},
		{name: "random non-integer", src: `function main() luft.random(1.5, 3) end`, kind: KindRuntime, errSub: "luft.random: m must be a whole number from -2^53 to 2^53, got 1.5"},
		{name: "random huge", src: `function main() luft.random(-2^60, 1) end`, kind: KindRuntime, errSub: "luft.random: m must be a whole number"},
		{name: "random inverted", src: `function main() luft.random(5, 1) end`, kind: KindRuntime, errSub: "luft.random: the interval [5, 1] is empty (m must be at most n)"},
		{name: "random widest", src: `function main()
  local r = luft.random(-2^53, 2^53)
  report(r >= -2^53 and r <= 2^53 and r == math.floor(r))
end`, want: `true`},
		{name: "budget tokens inf", src: `function main() budget{tokens=1/0} end`, kind: KindRuntime, errSub: "test.lua:1: budget: tokens must be a whole number from 0 to 9007199254740992 (0 means no limit), got +Inf"},
		{name: "budget tokens nan", src: `function main() budget{tokens=0/0} end`, kind: KindRuntime, errSub: "budget: tokens must be a whole number"},
		{name: "budget negative", src: `function main() budget{agents=-1} end`, kind: KindRuntime, errSub: "budget: agents must be a whole number from 0"},
		{name: "budget time_ms huge", src: `function main() budget(1e300) end`, kind: KindRuntime, errSub: "budget: time_ms must be a number from 0 to 1000000000000"},
		{name: "phase planned inf", src: `function main() phase("p", 1/0) end`, kind: KindRuntime, errSub: "test.lua:1: phase: planned must be a whole number from 0 to 1000000, got +Inf"},
		{name: "phase planned huge", src: `function main() phase{label="p", planned=2^63} end`, kind: KindRuntime, errSub: "phase: planned must be a whole number from 0 to 1000000"},
		{name: "phase planned nan", src: `function main() phase("p", 0/0) end`, kind: KindRuntime, errSub: "phase: planned must be a whole number"},
		{name: "budget usd inf", src: `function main() budget{usd=1/0} end`, kind: KindRuntime, errSub: "budget: usd must be a number from 0"},
	})
}
