package lua

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
)

// convergeReplies plays producers and adversaries: a producer of item X finds "X1" and
// "X2"; a re-check restates the finding it was given; an adversary refutes every finding
// whose title ends in 2. Prompts ending in "boom" fail.
func convergeReplies(req agent.Request) (agent.Result, error) {
	_, tail, _ := strings.Cut(req.Prompt, "\n\n")
	ok := func(out any) (agent.Result, error) {
		return agent.Result{Status: agent.StatusOK, Output: out, Usage: agent.Usage{Input: 1, Output: 1}, Attempts: 1}, nil
	}
	if strings.HasSuffix(tail, "boom") {
		return agent.Result{Status: agent.StatusError, Error: "scripted failure"}, nil
	}
	var f map[string]any
	_ = json.Unmarshal([]byte(tail), &f)
	switch {
	case req.Role == "adversary":
		title, _ := f["title"].(string)
		return ok(map[string]any{"refuted": strings.HasSuffix(title, "2"), "reason": "checked"})
	case strings.HasPrefix(req.Prompt, "Re-examine"):
		return ok(map[string]any{"findings": []any{f}})
	default:
		return ok(map[string]any{"findings": []any{map[string]any{"title": tail + "1"}, map[string]any{"title": tail + "2"}}})
	}
}

func TestConverge(t *testing.T) {
	withReplies := func(h *fakeHost) { h.reply = convergeReplies }
	runCases(t, []scriptCase{
		{name: "refutes, re-checks and converges", prepare: withReplies, src: `function main()
  local r = converge({"A", "B"}, {model = "m2"})
  local titles = {}
  for i, f in ipairs(r.findings) do titles[i] = f.title end
  report({converged = r.converged, rounds = r.rounds, titles = titles, stats = r.round_stats})
end`, want: `{"converged":true,"rounds":2,"stats":[{"failed":0,"findings":4,"items":2,"refuted":2,"round":1,"surviving":2},{"failed":0,"findings":2,"items":2,"refuted":0,"round":2,"surviving":2}],"titles":["A1","B1"]}`,
			keys: []string{"main/1/par[1]/1", "main/1/par[2]/1", "main/2/par[1]/1", "main/2/par[2]/1", "main/2/par[3]/1", "main/2/par[4]/1",
				"main/3/par[1]/1", "main/3/par[2]/1", "main/4/par[1]/1", "main/4/par[2]/1"},
			check: func(t *testing.T, h *fakeHost) {
				for _, r := range h.reqs {
					if r.Model != "m2" || r.Schema == nil {
						t.Fatalf("converge call without its model or schema: %+v", r)
					}
				}
				if h.calls[0].Where != "test.lua:2" {
					t.Fatalf("a converge call is placed at %q, want the script line that called converge", h.calls[0].Where)
				}
				if len(h.eventsOf(event.ConvergeStarted)) != 1 || h.eventsOf(event.ConvergeDone)[0].Data["converged"] != true {
					t.Fatalf("converge events: %+v", h.events)
				}
			}},
		{name: "without adversaries", prepare: withReplies, src: `function main()
  local r = converge({"A"}, {adversarial = false, max_rounds = 5})
  report({r.converged, r.rounds, #r.findings})
end`, want: `[true,2,2]`},
		{name: "producers per item and a vote threshold", prepare: withReplies, src: `function main()
  local r = converge({"A"}, {producers_per_item = 2, adversaries_per_finding = 3, vote_threshold = 0, max_rounds = 1})
  report({r.converged, r.rounds, #r.findings, r.round_stats[1].findings})
end`, want: `[false,1,2,2]`},
		{name: "budget rounds is the default max_rounds", prepare: withReplies, src: `function main()
  budget(60000, 1)
  local r = converge({"A"})
  report({r.converged, r.rounds, ctx.budget.rounds, ctx.budget.time_ms})
end`, want: `[false,1,1,60000]`},
		{name: "every producer failing does not converge", prepare: withReplies, src: `function main()
  local r = converge({"boom"})
  report({r.converged, r.rounds, #r.findings, r.round_stats[1].failed})
end`, want: `[false,1,0,1]`},
		{name: "custom prompts and finding schema", prepare: withReplies, src: `function main()
  local r = converge({"A"}, {producer_prompt = "look:\n\n{item}", adversary_prompt = "refute:\n\n{finding}",
    schema = {type = "object", properties = {title = {type = "string"}}}, max_rounds = 1})
  report(#r.findings)
end`, want: `1`},
		{name: "no items", src: `function main() local r = converge({}) report({r.converged, r.rounds, json.encode(r.findings)}) end`,
			want: `[true,1,"[]"]`},
		{name: "unknown option ends the run", src: `function main() pcall(converge, {"a"}, {max_round = 2}) end`,
			kind: KindRuntime, errSub: `test.lua:1: converge: unknown option "max_round": did you mean "max_rounds"?`},
		{name: "bad threshold", src: `function main() converge({"a"}, {vote_threshold = 2}) end`,
			kind: KindRuntime, errSub: `vote_threshold must be a number from 0 to 1`},
		{name: "items must be a list", src: `function main() converge("a") end`, kind: KindRuntime, errSub: `argument 1 must be a list`},
		{name: "not at top level", src: `converge({"a"})
function main() end`, kind: KindInvalid, errSub: `converge() is not allowed in a script's top-level code`},
	})
}

