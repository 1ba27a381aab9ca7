package lua

import (
	"testing"

	"github.com/luft-run/luft/event"
)

func TestParallel(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "input order and keys", src: `function main()
  local r = parallel({"a","b","c"}, function(x, i)
    local first = agent{prompt=x}
    local second = agent{prompt=x..i}
    return second.output
  end)
  report(r)
end`, want: `["echo: a1","echo: b2","echo: c3"]`,
			keys: []string{"main/1/par[1]/1", "main/1/par[2]/1", "main/1/par[3]/1", "main/1/par[1]/2", "main/1/par[2]/2", "main/1/par[3]/2"},
			check: func(t *testing.T, h *fakeHost) {
				if len(h.eventsOf(event.ParallelStarted)) != 1 || h.eventsOf(event.ParallelDone)[0].Data["ok"] != 3 {
					t.Fatalf("parallel events: %+v", h.events)
				}
			}},
		{name: "compatibility form", src: `function main()
  local r = parallel({"x","y"}, function(item) return {prompt="do "..item, name=item} end)
  report({r[1].output, r[2].ok})
end`, want: `["echo: do x",true]`, keys: []string{"main/1/par[1]/1", "main/1/par[2]/1"}},
		{name: "failed branch gives an error slot", src: `function main()
  local r = parallel({1,2,3}, function(i)
    if i == 2 then error("boom") end
    return i * 10
  end)
  report({r[1], r[2].ok, r[2].status, r[2].error, r[3]})
end`, want: `[10,false,"error","test.lua:3: boom",30]`},
		{name: "a table raised by a branch reads as JSON", src: `function main()
  local r = parallel({1}, function() error({code=7}) end)
  report(r[1].error)
end`, want: `"{\"code\":7}"`},
		{name: "tail call at a branch root", src: `function main()
  local r = parallel({"t"}, function(x) return agent{prompt=x} end)
  report(r[1].output)
end`, want: `"echo: t"`},
		{name: "max_concurrency", src: `function main()
  local running, peak = 0, 0
  parallel({1,2,3,4,5,6}, function(i)
    running = running + 1
    if running > peak then peak = running end
    agent{prompt="p"..i}
    running = running - 1
  end, {max_concurrency = 2})
  local running2, peak2 = 0, 0
  parallel({1,2,3,4,5,6}, function(i)
    running2 = running2 + 1
    if running2 > peak2 then peak2 = running2 end
    agent{prompt="q"..i}
    running2 = running2 - 1
  end)
  report({peak, peak2})
end`, want: `[2,6]`},
		{name: "branch window bounds live branches", src: `function main()
  local running, peak = 0, 0
  parallel({1,2,3,4,5,6}, function(i)
    running = running + 1
    if running > peak then peak = running end
    agent{prompt="p"..i}
    running = running - 1
  end)
  report(peak)
end`, want: `2`, config: func(c *Config) { c.BranchWindow = 2 }},
		{name: "fail_fast cancels siblings", src: `function main()
  local r = parallel({1,2,3}, function(i)
    if i == 1 then error(agent{prompt="fail fast"}.error) end
    return agent{prompt="wait "..i}.output
  end, {fail_fast = true})
  report({r[1].status, r[2].status, r[3].status})
end`, want: `["error","cancelled","cancelled"]`, prepare: func(h *fakeHost) { h.release = make(chan struct{}) }},
		{name: "nested parallel", src: `function main()
  local r = parallel({1,2}, function(i)
    return parallel({"a","b"}, function(x) return agent{prompt=x..i}.output end)
  end)
  report(r)
end`, want: `[["echo: a1","echo: b1"],["echo: a2","echo: b2"]]`,
			keys: []string{"main/1/par[1]/1/par[1]/1", "main/1/par[1]/1/par[2]/1", "main/1/par[2]/1/par[1]/1", "main/1/par[2]/1/par[2]/1"}},
		{name: "empty items", src: `function main() report(json.encode(parallel({}, function() end))) end`, want: `"[]"`},
		{name: "pmap", src: `function main()
  report(pmap({"a","b"}, function(x, i) return agent{prompt=x}.output .. i end))
end`, want: `["echo: a1","echo: b2"]`},
		{name: "bad arguments", src: `function main() parallel({1}, "nope") end`, kind: KindRuntime, errSub: "argument 2 must be a function"},
		{name: "bad option", src: `function main() parallel({1}, function() end, {max_concurency=2}) end`, kind: KindRuntime, errSub: `unknown option "max_concurency": did you mean "max_concurrency"? (known: max_concurrency, fail_fast)`},
	})
}

// A branch that raises leaves a slot Luft-style loops can read like a failed result.
func TestErrorSlotFields(t *testing.T) {
	runCases(t, []scriptCase{{name: "error slot", src: `function main()
  local r = parallel({1}, function() error("boom") end)
  report({r[1].ok, r[1].status, r[1].tokens, #r[1].findings, json.encode(r[1].findings)})
end`, want: `[false,"error",0,0,"[]"]`}})
}
