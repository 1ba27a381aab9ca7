package planner

import (
	"fmt"
	"slices"
	"strings"
)

// lens is a set of angles the template planner analyses a task from.
type lens struct {
	words  []string // any of these in the task picks the lens
	angles []string
}

// lenses are tried in order; the first whose words appear in the task wins.
var lenses = []lens{
	{[]string{"security", "vulnerab", "audit", "secret", "cve", "exploit"},
		[]string{"injection and untrusted input", "authentication, authorisation and secrets", "dependencies and configuration"}},
	{[]string{"test", "coverage", "flaky"},
		[]string{"what is tested and what is not", "test quality and flakiness", "missing edge cases"}},
	{[]string{"perf", "slow", "latency", "memory", "speed"},
		[]string{"hot paths and algorithms", "allocation and memory", "I/O and concurrency"}},
	{[]string{"review", "refactor", "code", "repo", "bug"},
		[]string{"correctness and bugs", "design and readability", "tests and error handling"}},
	{[]string{"research", "compare", "explain", "why", "how", "what"},
		[]string{"key facts and definitions", "trade-offs and alternatives", "open questions and risks"}},
}

var defaultAngles = []string{"what the task involves", "risks and pitfalls", "concrete recommendations"}

// anglesFor picks the analyses of the template plan for task.
func anglesFor(task string) []string {
	t := strings.ToLower(task)
	for _, l := range lenses {
		for _, w := range l.words {
			if strings.Contains(t, w) {
				return l.angles
			}
		}
	}
	return defaultAngles
}

// templateTools picks the tools of the template plan's analyses for task, and says why.
func templateTools(task string, t Tools) (names []string, why string) {
	if !aboutCode(task) {
		return nil, "no tools: the task is not about the files of the workspace"
	}
	names = slices.Clone(readTools)
	why = "the analyses get " + strings.Join(readTools, ", ") + " (read-only) because the task is about the files of the workspace (" + t.workspace() + ")"
	if len(t.Commands) > 0 {
		names = append(names, "run_command")
		why += ", and run_command for the allowed commands (" + strings.Join(t.Commands, "; ") + ")"
	}
	return names, why + "; the synthesis gets none"
}

// TemplateScript is the offline plan for task: one analysis per angle in parallel, each
// with a schema, then a synthesis into a markdown report. Analyses of a task about the
// code get the read-only file tools (and run_command when t allows commands); meta.reasoning
// says which and why. The same task and tools give the same script, byte for byte.
func TemplateScript(task string, t Tools) []byte {
	angles := anglesFor(task)
	quoted := make([]string, len(angles))
	for i, a := range angles {
		quoted[i] = luaString(a)
	}
	names, why := templateTools(task, t)
	toolList, toolUse := "nil", ""
	if len(names) > 0 {
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = luaString(n)
		}
		toolList = "{ " + strings.Join(q, ", ") + " }"
		toolUse = "Read the files of the workspace with your tools (list_dir, search_files, read_file) before you answer, and base every point on what you read. "
		if slices.Contains(names, "run_command") {
			toolUse += "Where running one helps, run_command runs these commands: " + strings.Join(t.Commands, "; ") + ". "
		}
	}
	return fmt.Appendf(nil, `-- Planned offline by luft's template planner for the task:
--   %s
meta = {
  reasoning = %s,
  phases = {
    { label = "analyse", description = "one agent per angle, in parallel" },
    { label = "synthesise", description = "merge the analyses into one report" },
  },
}

local task = %s
local angles = { %s }
local tools = %s

local notes_schema = {
  type = "object",
  properties = {
    summary = { type = "string" },
    points = { type = "array", maxItems = 10, items = { type = "string" } },
  },
  required = { "summary", "points" },
}

function main()
  phase("analyse", #angles)
  local results = parallel(angles, function(angle)
    return agent{
      name = "analyse " .. angle,
      schema = notes_schema,
      tools = tools,
      prompt = "Task: " .. task .. "\n\nWork on this task from one angle only: " .. angle ..
        ". %sGive a one-paragraph summary and at most 10 concrete points (name files, lines or sources where you can).",
    }
  end, { max_concurrency = %d })

  local sections, failed = {}, 0
  for i, r in ipairs(results) do
    if r.ok then
      local lines = { "## " .. angles[i], "", r.output.summary, "" }
      for _, p in ipairs(r.output.points) do lines[#lines + 1] = "- " .. p end
      sections[#sections + 1] = table.concat(lines, "\n")
    else
      failed = failed + 1
      sections[#sections + 1] = "## " .. angles[i] .. "\n\n(analysis failed: " .. tostring(r.error) .. ")"
    end
  end

  phase("synthesise", 1)
  local s = agent{
    name = "synthesise",
    prompt = "Task: " .. task .. "\n\nMerge these analyses into a short prioritised answer to the task:\n\n" ..
      table.concat(sections, "\n\n"),
  }
  local summary = s.ok and s.output or ("(synthesis failed: " .. tostring(s.error) .. ")")
  report({
    markdown = "# " .. task .. "\n\n" .. summary .. "\n\n" .. table.concat(sections, "\n\n") .. "\n",
    analyses = #angles,
    failed = failed,
  })
end
`, oneLine(task), luaString(fmt.Sprintf("template plan: %d independent analyses in parallel, then one synthesis; %s", len(angles), why)),
		luaString(task), strings.Join(quoted, ", "), toolList, toolUse, len(angles))
}

// oneLine keeps a task on one comment line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// luaString quotes s as a Lua 5.1 string literal: quotes, backslashes and control
// characters escaped (as \ddd), other bytes as they are.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\%03d`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
