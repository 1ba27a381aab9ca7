package lua

import (
	"testing"
)

// benchRun compiles src once and runs it b.N times on the fake host (agents complete on
// their own goroutines, so the VM's driver, coroutines and primitives are all measured).
func benchRun(b *testing.B, src string, args map[string]any) {
	prog, err := Compile("bench.lua", "bench.lua", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(b.Context(), Config{Host: newFakeHost(), Args: args}, prog); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFanout10k is the VM's share of the 10,000-agent fan-out of bench/fanout,
// without the journal: one parallel() of 10,000 agent calls.
func BenchmarkFanout10k(b *testing.B) {
	benchRun(b, `function main()
  local items = {}
  for i = 1, args.n do items[i] = i end
  local r = parallel(items, function(i) return agent{prompt = "item " .. i}.tokens end)
  local sum = 0
  for _, t in ipairs(r) do sum = sum + t end
  report({calls = #r, tokens = sum})
end`, map[string]any{"n": 10000.0})
}

// BenchmarkStringMethods measures method calls on strings, which resolve through the
// string metatable's __index (a Go function that finds the running workflow's library).
func BenchmarkStringMethods(b *testing.B) {
	benchRun(b, `function main()
  local n = 0
  for i = 1, 100000 do
    local s = ("item"):upper()
    n = n + s:len() + #("x"):rep(3)
  end
  report(n)
end`, nil)
}
