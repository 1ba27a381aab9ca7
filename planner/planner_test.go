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
		if again := TemplateScript(strings.TrimSpace(task), Tools{}); string(again) != string(plan.Script) {
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

// The template planner gives the analyses of a task about the code the read-only file
// tools, run_command only when commands are allowed, and a task about no files none;
// meta.reasoning says which and why.
func TestTemplateTools(t *testing.T) {
	for _, tc := range []struct {
		task  string
		tools Tools
		want  []string
		why   string
	}{
		{"review the storage package", Tools{}, []string{"read_file", "list_dir", "search_files"}, "because the task is about the files of the workspace"},
		{"find flaky tests", Tools{Commands: []string{"go test"}}, []string{"read_file", "list_dir", "search_files", "run_command"}, "run_command for the allowed commands (go test)"},
		{"explain why the sky is blue", Tools{Commands: []string{"go test"}}, nil, "no tools: the task is not about the files of the workspace"},
	} {
		plan, err := New(Options{Tools: tc.tools}).Plan(context.Background(), tc.task)
		if err != nil {
			t.Fatal(err)
		}
		if got := plan.Check.Tools(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: tools %v, want %v", tc.task, got, tc.want)
		}
		if !strings.Contains(plan.Check.Reasons, tc.why) {
			t.Errorf("%s: reasoning %q lacks %q", tc.task, plan.Check.Reasons, tc.why)
		}
		for _, u := range plan.Check.Uses {
			if u.Name == "synthesise" && len(u.Tools) > 0 {
				t.Errorf("%s: the synthesis got tools %v", tc.task, u.Tools)
			}
		}
	}
}

// A planned script is held to the configured tools: one not offered is rejected with the
// reason; a code task without file tools, or tools meta.reasoning is silent on, warn.
func TestCheckTools(t *testing.T) {
	uses := func(tools ...string) Check {
		return Check{Reasons: "r", Uses: []Use{{Name: "a", Tools: tools}}}
	}
	for _, tc := range []struct {
		name, task string
		tools      Tools
		chk        Check
		reason     string
		warning    string
	}{
		{"command not allowed", "x", Tools{}, uses("run_command"), `agent "a" is given tool "run_command", but no commands are allowed here`, ""},
		{"command allowed", "x", Tools{Commands: []string{"make"}}, Check{Reasons: "runs make with run_command", Uses: []Use{{Name: "a", Tools: []string{"run_command"}}}}, "", ""},
		{"writes denied", "x", Tools{Approval: "deny"}, uses("edit_file"), `file writes are refused here`, ""},
		{"unnamed agent", "x", Tools{}, Check{Unnamed: Use{Tools: []string{"run_command"}}}, `an agent without a name is given tool "run_command"`, ""},
		{"unknown", "x", Tools{MCP: []string{"gh"}}, uses("gh__issues", "fetch_url"), `"fetch_url", but it is not a tool luft offers here (tools offered here: read_file, list_dir, search_files, write_file, edit_file, gh__*)`, ""},
		{"code task, no file tools", "review the repo", Tools{}, uses(), "", "no agent is given read_file, list_dir or search_files"},
		{"tools unexplained", "x", Tools{}, uses("read_file"), "", "meta.reasoning does not say which and why"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, warnings := checkTools(tc.task, tc.tools, tc.chk)
			if (tc.reason == "") != (reason == "") || !strings.Contains(reason, tc.reason) {
				t.Errorf("reason %q, want %q", reason, tc.reason)
			}
			if w := strings.Join(warnings, "\n"); (tc.warning == "") != (w == "") || !strings.Contains(w, tc.warning) {
				t.Errorf("warnings %q, want %q", w, tc.warning)
			}
		})
	}
}

// The dry run records what each agent asked for: its schema and tools, by name, and the
// agents without a name together.
func TestValidateRecordsUses(t *testing.T) {
	src := "function main()\n  agent{ name = \"r\", tools = { \"read_file\" }, schema = { type = \"object\" }, prompt = \"p\" }\n" +
		"  agent{ name = \"r\", tools = { \"list_dir\" }, prompt = \"q\" }\n  agent{ tools = { \"run_command\" }, prompt = \"x\" }\n  report(1)\nend\n"
	chk, err := Validate(context.Background(), []byte(src), Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chk.Uses) != 1 || chk.Uses[0].Name != "r" || !chk.Uses[0].Schema || strings.Join(chk.Uses[0].Tools, ",") != "read_file,list_dir" ||
		strings.Join(chk.Unnamed.Tools, ",") != "run_command" || strings.Join(chk.Tools(), ",") != "read_file,list_dir,run_command" {
		t.Fatalf("uses %+v, unnamed %+v", chk.Uses, chk.Unnamed)
	}
}
