package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/storage"
)

const (
	notCompiling  = "```lua\nfunction main(\n  report(1)\nend\n```"
	withoutReport = "Here it is:\n```lua\nmeta = { phases = { { label = \"work\" } } }\nfunction main()\n  phase(\"work\")\n  agent{ name = \"worker\", prompt = \"count the files\" }\nend\n```"
	goodScript    = "```lua\nmeta = { reasoning = \"two steps\", phases = { { label = \"work\", description = \"two agents\" } } }\n" +
		"function main()\n  phase(\"work\")\n  local a = agent{ name = \"first\", prompt = \"count the files\" }\n" +
		"  local b = agent{ name = \"second\", prompt = \"count the folders\" }\n" +
		"  report({ first = a.ok, second = b.ok, done = \"planned run done\" })\nend\n```"
)

// planRecords are the engine's records of requests for model, in arrival order.
func planRecords(e *testkit.Engine, model string) []testkit.Record {
	var out []testkit.Record
	for _, r := range e.Log() {
		if r.Model == model {
			out = append(out, r)
		}
	}
	return out
}

func message(r testkit.Record, role string) string {
	for _, m := range r.Messages {
		if m.Role == role {
			return string(m.Content)
		}
	}
	return ""
}

// The model planner on the fake engine: a script that does not compile, then one that
// never calls report, then a good one. Each rejection goes back to the model with the
// reason; the third script runs to completion on the same endpoint.
func TestPlannerRetriesOnFakeEngine(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{Slots: 4, KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "never calls report()", Reply: goodScript},
		{Match: "does not compile", Reply: withoutReport},
		{Match: "Write a luft workflow", Reply: notCompiling},
	}})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"luft.toml": localBackend(url, "fake-1", "")})
	out, errOut, code := luftIn(t, dir, nil, "--state-dir", filepath.Join(dir, "state"), "run", "--no-tui",
		"count what is in this folder", "--planner-model", "planner-1")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "planned run done") {
		t.Errorf("report missing:\n%s", out)
	}
	for _, want := range []string{"luft: planning with local/planner-1 (up to 3 attempts)", "plan by local/planner-1 (3 attempts, dry run: 2 agent calls)", "1. work — two agents"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	plans := planRecords(engine, "planner-1")
	if len(plans) != 3 {
		t.Fatalf("the planner sent %d requests, want 3", len(plans))
	}
	if sys := message(plans[0], "system"); !strings.Contains(sys, "name: luft-workflows") || !strings.Contains(sys, "## agent(opts)") {
		t.Errorf("the system prompt is not the skill:\n%.300s", sys)
	}
	first, second, third := message(plans[0], "user"), message(plans[1], "user"), message(plans[2], "user")
	if !strings.Contains(first, "Task: count what is in this folder") || strings.Contains(first, "rejected") {
		t.Errorf("first prompt:\n%s", first)
	}
	if !strings.Contains(second, "was rejected: the script does not compile: workflow.lua:") || !strings.Contains(second, "function main(\n  report(1)") {
		t.Errorf("second prompt lacks the compile error and the previous script:\n%s", second)
	}
	if !strings.Contains(third, "was rejected: main() never calls report()") || !strings.Contains(third, `count the files`) {
		t.Errorf("third prompt lacks the missing-report reason and the previous script:\n%s", third)
	}
	if agents := planRecords(engine, "fake-1"); len(agents) != 2 {
		t.Errorf("the planned run made %d agent requests, want 2", len(agents))
	}
	// The plan calls are journaled with the run: the rejected ones with their reasons.
	st, err := storage.Open(context.Background(), filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runs, err := st.ListRuns(context.Background(), storage.ListOptions{Limit: 5})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs %v (%v)", runs, err)
	}
	entries, err := st.Journal(context.Background(), runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range entries {
		if e.Kind == "plan" {
			reasons = append(reasons, e.CallKey+": "+string(e.Result))
		}
	}
	if len(reasons) != 3 || !strings.Contains(reasons[0], "does not compile") || !strings.Contains(reasons[1], "never calls report") ||
		!strings.Contains(reasons[2], `"reason":""`) {
		t.Errorf("journaled plan calls:\n%s", strings.Join(reasons, "\n"))
	}
}

// Three rejected scripts: the plan fails with the last reason, before any agent runs. It
// is recorded as a failed run with its three attempts journaled and their tokens and cost
// as its own (docs/cli.md: the plan is journaled with the run); it has nothing to resume.
func TestPlannerGivesUp(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{{Reply: notCompiling}}})
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	// planner_model of the config, as BACKEND/MODEL, picks the planner here.
	writeFiles(t, dir, map[string]string{"luft.toml": "planner_model = \"local/planner-1\"\n" +
		localBackend(url, "fake-1", "price_input_per_mtok = 1000.0\nprice_output_per_mtok = 2000.0\n")})
	out, errOut, code := luftIn(t, dir, nil, "--state-dir", state, "run", "--no-tui", "do something")
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitFailed, errOut)
	}
	want := "plan: no valid workflow after 3 attempts; the last script was rejected: the script does not compile: workflow.lua:2"
	if !strings.Contains(errOut, want) || out != "" {
		t.Errorf("stderr lacks %q (stdout %q):\n%s", want, out, errOut)
	}
	if n := len(planRecords(engine, "planner-1")); n != 3 {
		t.Errorf("%d planner requests, want 3", n)
	}
	if n := len(planRecords(engine, "fake-1")); n != 0 {
		t.Errorf("%d agent requests, want none", n)
	}

	st, err := storage.Open(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := st.ListRuns(context.Background(), storage.ListOptions{})
	if err != nil || len(runs) != 1 {
		st.Close()
		t.Fatalf("runs %v (%v), want the failed plan's run", runs, err)
	}
	run := runs[0]
	entries, err := st.Journal(context.Background(), run.ID)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	var usage storage.Usage
	var plans int
	for _, e := range entries {
		if e.Kind == "plan" {
			plans++
			usage.Input, usage.Output, usage.Cached = usage.Input+e.Usage.Input, usage.Output+e.Usage.Output, usage.Cached+e.Usage.Cached
		}
	}
	wantCost := float64(usage.Input)*1000/1e6 + float64(usage.Output)*2000/1e6
	if run.Status != storage.StatusFailed || !strings.Contains(run.Error, want) || plans != 3 || usage.Output == 0 ||
		run.Usage != usage || run.Cost < wantCost*0.999 || run.Cost > wantCost*1.001 {
		t.Errorf("run %s: status %s, error %q, %d plan entries, usage %+v (journal %+v), cost %g (want %g)",
			run.ID, run.Status, run.Error, plans, run.Usage, usage, run.Cost, wantCost)
	}
	for _, want := range []string{"luft: run " + run.ID + " failed in planning: 3 attempts, ", "luft status " + run.ID[:13] + " --state-dir " + state + " shows them", "run " + run.ID + ": plan: no valid workflow"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	status := mustLuft(t, dir, nil, "--state-dir", state, "status", run.ID)
	for _, want := range []string{"failed", fmt.Sprintf("$%.4f", run.Cost), "no valid workflow after 3 attempts"} {
		if !strings.Contains(status, want) {
			t.Errorf("luft status lacks %q:\n%s", want, status)
		}
	}
	if strings.Contains(status, "resume") {
		t.Errorf("luft status offers to resume a run with no script:\n%s", status)
	}
	list := mustLuft(t, dir, nil, "--state-dir", state, "list")
	if !strings.Contains(list, "failed") || !strings.Contains(list, "plan: do something") {
		t.Errorf("luft list:\n%s", list)
	}
	_, errOut, code = luftIn(t, dir, nil, "--state-dir", state, "run", "--resume", run.ID)
	if code != exitUsage || !strings.Contains(errOut, "its planning found no valid workflow, so it has no script to run") {
		t.Errorf("resume: exit %d\n%s", code, errOut)
	}
	if _, errOut, code = luftIn(t, dir, nil, "--state-dir", state, "run", "--resume"); code != exitUsage || !strings.Contains(errOut, "no unfinished run to resume") {
		t.Errorf("resume of the newest: exit %d\n%s", code, errOut)
	}
}

// --auto-fix: a script fails after five successful calls; the planner's fix keeps them,
// and the same run continues with it: the five replay from the journal, so the endpoint
// sees no new request for them.
func TestAutoFixReplaysFinishedCalls(t *testing.T) {
	const calls = `function main()
  local got = {}
  for i = 1, 5 do
    local r = agent{ name = "step " .. i, prompt = "work on part " .. i }
    got[#got + 1] = r.ok
  end
`
	bug := calls + "  local missing = nil\n  report({ n = #got, first = missing.value })\nend\n"
	fixed := "```lua\n" + calls + "  report({ n = #got, fixed = \"repaired\" })\nend\n```"
	engine, _, url := startEngine(t, testkit.Config{Slots: 4, KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "failed while running", Reply: fixed},
	}})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"luft.toml": localBackend(url, "fake-1", ""), "bug.lua": bug})
	state := filepath.Join(dir, "state")
	out, errOut, code := luftIn(t, dir, nil, "--state-dir", state, "run", "--no-tui", "-w", "bug.lua", "--auto-fix", "--planner-model", "planner-1", "--log", "run.jsonl")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `"fixed": "repaired"`) || !strings.Contains(out, `"n": 5`) {
		t.Errorf("report of the fixed script missing:\n%s", out)
	}
	if n := len(planRecords(engine, "fake-1")); n != 5 {
		t.Errorf("the endpoint saw %d agent requests, want 5 (the fix must replay the five from the journal)", n)
	}
	fixes := planRecords(engine, "planner-1")
	if len(fixes) != 1 {
		t.Fatalf("%d fix requests, want 1", len(fixes))
	}
	prompt := message(fixes[0], "user")
	for _, want := range []string{"bug.lua:8", "Failing line 8: report({ n = #got, first = missing.value })", "local missing = nil"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("the fix prompt lacks %q:\n%s", want, prompt)
		}
	}
	for _, want := range []string{"auto-fix 1/2: asking local/planner-1", "autofix-1.lua; continuing run", "5 cached"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	// --log holds both attempts: the failed one and the fixed one, each ending with run_done.
	log := readFile(t, filepath.Join(dir, "run.jsonl"))
	if n := strings.Count(log, `"type":"run_done"`); n != 2 || !strings.Contains(log, `"status":"failed"`) || !strings.Contains(log, `"status":"completed"`) {
		t.Errorf("--log has %d run_done events:\n%s", n, log)
	}
	matches, _ := filepath.Glob(filepath.Join(state, "runs", "*", "autofix-1.lua"))
	if len(matches) != 1 {
		t.Errorf("the fixed script is not saved in the run's folder (%v)", matches)
	}
}

