package skills_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/skills"
	"github.com/luft-run/luft/storage"
)

// dryRun runs a workflow on the mock backend as luft validate does and returns how it
// ended.
type dryRun struct {
	t   *testing.T
	svc *runtime.Service
}

func newDryRun(t *testing.T) *dryRun {
	t.Helper()
	st, err := storage.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := runtime.New(runtime.Options{Store: st,
		Backends:  adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{})),
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 64}}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return &dryRun{t: t, svc: svc}
}

func (d *dryRun) run(path string, src []byte) runtime.Result {
	d.t.Helper()
	run, err := d.svc.Start(context.Background(), runtime.Spec{Path: path, Source: src, Backend: "mock"})
	if err != nil {
		return runtime.Result{Status: runtime.StatusFailed, Err: err}
	}
	return run.Wait()
}

var luaBlock = regexp.MustCompile("(?s)```lua\n(.*?)```")

// Every ```lua block of the skill is a complete workflow that runs to completion on the
// mock backend (what luft validate checks). A block starting `-- file: PATH` is a helper
// that the other blocks of its page load with workflow(): it is written, not run.
func TestSkillExamplesRunOnMock(t *testing.T) {
	d := newDryRun(t)
	total := 0
	for _, name := range skills.Files() {
		text, err := skills.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		var runs []string
		for _, m := range luaBlock.FindAllStringSubmatch(text, -1) {
			first, _, _ := strings.Cut(m[1], "\n")
			if file, ok := strings.CutPrefix(first, "-- file: "); ok {
				path := filepath.Join(dir, filepath.FromSlash(strings.TrimSpace(file)))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(m[1]), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			runs = append(runs, m[1])
		}
		for i, code := range runs {
			total++
			res := d.run(filepath.Join(dir, "example.lua"), []byte(code))
			if res.Status != runtime.StatusCompleted {
				t.Errorf("%s: lua block %d %s: %v\n%s", name, i+1, res.Status, res.Err, code)
			} else if !res.HasReport {
				t.Errorf("%s: lua block %d never calls report (the skill's rule 2)", name, i+1)
			}
		}
	}
	if total < 12 {
		t.Fatalf("only %d runnable lua blocks in the skill", total)
	}
}

var (
	section   = regexp.MustCompile("^## ([a-z]+)[({]")
	optionRow = regexp.MustCompile("^\\| ((?:`[a-z_]+`(?:, )?)+) \\|")
	codeName  = regexp.MustCompile("`([a-z_]+)`")
)

// options reads references/api.md: for each primitive section, the names in the first
// column of its option table (the result-field table of agent is read apart).
func options(t *testing.T) (opts map[string][]string, resultFields []string, primitives []string) {
	t.Helper()
	text, err := skills.Read("references/api.md")
	if err != nil {
		t.Fatal(err)
	}
	opts = map[string][]string{}
	cur, inResult := "", false
	for _, line := range strings.Split(text, "\n") {
		if m := section.FindStringSubmatch(line); m != nil {
			cur, inResult = m[1], false
			primitives = append(primitives, cur)
			continue
		}
		if strings.HasPrefix(line, "## ") {
			cur = ""
			continue
		}
		if strings.HasPrefix(line, "Result fields") {
			inResult = true
			continue
		}
		m := optionRow.FindStringSubmatch(line)
		if m == nil || cur == "" {
			continue
		}
		for _, n := range codeName.FindAllStringSubmatch(m[1], -1) {
			if inResult {
				resultFields = append(resultFields, n[1])
			} else {
				opts[cur] = append(opts[cur], n[1])
			}
		}
	}
	return opts, resultFields, primitives
}

// sample is a value of the right kind for an option, so that a refusal can only be
// "unknown option" when the option does not exist.
func sample(opt string) string {
	switch opt {
	case "tools":
		return `{}`
	case "schema":
		return `{ type = "object" }`
	case "fail_fast", "adversarial":
		return `true`
	case "vote_threshold", "temperature":
		return `0.5`
	case "max_tokens", "timeout_ms", "retries", "max_concurrency", "max_inflight", "max_rounds",
		"producers_per_item", "adversaries_per_finding":
		return `1`
	case "class":
		return `"batch"`
	case "backend":
		return `"mock"`
	case "producer_prompt", "recheck_prompt", "adversary_prompt":
		return `"check {item}{finding}"`
	}
	return `"x"`
}

// Every primitive and every option the skill names exists: each option is passed to its
// primitive in a real run on the mock backend and is not refused as unknown; every result
// field it lists is in an agent result.
func TestSkillNamesRealAPI(t *testing.T) {
	d := newDryRun(t)
	opts, fields, prims := options(t)
	for _, p := range []string{"agent", "parallel", "pipeline", "converge"} {
		if len(opts[p]) == 0 {
			t.Fatalf("no options read for %s from references/api.md", p)
		}
	}
	if len(fields) < 10 || len(prims) < 10 {
		t.Fatalf("read %d result fields and %d primitives from references/api.md", len(fields), len(prims))
	}
	call := map[string]string{
		"agent":    `agent{ prompt = "p", %s = %s }`,
		"parallel": `parallel({ 1 }, function(x) return x end, { %s = %s })`,
		"pipeline": `pipeline({ 1 }, { function(d) return d end }, { %s = %s })`,
		"converge": `converge({ "a" }, { %s = %s })`,
	}
	for p, names := range opts {
		tmpl, ok := call[p]
		if !ok {
			t.Errorf("the skill lists options for %s, which this test does not know how to call", p)
			continue
		}
		for _, o := range names {
			src := "function main()\n  " + strings.Replace(strings.Replace(tmpl, "%s", o, 1), "%s", sample(o), 1) + "\n  report(1)\nend\n"
			res := d.run("opt.lua", []byte(src))
			if res.Err != nil && strings.Contains(res.Err.Error(), "unknown option") {
				t.Errorf("%s option %s does not exist: %v", p, o, res.Err)
			}
		}
	}
	var checks []string
	for _, p := range append(prims, "print", "pmap", "json.encode", "json.decode", "json.array", "json.is_array", "luft.now", "luft.random", "luft.uuid") {
		checks = append(checks, `assert(type(`+p+`) == "function", "`+p+` is not a function")`)
	}
	for _, f := range fields {
		checks = append(checks, `seen["`+f+`"] = true`)
	}
	src := "function main()\n  local seen = {}\n  " + strings.Join(checks, "\n  ") + `
  local r = agent{ prompt = "p", schema = { type = "object" } }
  local missing = {}
  for f in pairs(seen) do
    -- error, cost and session_id are nil on a successful mock call; the rest are present.
    if r[f] == nil and f ~= "error" and f ~= "cost" and f ~= "session_id" then missing[#missing + 1] = f end
  end
  table.sort(missing)
  report(table.concat(missing, ","))
end
`
	res := d.run("names.lua", []byte(src))
	if res.Status != runtime.StatusCompleted {
		t.Fatalf("primitives check: %s: %v", res.Status, res.Err)
	}
	if res.Report != "" {
		t.Errorf("result fields the skill names but an agent result lacks: %v", res.Report)
	}
}

func TestFrontMatterAndDump(t *testing.T) {
	name, desc, err := skills.FrontMatter()
	if err != nil || name != skills.Name || len(desc) < 40 {
		t.Fatalf("front matter: name %q description %q err %v", name, desc, err)
	}
	dir := t.TempDir()
	root, err := skills.Dump(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range skills.Files() {
		want, _ := skills.Read(f)
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil || string(got) != want {
			t.Errorf("dumped %s differs (%v)", f, err)
		}
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", file} {
		if _, err := skills.Dump(bad); err == nil {
			t.Errorf("Dump(%q) succeeded", bad)
		}
	}
	if !strings.Contains(skills.Text(), "<!-- references/api.md -->") {
		t.Error("Text lacks the references")
	}
}
