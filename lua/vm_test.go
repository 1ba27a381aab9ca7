package lua

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua/luaval"
)

type scriptCase struct {
	name    string
	src     string
	want    string    // JSON of the report, when the run succeeds
	kind    ErrorKind // expected error kind, when it fails
	errSub  string    // substring of the error
	keys    []string  // expected agent call keys, in issue order
	prepare func(h *fakeHost)
	config  func(c *Config) // changes to the default Config, when the case needs them
	check   func(t *testing.T, h *fakeHost)
}

func runCases(t *testing.T, cases []scriptCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost()
			if tc.prepare != nil {
				tc.prepare(h)
			}
			out, err := runScript(t, h, tc.src, tc.config)
			if tc.kind != "" || tc.errSub != "" {
				if err == nil {
					t.Fatalf("want error %s %q, got report %v", tc.kind, tc.errSub, out.Report)
				}
				if tc.kind != "" && ErrorKindOf(err) != tc.kind {
					t.Fatalf("error kind = %q, want %q (%v)", ErrorKindOf(err), tc.kind, err)
				}
				if !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("error %q does not contain %q", err, tc.errSub)
				}
			} else {
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				got, jerr := luaval.Encode(out.Report, "")
				if jerr != nil {
					t.Fatal(jerr)
				}
				if tc.want != "" && string(got) != tc.want {
					t.Fatalf("report\n got: %s\nwant: %s", got, tc.want)
				}
			}
			if tc.keys != nil {
				// Keys are compared as sets: completion order decides the order calls are
				// issued in, never the keys they get.
				got, want := h.keys(), append([]string(nil), tc.keys...)
				sort.Strings(got)
				sort.Strings(want)
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Fatalf("call keys\n got: %v\nwant: %v", got, want)
				}
			}
			if tc.check != nil {
				tc.check(t, h)
			}
		})
	}
}

