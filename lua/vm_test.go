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