// toolResults are the tool results luft sent the engine for model's requests.
func toolResults(e *testkit.Engine, model string) []string {
	var out []string
	for _, r := range planRecords(e, model) {
		for _, m := range r.Messages {
			if m.Role == "tool" {
				out = append(out, string(m.Content))
			}
		}
	}
	return out
}

// A planned repo review reads the repository: the fake model calls read_file whenever it
// is offered it, and the planner, template and model alike, gives the reviewers the
// read-only file tools, so the code reaches the model. The model planner is told which
// tools are configured, and a script giving an agent run_command with no commands allowed
// goes back to it.
func TestPlannedReviewReadsFiles(t *testing.T) {
	const marker = "token == provided // MARKER: compares secrets in non-constant time"
	readAuth := []testkit.ScriptedCall{{Name: "read_file", Arguments: `{"path": "auth.go"}`}}
	files := func(url string) map[string]string {
		return map[string]string{"luft.toml": localBackend(url, "fake-1", ""), "auth.go": "package auth\n\nfunc ok(token, provided string) bool { return " + marker + "\n}\n"}
	}

	t.Run("template", func(t *testing.T) {
		engine, _, url := startEngine(t, testkit.Config{Slots: 4, KeepRequests: true, ToolRules: []testkit.ToolRule{
			{Match: "from one angle only", Calls: readAuth, Offered: true},
		}})
		dir := t.TempDir()
		writeFiles(t, dir, files(url))
		_, errOut, code := luftIn(t, dir, nil, "--state-dir", filepath.Join(dir, "state"), "run", "--no-tui",
			"review this repo for security issues", "--planner-model", "mock/template")
		if code != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
		}
		for _, want := range []string{"run on the local backend", "  tools: read_file, list_dir, search_files (3 of 4 agents)",
			"the analyses get read_file, list_dir, search_files (read-only) because the task is about the files of the workspace"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
		if got := toolResults(engine, "fake-1"); len(got) != 3 || !strings.Contains(got[0], marker) {
			t.Errorf("the three analyses read %d files, want 3 reads of auth.go: %q", len(got), got)
		}
	})

	t.Run("model", func(t *testing.T) {
		const review = "meta = { reasoning = %q, phases = { { label = \"review\", description = \"read and review\" } } }\n" +
			"function main()\n  phase(\"review\")\n  local r = agent{ name = \"reviewer\", tools = { %s },\n" +
			"    prompt = \"Review auth.go for security issues; read it first.\" }\n" +
			"  report({ markdown = r.ok and r.output or r.error })\nend\n"
		withCommand := "```lua\n" + fmt.Sprintf(review, "the reviewer reads with read_file and runs tests with run_command", `"read_file", "run_command"`) + "```"
		good := "```lua\n" + fmt.Sprintf(review, "one reviewer reads the code with read_file, list_dir and search_files", `"read_file", "list_dir", "search_files"`) + "```"
		engine, _, url := startEngine(t, testkit.Config{Slots: 4, KeepRequests: true, ToolRules: []testkit.ToolRule{
			{Match: "no commands are allowed here", Reply: good},
			{Match: "Write a luft workflow", Reply: withCommand},
			{Match: "Review auth.go", Calls: readAuth, Offered: true, Reply: "auth.go compares the token in non-constant time."},
		}})
		dir := t.TempDir()
		writeFiles(t, dir, files(url))
		out, errOut, code := luftIn(t, dir, nil, "--state-dir", filepath.Join(dir, "state"), "run", "--no-tui",
			"review this repo for security issues", "--planner-model", "planner-1")
		if code != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", code, errOut)
		}
		plans := planRecords(engine, "planner-1")
		if len(plans) != 2 {
			t.Fatalf("%d planner requests, want 2", len(plans))
		}
		first, second := message(plans[0], "user"), message(plans[1], "user")
		for _, want := range []string{"- read_file, list_dir, search_files: read-only, on the workspace",
			"- run_command: not available (no commands are allowed, [tools] allow_commands is empty)",
			"say in meta.reasoning which tools you gave and why"} {
			if !strings.Contains(first, want) {
				t.Errorf("the plan prompt lacks %q:\n%s", want, first)
			}
		}
		if want := `agent "reviewer" is given tool "run_command", but no commands are allowed here`; !strings.Contains(second, want) {
			t.Errorf("the retry prompt lacks %q:\n%s", want, second)
		}
		if !strings.Contains(errOut, "  tools: read_file, list_dir, search_files (1 of 1 agent)") {
			t.Errorf("stderr lacks the plan's tools:\n%s", errOut)
		}
		if got := toolResults(engine, "fake-1"); len(got) != 1 || !strings.Contains(got[0], marker) {
			t.Errorf("the reviewer read %q, want auth.go", got)
		}
		if !strings.Contains(out, "non-constant time") {
			t.Errorf("report:\n%s", out)
		}
	})
}