func TestAgent(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "result table", src: `function main()
  local r = agent{prompt="hi", name="a", system="be brief", model="m2", max_tokens=10, temperature=0.5,
    timeout_ms=1000, retries=1, role="r", description="d", tools={"read_file"}, session_id="s1", class="batch"}
  report({ok=r.ok, status=r.status, output=r.output, text=r.text, tokens=r.tokens, usage=r.usage,
    cached=r.cached, attempts=r.attempts, backend=r.backend, model=r.model, findings=r.findings, err=r.error})
end`, want: `{"attempts":1,"backend":"fake","cached":false,"findings":[],"model":"m","ok":true,"output":"echo: hi","status":"ok","text":"echo: hi","tokens":5,"usage":{"cached":0,"input":2,"output":3}}`,
			check: func(t *testing.T, h *fakeHost) {
				r := h.reqs[0]
				if r.System != "be brief" || r.Model != "m2" || r.MaxTokens != 10 || *r.Temperature != 0.5 || r.TimeoutMS != 1000 ||
					r.Retries != 1 || r.Tools[0] != "read_file" || r.SessionID != "s1" || r.Class != "batch" || r.Role != "r" {
					t.Fatalf("request options not carried: %+v", r)
				}
				if h.calls[0].Hash != r.Hash() || h.calls[0].Where != "test.lua:2" {
					t.Fatalf("call = %+v", h.calls[0])
				}
			}},
		{name: "a failed call returns its result", src: `function main()
  local r = agent{prompt="fail now", name="x"}
  report({ok=r.ok, status=r.status, err=r.error, tokens=r.tokens, usage=r.usage, findings=r.findings, output=r.output})
end`, want: `{"err":"scripted failure","findings":[],"ok":false,"status":"error","tokens":0,"usage":{"cached":0,"input":0,"output":0}}`},
		{name: "an unchecked failed call stops at its missing output", src: `function main()
  report("got: " .. agent{prompt="fail now", name="x"}.output)
end`, kind: KindRuntime, errSub: `test.lua:2:`},
		{name: "pcall sees a failed call as a value", src: `function main()
  local ok, r = pcall(agent, {prompt="fail"})
  local ok2, r2 = pcall(agent, {prompt="fine"})
  report({ok=ok, failed=r.ok, ok2=ok2, out=r2.output})
end`, want: `{"failed":false,"ok":true,"ok2":true,"out":"echo: fine"}`},
		{name: "missing prompt ends the run", src: `function main()
  local ok, err = pcall(agent, {name="x"})
  report(err)
end`, kind: KindRuntime, errSub: `test.lua:2: agent: missing required 'prompt' (a non-empty string)`},
		{name: "invalid schema ends the run", src: `function main()
  pcall(agent, {prompt="x", schema={type="objekt"}})
end`, kind: KindRuntime, errSub: `option schema is not a valid JSON Schema`},
		{name: "unknown option", src: `function main() agent{prompt="x", promt="y"} end`, kind: KindRuntime, errSub: `unknown option "promt": did you mean "prompt"? (known: prompt,`},
		{name: "unknown option, far from any", src: `function main() agent{prompt="x", colour="y"} end`, kind: KindRuntime, errSub: `unknown option "colour" (known: prompt,`},
		{name: "bad option type", src: `function main() agent{prompt="x", max_tokens="10"} end`, kind: KindRuntime, errSub: "max_tokens must be a number"},
		{name: "bad class", src: `function main() agent{prompt="x", class="urgent"} end`, kind: KindRuntime, errSub: `class must be "interactive" or "batch"`},
		{name: "schema as table and JSON string", src: `function main()
  local a = agent{prompt="t", schema={type="object"}}
  local b = agent{prompt="s", schema='{"type":"object"}'}
  report({a=a.output.answer, b=b.output.n})
end`, want: `{"a":"t","b":1}`},
		{name: "schema not JSON", src: `function main() agent{prompt="x", schema="{nope"} end`, kind: KindRuntime, errSub: "schema is not valid JSON"},
		{name: "identical prompts are distinct calls", src: `function main()
  local a = agent{prompt="same"}
  local b = agent{prompt="same"}
  report(a.output == b.output)
end`, want: `true`, keys: []string{"main/1", "main/2"}},
		{name: "journal hit returns without yielding", src: `function main()
  local r = agent{prompt="cached"}
  report(r.output)
end`, want: `"echo: cached"`, prepare: func(h *fakeHost) { h.sync = true }},
		{name: "tail call at main's root", src: `function main() return report(agent{prompt="tail"}.output) end`, want: `"echo: tail"`},
	})
}

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

