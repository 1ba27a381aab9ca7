package agentinstall

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Agent names, as --agent takes them.
const (
	Claude   = "claude"
	Codex    = "codex"
	OpenCode = "opencode"
	Gemini   = "gemini"
)

// Agents are the coding agents luft registers with, in the order it reports them.
var Agents = []string{Claude, Codex, OpenCode, Gemini}

// agent is where one coding agent keeps its MCP servers and skills, and how to tell it is
// installed.
type agent struct {
	name    string
	config  string     // the config file luft edits
	json    *jsonEntry // set for a JSON config
	toml    *tomlEntry // set for a TOML config
	skills  string     // the folder of skill folders the agent reads
	marks   []string   // paths whose existence says the agent is installed
	program string     // its executable's name on PATH
}

// agentsFor lays out the four agents for a home folder, honouring each agent's own
// variables for moving its config (CLAUDE_CONFIG_DIR, CODEX_HOME, XDG_CONFIG_HOME).
func agentsFor(home string, getenv func(string) string, binary string) []*agent {
	args := []string{"mcp", "serve"}
	claudeDir := filepath.Join(home, ".claude")
	claudeFile := filepath.Join(home, ".claude.json")
	if d := getenv("CLAUDE_CONFIG_DIR"); d != "" {
		claudeDir, claudeFile = d, filepath.Join(d, ".claude.json")
	}
	codexDir := filepath.Join(home, ".codex")
	if d := getenv("CODEX_HOME"); d != "" {
		codexDir = d
	}
	xdg := getenv("XDG_CONFIG_HOME")
	if xdg == "" {
		xdg = filepath.Join(home, ".config")
	}
	openDir := filepath.Join(xdg, "opencode")
	geminiDir := filepath.Join(home, ".gemini")
	shared := filepath.Join(home, ".agents", "skills")
	return []*agent{{
		name:   Claude,
		config: claudeFile,
		json: &jsonEntry{container: "mcpServers", fields: object{
			{key: "type", raw: marshalValue("stdio")},
			{key: "command", raw: marshalValue(binary)},
			{key: "args", raw: marshalValue(args)},
		}},
		skills:  filepath.Join(claudeDir, "skills"),
		marks:   []string{claudeDir, claudeFile},
		program: "claude",
	}, {
		name:    Codex,
		config:  filepath.Join(codexDir, "config.toml"),
		toml:    &tomlEntry{table: []string{"mcp_servers", "luft"}, command: binary, args: args, tools: codexTools},
		skills:  shared,
		marks:   []string{codexDir},
		program: "codex",
	}, {
		name:   OpenCode,
		config: filepath.Join(openDir, "opencode.json"),
		json: &jsonEntry{container: "mcp", fields: object{
			{key: "type", raw: marshalValue("local")},
			{key: "command", raw: marshalValue(append([]string{binary}, args...))},
			{key: "enabled", raw: marshalValue(true)},
		}},
		skills:  shared,
		marks:   []string{openDir},
		program: "opencode",
	}, {
		name:   Gemini,
		config: filepath.Join(geminiDir, "settings.json"),
		json: &jsonEntry{container: "mcpServers", fields: object{
			{key: "command", raw: marshalValue(binary)},
			{key: "args", raw: marshalValue(args)},
		}},
		// Gemini CLI reads ~/.agents/skills as an alias of ~/.gemini/skills and warns
		// about a skill found in both, so it shares the folder of Codex and OpenCode.
		skills:  shared,
		marks:   []string{geminiDir},
		program: "gemini",
	}}
}

// detected says why the agent counts as installed ("" when it does not).
func (a *agent) detected(getenv func(string) string) string {
	for _, m := range a.marks {
		if _, err := os.Stat(m); err == nil {
			return m
		}
	}
	if p := lookPath(a.program, getenv("PATH")); p != "" {
		return p
	}
	return ""
}

// lookPath finds an executable named name in the PATH given (not the process's own, so
// tests can set it).
func lookPath(name, path string) string {
	names := []string{name}
	if runtime.GOOS == "windows" { // npm installs .cmd shims there; no execute bits
		names = []string{name + ".exe", name + ".cmd"}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // a relative PATH entry depends on where luft runs; agents do not
		}
		for _, n := range names {
			p := filepath.Join(dir, n)
			st, err := os.Stat(p)
			if err == nil && st.Mode().IsRegular() && (runtime.GOOS == "windows" || st.Mode().Perm()&0o111 != 0) {
				return p
			}
		}
	}
	return ""
}

// notFoundWhere lists where the agent was looked for, for the note on an agent named
// with --agent that is not installed.
func (a *agent) notFoundWhere() string {
	return "no " + strings.Join(a.marks, ", no ") + ", no " + a.program + " on PATH"
}

// codexTools are the per-tool settings luft writes for Codex. Codex asks before every MCP
// tool call that is not marked read-only, and `codex exec`, which cannot ask, refuses
// them: luft's tools that start work (spawn, run, workflow_execute) would only run with
// --dangerously-bypass-approvals-and-sandbox. approval_mode = "approve" lets them run.
// The tools that end or decide something — cancel, workflow_cancel, and approve (a
// sub-agent's destructive call) — stay Codex's to ask about: the model must not approve
// its own sub-agents' calls.
var codexTools = map[string]map[string]string{
	"spawn":            {"approval_mode": "approve"},
	"run":              {"approval_mode": "approve"},
	"workflow_execute": {"approval_mode": "approve"},
}