// A Ctrl-C while a task in words is being planned stops the planning at once, before
// the planner's model answers: exit 3 with the reason, and no run is recorded.
func TestInterruptWhilePlanning(t *testing.T) {
	t.Parallel()
	engine, _, url := startEngine(t, testkit.Config{Slots: 4, PrefillOverhead: time.Hour})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"luft.toml": localBackend(url, "fake-1", "")})
	state := filepath.Join(dir, "state")
	p := startLuftIn(t, dir, nil, "--state-dir", state, "run", "--no-tui", "count what is in this folder", "--planner-model", "planner-1")
	p.waitStderr("luft: planning with local/planner-1")
	p.signal(os.Interrupt)
	if code := p.exitCode(); code != exitResumable {
		t.Fatalf("exit %d after one Ctrl-C while planning, want %d\nstderr:\n%s", code, exitResumable, p.err.text())
	}
	if errOut := p.err.text(); !strings.Contains(errOut, "interrupted while planning: no run was started or recorded (run the task again)") {
		t.Errorf("stderr does not say planning was interrupted:\n%s", errOut)
	}
	st, err := storage.Open(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if runs, err := st.ListRuns(context.Background(), storage.ListOptions{Limit: 5}); err != nil || len(runs) != 0 {
		t.Errorf("runs after an interrupted plan: %v (%v), want none", runs, err)
	}
	for _, r := range engine.Log() {
		if r.Model == "fake-1" {
			t.Errorf("an agent request reached the engine after the plan was interrupted: %+v", r)
		}
	}
}