func TestPhaseLogBudgetReport(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "phases", src: `meta = {phases = {{label="scan", description="look around"}, {label="fix"}}}
function main()
  local a = phase("scan", 2)
  agent{prompt="x"}
  pcall(agent, {prompt="fail"})
  local b = phase{label="fix", planned=1}
  agent{prompt="y"}
  report({a, b})
end`, want: `[1,2]`, check: func(t *testing.T, h *fakeHost) {
			st, done := h.eventsOf(event.PhaseStarted), h.eventsOf(event.PhaseDone)
			if len(st) != 2 || len(done) != 2 {
				t.Fatalf("phase events: %+v", h.events)
			}
			if st[0].Data["description"] != "look around" || st[0].Data["planned"] != 2 {
				t.Fatalf("phase_started: %+v", st[0].Data)
			}
			if done[0].Data["ok"] != 1 || done[0].Data["failed"] != 1 || done[1].Data["ok"] != 1 {
				t.Fatalf("phase_done counts: %+v %+v", done[0].Data, done[1].Data)
			}
			if h.calls[2].PhaseID != 2 {
				t.Fatalf("phase id of call 3 = %d", h.calls[2].PhaseID)
			}
			if p := h.eventsOf(event.Plan); len(p) != 1 {
				t.Fatalf("plan events: %+v", p)
			}
		}},
		{name: "log and print", src: `function main()
  log("hello", "warn")
  print("a", 1, true)
end`, check: func(t *testing.T, h *fakeHost) {
			l := h.eventsOf(event.Log)
			if len(l) != 2 || l[0].Data["level"] != "warn" || l[1].Data["msg"] != "a\t1\ttrue" {
				t.Fatalf("log events: %+v", l)
			}
		}},
		{name: "bad log level", src: `function main() log("x", "loud") end`, kind: KindRuntime, errSub: `unknown level "loud"`},
		{name: "budget table form", src: `function main() budget{time_ms=5000, agents=3, tokens=100, usd=0.5} end`,
			check: func(t *testing.T, h *fakeHost) {
				if h.budget != (Budget{TimeMS: 5000, Agents: 3, Tokens: 100, USD: 0.5}) {
					t.Fatalf("budget = %+v", h.budget)
				}
			}},
		{name: "budget positional form", src: `function main() budget(2000, 7) end`,
			check: func(t *testing.T, h *fakeHost) {
				if h.budget != (Budget{TimeMS: 2000, Rounds: 7}) {
					t.Fatalf("budget = %+v", h.budget)
				}
			}},
		{name: "budget unknown limit", src: `function main() budget{minutes=3} end`, kind: KindRuntime, errSub: `unknown limit "minutes"`},
		{name: "budget rounds is a hint, not a cap", src: `function main()
  budget(60000, 5)
  local r = parallel({1,2,3,4,5,6,7,8}, function(i) return agent{prompt="p"..i}.ok end)
  report({#r, r[8], ctx.budget.rounds})
end`, want: `[8,true,5]`},
		{name: "report first stays", src: `function main()
  report("first")
  report({n=2})
end`, want: `"first"`, check: func(t *testing.T, h *fakeHost) {
			l := h.eventsOf(event.Log)
			if len(l) != 1 || l[0].Data["level"] != "warn" ||
				l[0].Data["msg"] != "report() called again at test.lua:3 and ignored: the run's result is the value reported at test.lua:2 (call report once)" {
				t.Fatalf("log events: %+v", l)
			}
			if n := len(h.eventsOf(event.Report)); n != 1 {
				t.Fatalf("%d report events, want 1", n)
			}
		}},
		{name: "report snapshot", src: `function main() local t = {n=1} report(t) t.n = 2 end`, want: `{"n":1}`},
		{name: "report of a function", src: `function main() report({f=function() end}) end`, kind: KindRuntime, errSub: "$.f"},
		{name: "args and ctx", src: `function main() report({args.topic, _args.n, ctx.run_id, ctx.resumed, ctx.attempt}) end`,
			want: `["lua",3,"run-1",false,1]`},
		{name: "luft values are host values", src: `function main()
  local r = luft.random(5, 5)
  local f = luft.random()
  local u = luft.uuid()
  local n = luft.now()
  report({r, f >= 0 and f < 1, #u, n > 0})
end`, want: `[5,true,36,true]`, check: func(t *testing.T, h *fakeHost) {
			if len(h.values) != 4 || h.values["main/1"] != 5.0 {
				t.Fatalf("values: %+v", h.values)
			}
		}},
		{name: "json in the sandbox", src: `function main()
  report(json.encode({b=json.array({}), a=1.0, c=json.null, d=json.decode('{"x":[1,null]}')}))
end`, want: `"{\"a\":1,\"b\":[],\"c\":null,\"d\":{\"x\":[1,null]}}"`},
	})
}

func TestWorkflowPrimitive(t *testing.T) {
	files := func(h *fakeHost) {
		h.files["sub/child.lua"] = `function main() report({got=args.x, out=agent{prompt="child "..args.x}.output}) end`
		h.files["sub/nomain.lua"] = `x = 1`
		h.files["sub/broken.lua"] = `function main() oops( end`
		h.files["sub/nested.lua"] = `function main() report(workflow("child.lua", {x="deep"})) end`
	}
	runCases(t, []scriptCase{
		{name: "relative path, args and report", src: `function main()
  local a = agent{prompt="parent"}
  local r = workflow("sub/child.lua", {x="hi"})
  report(r)
end`, prepare: files, want: `{"got":"hi","out":"echo: child hi"}`, keys: []string{"main/1", "main/2/wf/1"}},
		{name: "child relative to its own folder", src: `function main() report(workflow("sub/nested.lua")) end`,
			prepare: files, want: `{"got":"deep","out":"echo: child deep"}`, keys: []string{"main/1/wf/1/wf/1"}},
		{name: "missing main in child is catchable", src: `function main()
  local ok, err = pcall(workflow, "sub/nomain.lua")
  report(err)
end`, prepare: files, errSub: "", want: `"test.lua:2: workflow \"sub/nomain.lua\" failed: sub/nomain.lua: the script defines no function main(); add ` + "`function main() ... end`" + ` (top-level code runs first, then main)"`},
		{name: "syntax error in child", src: `function main() workflow("sub/broken.lua") end`, prepare: files, kind: KindRuntime, errSub: "sub/broken.lua:1: syntax error"},
		{name: "missing file", src: `function main() workflow("sub/none.lua") end`, prepare: files, kind: KindRuntime, errSub: "no such file sub/none.lua"},
	})
}

