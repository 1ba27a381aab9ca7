package lua

import (
	"runtime"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"
)

// A write far past the end of a table's array part made gopher-lua fill the gap with nils
// in one uninterruptible step (3.2 GB and 7 s for {[1]=1,[2]=2,[50000000]=3}). Every such
// growth path is refused before it allocates, with a limit error at the script line; each
// case may allocate 64 MiB at most (the refused growths would take gigabytes), measured in
// bytes allocated rather than time so that a loaded machine passes too.
func TestSparseTableGrowthRefused(t *testing.T) {
	const limit = "table growth limit (262144 empty slots at once, 1/1024 of the 4.0 GiB memory limit) exceeded"
	cases := []struct{ name, src, where, what string }{
		{"constructor", "function main()\n  local t = {[1]=1,[2]=2,[50000000]=3}\nend", "test.lua:2", "the table constructor's [50000000]"},
		{"constructor with a computed key", "function main()\n  local k = 5e7\n  local t = {[k] = 1}\nend", "test.lua:3", "the table constructor's [50000000]"},
		{"assignment", "function main()\n  local t = {1, 2}\n  t[50000000] = 1\nend", "test.lua:3", "t[50000000]"},
		{"assignment of nil", "function main()\n  local t = {}\n  t[5e7] = nil\nend", "test.lua:3", "t[50000000]"},
		{"global table", "function main()\n  g = {}\n  g[5e7] = 1\nend", "test.lua:3", "t[50000000]"},
		{"field of a table", "function main()\n  local o = {t = {}}\n  o.t[5e7] = 1\nend", "test.lua:3", "t[50000000]"},
		{"result of a call", "local t = {}\nlocal function f() return t end\nfunction main()\n  f()[5e7] = 1\nend", "test.lua:4", "t[50000000]"},
		{"one target of several", "function main()\n  local t, a = {}\n  a, t[5e7] = 1, 2\nend", "test.lua:3", "t[50000000]"},
		{"through __newindex", "function main()\n  local real = {}\n  local p = setmetatable({}, {__newindex = real})\n  p[5e7] = 1\nend", "test.lua:4", "t[50000000]"},
		{"rawset in __newindex", "function main()\n  local p = setmetatable({}, {__newindex = function(t, k, v) rawset(t, k, v) end})\n  p[5e7] = 1\nend", "test.lua:2", "rawset(t, 50000000, v)"},
		{"table.insert", "function main()\n  local t = {1}\n  table.insert(t, 5e7, 1)\nend", "test.lua:3", "table.insert(t, 50000000, v)"},
		{"rawset", "function main()\n  rawset({}, 5e7, 1)\nend", "test.lua:2", "rawset(t, 50000000, v)"},
		{"pcall cannot catch it", "function main()\n  local ok = pcall(function() local t = {} t[5e7] = 1 end)\n  report(ok)\nend", "test.lua:2", "t[50000000]"},
		{"a ladder of gaps", "function main()\n  local t, k = {}, 1\n  while true do k = k * 2 t[k] = true end\nend", "test.lua:3", "t[1048576]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := runScript(t, newFakeHost(), tc.src)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("the run allocated %d MiB", alloc>>20)
			}
			if ErrorKindOf(err) != KindLimit {
				t.Fatalf("err = %v (%s), want a limit error", err, ErrorKindOf(err))
			}
			for _, sub := range []string{tc.where + ": ", limit, tc.what + " would grow"} {
				if !strings.Contains(err.Error(), sub) {
					t.Fatalf("error %q does not contain %q", err, sub)
				}
			}
		})
	}
}

// The rewrite keeps what tables do: dense growth, small gaps, keys gopher-lua keeps in
// the hash part anyway, metamethods, evaluation order, goto, and error messages.
func TestTableWritesUnchanged(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "dense growth", src: `function main()
  local t, o = {}, {items = {}}
  for i = 1, 300000 do t[i] = i end
  for i = 1, 1000 do o.items[#o.items + 1] = i end
  report({#t, t[300000], #o.items})
end`, want: `[300000,300000,1000]`},
		{name: "gaps under the limit", src: `function main()
  local t = {[100] = 1, [200000] = 2}
  t[400000] = 3
  rawset(t, 600000, 4)
  table.insert(t, 800000, 5)
  report({t[100], t[200000], t[400000], t[600000], t[800000]})
end`, want: `[1,2,3,4,5]`},
		{name: "filled from the end", src: `function main()
  local t = {}
  for i = 1000, 1, -1 do t[i] = i end
  report(#t)
end`, want: `1000`},
		{name: "keys gopher-lua hashes", src: `function main()
  local t = {[1e8] = 1, [2^40] = 2, [-5] = 3, [1.5] = 4}
  t[3e9] = 5
  report({t[1e8], t[2^40], t[-5], t[1.5], t[3e9]})
end`, want: `[1,2,3,4,5]`},
		{name: "__newindex function and table", src: `function main()
  local seen = {}
  local p = setmetatable({}, {__newindex = function(t, k, v) seen[#seen + 1] = k rawset(t, k, v * 2) end})
  p[70000] = 1
  local real = {}
  local q = setmetatable({}, {__newindex = real})
  q[70000] = 2
  report({p[70000], seen[1], rawget(q, 70000) == nil, real[70000]})
end`, want: `[2,70000,true,2]`},
		{name: "evaluation order", src: `local trace = {}
local function f(x) trace[#trace + 1] = tostring(x) return x end
function main()
  local o = {a = {}, b = {}}
  local function get(k) trace[#trace + 1] = k return o[k] end
  get("a")[f(70001)], get("b")[f(70002)] = f(3), f(4)
  report({table.concat(trace, " "), o.a[70001], o.b[70002]})
end`, want: `["a 70001 b 70002 3 4",3,4]`},
		{name: "swap through a rewritten target", src: `function main()
  local o = {t = {10, 20}}
  local i, j = 1, 2
  o.t[i], o.t[j] = o.t[j], o.t[i]
  report(o.t)
end`, want: `[20,10]`},
		{name: "goto past a rewritten assignment", src: `function main()
  local o, k = {t = {}}, 1
  goto skip
  o.t[k] = 1
  ::skip::
  report(o.t[k] == nil)
end`, want: `true`},
		{name: "index of nil keeps its message", src: "function main()\n  local o = {}\n  local k = 1\n  o.x[k] = 1\nend",
			kind: KindRuntime, errSub: "test.lua:4: attempt to index a non-table object(nil) with key '1'"},
		{name: "nil key keeps its message", src: "function main()\n  local t, k = {}\n  t[k] = 1\nend",
			kind: KindRuntime, errSub: "test.lua:3:"},
	})
}

func TestTableArrayFieldFound(t *testing.T) {
	if ltableArray == nil {
		t.Fatal("gopher-lua's LTable has no array field any more: arrayLen falls back to MaxN, which undercounts")
	}
	tb := &glua.LTable{}
	tb.RawSetInt(10, glua.LTrue)
	tb.RawSetInt(10, glua.LNil)
	if n := arrayLen(tb); n != 10 {
		t.Fatalf("arrayLen = %d, want 10", n)
	}
}
