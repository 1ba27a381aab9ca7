package planner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/lua"
)

// scripted answers planner requests with replies in order and keeps the requests.
type scripted struct {
	replies []string
	fail    error
	got     []agent.Request
	keys    []string
}

func (s *scripted) Complete(_ context.Context, key string, req agent.Request) (agent.Result, error) {
	s.got = append(s.got, req)
	s.keys = append(s.keys, key)
	if s.fail != nil {
		return agent.Result{Status: agent.StatusError, Error: s.fail.Error()}, nil
	}
	r := s.replies[min(len(s.got), len(s.replies))-1]
	return agent.Result{Status: agent.StatusOK, Text: r, Usage: agent.Usage{Input: 10, Output: 5}}, nil
}

const good = "```lua\nmeta = { phases = { { label = \"a\" } } }\nfunction main()\n  phase(\"a\")\n  local r = agent{ name = \"x\", prompt = \"p\" }\n  report(r.ok)\nend\n```"

func TestValidateReasons(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"syntax", "function main( end", "the script does not compile: workflow.lua:1"},
		{"no main", "x = 1", "main"},
		{"bad meta", "meta = { colour = 1 }\nfunction main() report(1) end", "meta"},
		{"no report", "function main() agent{ prompt = \"p\" } end", "main() never calls report()"},
		{"runtime error", "function main() local t = nil; report(t.x) end", "workflow.lua:1"},
		{"too many calls", "function main() for i = 1, 50 do agent{ prompt = \"p\" .. i } end report(1) end", "agent call limit (10 per run)"},
		{"endless loop", "function main() while true do end end", "longer than the cap of 200ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Only the endless loop meets the short time cap; the others get a cap no busy
			// machine reaches, so each fails for its own reason.
			caps := Caps{AgentCalls: 10, Time: time.Minute}
			if tc.name == "endless loop" {
				caps.Time = 200 * time.Millisecond
			}
			_, err := Validate(context.Background(), []byte(tc.src), caps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestValidateFindsPhasesAgentsAndLint(t *testing.T) {
	src := "meta = { reasoning = \"r\", phases = { { label = \"scan\", description = \"d\" } } }\n" +
		"function main()\n  phase(\"scan\")\n  phase(\"other\")\n  local r = agent{ name = \"n1\", prompt = \"p\" }\n  report(r.output)\nend\n"
	chk, err := Validate(context.Background(), []byte(src), Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chk.Phases) != 1 || chk.Phases[0] != (Phase{"scan", "d"}) || chk.Reasons != "r" || chk.Calls != 1 || len(chk.Agents) != 1 || chk.Agents[0] != "n1" {
		t.Fatalf("check: %+v", chk)
	}
	joined := strings.Join(chk.Warnings, "\n")
	for _, want := range []string{"r.ok is never checked", `phase("other") is not listed in meta.phases`} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q: %v", want, chk.Warnings)
		}
	}
}

func TestPlanRetriesWithReasonsAndWarnings(t *testing.T) {
	noOK := "```lua\nmeta = { phases = { { label = \"a\" } } }\nfunction main()\n  local r = agent{ prompt = \"p\" }\n  report(r.output)\nend\n```"
	for _, tc := range []struct {
		name     string
		replies  []string
		calls    int
		wantErr  string
		prompts  []string // substrings of each retry prompt
		accepted string   // substring of the accepted script
	}{
		{name: "first is good", replies: []string{good}, calls: 1, accepted: `phase("a")`},
		{name: "no fence, then good", replies: []string{"I would write a script.", good}, calls: 2,
			prompts: []string{"has no ```lua fenced block"}, accepted: `phase("a")`},
		{name: "warnings go back once", replies: []string{noOK, good}, calls: 2,
			prompts: []string{"is valid, but breaks rules of the skill", "r.ok is never checked"}, accepted: `phase("a")`},
		{name: "revision fails: the valid script stands", replies: []string{noOK, "```lua\nfunction main( \n```"}, calls: 2, accepted: "report(r.output)"},
		{name: "gives up", replies: []string{"```lua\nx = \n```"}, calls: 3, wantErr: "plan: no valid workflow after 3 attempts; the last script was rejected: the script does not compile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scripted{replies: tc.replies}
			p := New(Options{Model: m, Backend: "b", ModelName: "m"})
			plan, err := p.Plan(context.Background(), "do the thing")
			if len(m.got) != tc.calls {
				t.Fatalf("%d model calls, want %d", len(m.got), tc.calls)
			}
			for i, r := range m.got {
				if r.Backend != "b" || r.Model != "m" || r.Class != agent.ClassInteractive || !strings.Contains(r.System, "name: luft-workflows") {
					t.Errorf("request %d: %+v", i, r)
				}
				if m.keys[i] != "plan/"+string(rune('1'+i)) {
					t.Errorf("key %d = %s", i, m.keys[i])
				}
			}
			for _, want := range tc.prompts {
				if !strings.Contains(m.got[1].Prompt, want) {
					t.Errorf("retry prompt lacks %q:\n%s", want, m.got[1].Prompt)
				}
			}
			if tc.wantErr != "" {
				var pe *Error
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.wantErr) || len(pe.Calls) != 3 {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(plan.Script), tc.accepted) || len(plan.Calls) != tc.calls || plan.Planner != "b/m" {
				t.Errorf("plan: %s (%d calls, %s)", plan.Script, len(plan.Calls), plan.Planner)
			}
		})
	}
}