func TestLoadErrors(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "syntax error", src: "function main()\n  local x = = 1\nend", kind: KindSyntax, errSub: "test.lua:2: syntax error near '='"},
		{name: "missing main", src: `x = 1`, kind: KindInvalid, errSub: "defines no function main()"},
		{name: "top-level error", src: "local x = nil\nx.y = 1\nfunction main() end", kind: KindInvalid, errSub: "test.lua:2:"},
		{name: "agent at top level", src: "agent{prompt='x'}\nfunction main() end", kind: KindInvalid, errSub: "not allowed in a script's top-level code"},
		{name: "bad meta", src: "meta = {phases = {{description='no label'}}}\nfunction main() end", kind: KindInvalid, errSub: "meta.phases[1].label"},
		{name: "unknown meta field", src: "meta = {reasonning='x'}\nfunction main() end", kind: KindInvalid, errSub: "unknown field meta.reasonning"},
		{name: "runtime error", src: "function main()\n  local t = nil\n  return t.x\nend", kind: KindRuntime, errSub: "test.lua:3: attempt to index"},
		{name: "error with a table", src: `function main() error({code="E1", message="custom"}) end`, kind: KindRuntime, errSub: "custom"},
	})
}

func TestValidateDoesNotRunMain(t *testing.T) {
	h := newFakeHost()
	prog, err := Compile("v.lua", "v.lua", []byte(`meta={reasoning="r"} function main() agent{prompt="x"} end`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Validate(t.Context(), Config{Host: h}, prog)
	if err != nil || out.Meta == nil || len(h.calls) != 0 {
		t.Fatalf("validate: %v %+v calls=%d", err, out, len(h.calls))
	}
}

func TestEventsAreJSON(t *testing.T) {
	h := newFakeHost()
	if _, err := runScript(t, h, `function main() parallel({1}, function() return agent{prompt="x"} end) phase("p") log("m") end`); err != nil {
		t.Fatal(err)
	}
	for _, ev := range h.events {
		if _, err := json.Marshal(ev); err != nil {
			t.Fatalf("event %s does not marshal: %v", ev.Type, err)
		}
	}
}

func TestCancelStopsWaitingRun(t *testing.T) {
	h := newFakeHost()
	h.release = make(chan struct{})
	prog, _ := Compile("c.lua", "c.lua", []byte(`function main() log("waiting") agent{prompt="wait forever"} end`))
	ctx, cancel := context.WithCancel(t.Context())
	cfg := Config{Host: &cancelOnLog{fakeHost: h, cancel: cancel}}
	_, err := Run(ctx, cfg, prog)
	if ErrorKindOf(err) != KindCancelled {
		t.Fatalf("err = %v, want cancelled", err)
	}
}

// cancelOnLog cancels the run when the script logs, so a test can stop a run at a known
// point without timing.
type cancelOnLog struct {
	*fakeHost
	cancel context.CancelFunc
}

func (c *cancelOnLog) Emit(ev event.Event) {
	c.fakeHost.Emit(ev)
	if ev.Type == event.Log {
		c.cancel()
	}
}

// A branch that raises leaves a slot Luft-style loops can read like a failed result.
func TestErrorSlotFields(t *testing.T) {
	runCases(t, []scriptCase{{name: "error slot", src: `function main()
  local r = parallel({1}, function() error("boom") end)
  report({r[1].ok, r[1].status, r[1].tokens, #r[1].findings, json.encode(r[1].findings)})
end`, want: `[false,"error",0,0,"[]"]`}})
}
