package lua

import (
	"testing"

	"github.com/luft-run/luft/event"
)

func TestPipeline(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "positional form with name labels", src: `function main()
  local r = pipeline({"a","b"}, {
    {name="up", handler=function(d, item, i) return agent{prompt=d}.output .. i end},
    function(d, item, i) return d .. "/" .. item end,
  })
  report({r.ok, r.failed, r.total_stages, r.items[1].output, r.items[2].output, r.items[1].stages[1].label, r.items[1].stages[2].label, r.items[2].index})
end`, want: `[2,0,2,"echo: a1/a","echo: b2/b","up","stage 2",2]`},
		{name: "table form, failure skips later stages", src: `function main()
  local seen = {}
  local r = pipeline{items={1,2,3}, stages={
    {label="one", handler=function(d) if d == 2 then error("bad item") end return d end},
    {label="two", handler=function(d) seen[#seen+1] = d return d * 2 end},
  }, max_inflight=1}
  local it = r.items[2]
  report({r.ok, r.failed, it.ok, it.error, it.stages[1].status, it.stages[2].status, seen, r.items[3].output})
end`, want: `[2,1,false,"test.lua:4: bad item","error","skipped",[1,3],6]`},
		{name: "streams: item 1 enters stage 2 before item 3 enters stage 1", src: `function main()
  local order, at = {}, {}
  pipeline({1,2,3}, {
    function(d) order[#order+1] = "s1:"..d; at["s1:"..d] = #order; agent{prompt="x"..d}; return d end,
    function(d) order[#order+1] = "s2:"..d; at["s2:"..d] = #order; agent{prompt="y"..d}; return d end,
  }, {max_inflight = 1})
  report({#order, at["s2:1"] < at["s1:3"]})
end`, want: `[6,true]`},
		{name: "pipeline events", src: `function main()
  pipeline({1,2}, {function(d) return d end})
end`, check: func(t *testing.T, h *fakeHost) {
			if len(h.eventsOf(event.PipelineItemDone)) != 2 || len(h.eventsOf(event.PipelineDone)) != 1 {
				t.Fatalf("events: %+v", h.events)
			}
		}},
		{name: "keys", src: `function main()
  pipeline({"a"}, {function(d) return agent{prompt=d}.output end, function(d) return agent{prompt=d}.output end})
end`, keys: []string{"main/1/item[1]/stage[1]/1", "main/1/item[1]/stage[2]/1"}},
		{name: "empty stages", src: `function main() pipeline({1}, {}) end`, kind: KindRuntime, errSub: "stages must be a non-empty list"},
		{name: "unknown field", src: `function main() pipeline{items={1}, stages={function() end}, inflight=2} end`, kind: KindRuntime, errSub: `unknown field "inflight"`},
	})
}