func TestConvergeHostileInput(t *testing.T) {
	withReplies := func(h *fakeHost) { h.reply = convergeReplies }
	runCases(t, []scriptCase{
		{name: "max_rounds inf", src: `function main() converge({"a"}, {max_rounds = 1/0}) end`, kind: KindRuntime,
			errSub: "test.lua:1: converge: option max_rounds must be a whole number from 1 to 20, got +Inf"},
		{name: "max_rounds nan", src: `function main() converge({"a"}, {max_rounds = 0/0}) end`, kind: KindRuntime,
			errSub: "option max_rounds must be a whole number from 1 to 20"},
		{name: "max_rounds 2^63", src: `function main() converge({"a"}, {max_rounds = 2^63}) end`, kind: KindRuntime,
			errSub: "option max_rounds must be a whole number from 1 to 20"},
		{name: "producers_per_item -2^63", src: `function main() converge({"a"}, {producers_per_item = -2^63}) end`, kind: KindRuntime,
			errSub: "option producers_per_item must be a whole number from 1 to 16"},
		{name: "adversaries_per_finding fraction", src: `function main() converge({"a"}, {adversaries_per_finding = 1.5}) end`, kind: KindRuntime,
			errSub: "option adversaries_per_finding must be a whole number from 1 to 16, got 1.5"},
		{name: "vote_threshold nan", src: `function main() converge({"a"}, {vote_threshold = 0/0}) end`, kind: KindRuntime,
			errSub: "option vote_threshold must be a number from 0 to 1"},
		{name: "options not a table", src: `function main() converge({"a"}, 5) end`, kind: KindRuntime,
			errSub: "converge: argument 2 must be an options table, got a number"},
		{name: "cyclic schema", src: `function main()
  local s = {type = "object"} s.properties = {x = s}
  converge({"a"}, {schema = s})
end`, kind: KindRuntime, errSub: "converge: option schema (the JSON Schema of one finding):"},
		{name: "deep schema", src: `function main()
  local s = {type = "object"}
  for i = 1, 10000 do s = {type = "object", properties = {x = s}} end
  converge({"a"}, {schema = s})
end`, kind: KindRuntime, errSub: "converge: option schema (the JSON Schema of one finding):"},
		{name: "schema not JSON", src: `function main() converge({"a"}, {schema = "{"}) end`, kind: KindRuntime,
			errSub: "option schema (the JSON Schema of one finding): not valid JSON"},
		{name: "cyclic item", prepare: withReplies, src: `function main()
  local t = {} t.self = t
  converge({t})
end`, kind: KindRuntime, errSub: "test.lua:3: converge: item 1 cannot be put in a prompt:"},
		{name: "function item", src: `function main() converge({"a", print}) end`, kind: KindRuntime,
			errSub: "test.lua:1: converge: item 2 cannot be put in a prompt:"},
	})
}

// Every VM makes its prelude and converge functions from prototypes compiled once for
// the process, so runs on many goroutines at once read the same prototypes: they must
// only read them (run with -race).
func TestSharedPrototypesAcrossConcurrentRuns(t *testing.T) {
	prog, err := Compile("test.lua", "test.lua", []byte(`function main()
  local ok, err = pcall(function() error("caught", 0) end)
  local r = converge({"A"}, {max_rounds = 1})
  report({ok = ok, err = err, n = #r.findings})
end`))
	if err != nil {
		t.Fatal(err)
	}
	const runs = 8
	errs := make(chan error, runs)
	for range runs {
		go func() {
			h := newFakeHost()
			h.reply = convergeReplies
			out, err := Run(t.Context(), Config{Host: h}, prog)
			if err == nil {
				if b, _ := json.Marshal(out.Report); string(b) != `{"err":"caught","n":1,"ok":false}` {
					err = fmt.Errorf("report %s", b)
				}
			}
			errs <- err
		}()
	}
	for range runs {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