func TestModelFailureStopsAtOnce(t *testing.T) {
	m := &scripted{fail: errors.New("connection refused")}
	_, err := New(Options{Model: m}).Plan(context.Background(), "x")
	if err == nil || !strings.Contains(err.Error(), "the planner's model call failed: connection refused") || len(m.got) != 1 {
		t.Fatalf("err %v after %d calls", err, len(m.got))
	}
	if _, err := New(Options{Model: m}).Plan(context.Background(), "  "); err == nil || !strings.Contains(err.Error(), "the task is empty") {
		t.Fatalf("empty task: %v", err)
	}
}

func TestFixPrompt(t *testing.T) {
	m := &scripted{replies: []string{good}}
	src := []byte("function main()\n  local r = agent{ prompt = \"p\" }\n  error(\"boom\")\nend\n")
	plan, err := New(Options{Model: m}).Fix(context.Background(), Failure{Script: src, Error: "w.lua:3: boom", Line: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Error: w.lua:3: boom", `Failing line 3: error("boom")`, "Keep every agent call that ran before the failing line", `agent{ prompt = "p" }`} {
		if !strings.Contains(m.got[0].Prompt, want) {
			t.Errorf("fix prompt lacks %q:\n%s", want, m.got[0].Prompt)
		}
	}
	if m.keys[0] != "fix/1" || len(plan.Calls) != 1 {
		t.Errorf("keys %v", m.keys)
	}
	if _, err := New(Options{}).Fix(context.Background(), Failure{Script: src}); err == nil || !strings.Contains(err.Error(), "template planner cannot repair") {
		t.Errorf("template fix: %v", err)
	}
}

// The template planner is deterministic and its scripts validate, whatever the task
// holds (quotes, backslashes, newlines, control bytes, long text).
func TestTemplatePlanner(t *testing.T) {
	p := New(Options{})
	for _, task := range []string{
		"audit the repo for security issues",
		"review the storage package",
		`say "hi" \ then ]] --[[ and` + "\nnewline\tand \x01 control",
		strings.Repeat("very long task ", 500),
		"translate the README into Français — ünïcode",
	} {
		plan, err := p.Plan(context.Background(), task)
		if err != nil {
			t.Fatalf("%.40q: %v", task, err)
		}
		if again := TemplateScript(strings.TrimSpace(task)); string(again) != string(plan.Script) {
			t.Errorf("%.40q: not deterministic", task)
		}
		if len(plan.Check.Phases) != 2 || plan.Check.Calls != 4 || len(plan.Check.Warnings) != 0 || plan.Planner != "template" {
			t.Errorf("%.40q: check %+v", task, plan.Check)
		}
	}
	if a := anglesFor("find the security holes"); a[0] != "injection and untrusted input" {
		t.Errorf("security task got %v", a)
	}
}

func TestExtract(t *testing.T) {
	two := "```lua\nlocal helper = 1\n```\ntext\n```lua\nfunction main() end\n```"
	if src, reason := extract(two); reason != "" || !strings.HasPrefix(string(src), "function main") {
		t.Errorf("extract picked %q (%s)", src, reason)
	}
	if _, reason := extract("```python\nprint(1)\n```"); !strings.Contains(reason, "no ```lua fenced block") {
		t.Errorf("reason %q", reason)
	}
}

// A fix that runs is taken even with lint warnings: one model call.
func TestFixIgnoresStyleWarnings(t *testing.T) {
	noMeta := "```lua\nfunction main()\n  local r = agent{ prompt = \"p\" }\n  report(r.output)\nend\n```"
	m := &scripted{replies: []string{noMeta}}
	plan, err := New(Options{Model: m}).Fix(context.Background(), Failure{Script: []byte("function main() error(\"x\") end"), Error: "x"})
	if err != nil || len(m.got) != 1 || len(plan.Check.Warnings) == 0 {
		t.Fatalf("err %v, %d calls, warnings %v", err, len(m.got), plan.Check.Warnings)
	}
}

// A model's reply is hostile input: a script over the compiler's size limit, a huge reply
// without a fenced block, a fence never closed and a script that loops forever in the dry
// run each end in a reason sent back, with a retry prompt that does not carry the huge
// reply, and then in a clear error.
func TestPlanHostileReplies(t *testing.T) {
	hugeScript := "```lua\nfunction main() report(1) end\n--" + strings.Repeat("x", lua.MaxScriptBytes) + "\n```"
	for _, tc := range []struct {
		name, reply, reason string
	}{
		{"script over the size limit", hugeScript, "script too large"},
		{"huge reply without a fence", strings.Repeat("prose ", 4<<20), "has no ```lua fenced block"},
		{"fence never closed", "```lua\nfunction main() report(1) end\n", "has no ```lua fenced block"},
		{"endless loop", "```lua\nfunction main() while true do end end\n```", "longer than the cap of 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &scripted{replies: []string{tc.reply}}
			_, err := New(Options{Model: m, MaxAttempts: 2, Caps: Caps{Time: 100 * time.Millisecond}}).Plan(context.Background(), "do it")
			var pe *Error
			if !errors.As(err, &pe) || len(pe.Calls) != 2 || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err %v, want a plan error after 2 calls with %q", err, tc.reason)
			}
			if n := len(m.got[1].Prompt); n > 64<<10 {
				t.Fatalf("the retry prompt is %d bytes: it carries the hostile reply back to the model", n)
			}
		})
	}
}

// A planned script that builds ever larger tables in its dry run is stopped at the memory
// cap with a reason for the model, before the time cap.
func TestValidateMemoryHog(t *testing.T) {
	src := "function main() local t = {} local s = string.rep('x', 65536) for i = 1, 1e9 do t[i] = s .. i end report(1) end"
	_, err := Validate(context.Background(), []byte(src), Caps{Time: time.Minute, Memory: 64 << 20})
	if err == nil || !strings.Contains(err.Error(), "memory limit (64 MiB) exceeded") {
		t.Fatalf("got %v, want the memory cap", err)
	}
}
