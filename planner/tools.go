package planner

import (
	"fmt"
	"slices"
	"strings"
)

// The built-in tools an agent may be given (package adapters/tools).
var (
	readTools  = []string{"read_file", "list_dir", "search_files"}
	writeTools = []string{"write_file", "edit_file"}
)

// Tools are what the configuration lets a planned workflow give its agents ([tools] and
// [mcp_servers] of luft.toml). The zero value offers the read-only file tools on the
// working directory and the file writes under the default approval policy, no commands
// and no MCP servers.
type Tools struct {
	// Workspace is the folder the file tools work in ("" = the working directory).
	Workspace string
	// Commands are [tools] allow_commands; run_command is offered only when there are some.
	Commands []string
	// Approval is [tools] approval ("" = ask): under "deny" the file writes are not offered.
	Approval string
	// MCP are the [mcp_servers] names; their tools are SERVER__tool.
	MCP []string
}

// Available says whether an agent of a planned workflow may be given tool name, and when
// not, why, in words fit to send back to the model.
func (t Tools) Available(name string) (bool, string) {
	switch {
	case slices.Contains(readTools, name):
		return true, ""
	case slices.Contains(writeTools, name):
		if t.Approval == "deny" {
			return false, "file writes are refused here ([tools] approval = \"deny\")"
		}
		return true, ""
	case name == "run_command":
		if len(t.Commands) == 0 {
			return false, "no commands are allowed here ([tools] allow_commands is empty)"
		}
		return true, ""
	}
	if server, _, ok := strings.Cut(name, "__"); ok && slices.Contains(t.MCP, server) {
		return true, ""
	}
	return false, "it is not a tool luft offers here"
}

// names lists the tools t offers, for messages (MCP tools as SERVER__*).
func (t Tools) names() []string {
	out := slices.Clone(readTools)
	if ok, _ := t.Available("write_file"); ok {
		out = append(out, writeTools...)
	}
	if len(t.Commands) > 0 {
		out = append(out, "run_command")
	}
	for _, s := range t.MCP {
		out = append(out, s+"__*")
	}
	return out
}

func (t Tools) workspace() string {
	if t.Workspace == "" {
		return "the working directory"
	}
	return t.Workspace
}

// prompt tells the model planner which tools it may give agents and when.
func (t Tools) prompt() string {
	var b strings.Builder
	b.WriteString("Tools the agents may be given here (agent{ tools = { ... } }), from luft's configuration:\n")
	fmt.Fprintf(&b, "- read_file, list_dir, search_files: read-only, on the workspace (%s). Give them to every agent whose work needs the code or other files: an agent without them never sees a file, whatever its prompt says.\n", t.workspace())
	switch t.Approval {
	case "deny":
		b.WriteString("- write_file, edit_file: not available (file writes are refused, [tools] approval = \"deny\").\n")
	case "allow":
		b.WriteString("- write_file, edit_file: change files in the workspace, without asking. Only for agents whose task is to change files.\n")
	default:
		b.WriteString("- write_file, edit_file: change files in the workspace; each write waits for the user's yes. Only for agents whose task is to change files.\n")
	}
	if len(t.Commands) > 0 {
		fmt.Fprintf(&b, "- run_command: runs only these commands (and their arguments): %s.\n", strings.Join(t.Commands, "; "))
	} else {
		b.WriteString("- run_command: not available (no commands are allowed, [tools] allow_commands is empty).\n")
	}
	for _, s := range t.MCP {
		fmt.Fprintf(&b, "- %s__TOOL: the tools of the MCP server %q.\n", s, s)
	}
	b.WriteString("Give each agent only the tools its work needs, and say in meta.reasoning which tools you gave and why.")
	return b.String()
}

// codeWords in a task mean it is about the files of the workspace.
var codeWords = []string{"repo", "code", "review", "refactor", "bug", "security", "vulnerab", "audit", "secret",
	"test", "coverage", "flaky", "perf", "slow", "latency", "memory", "file", "folder", "director", "package",
	"module", "function", "project", "docs", "readme", "source", "config", "dependenc", "build", "lint"}

// aboutCode reports whether task is about the files of the workspace.
func aboutCode(task string) bool {
	t := strings.ToLower(task)
	return slices.ContainsFunc(codeWords, func(w string) bool { return strings.Contains(t, w) })
}

// checkTools holds a planned script's tools against what is configured: a tool not
// offered here is a reason to reject the script; a task about the code whose agents get
// no file tool, or tools that meta.reasoning does not account for, are warnings.
func checkTools(task string, t Tools, chk Check) (reason string, warnings []string) {
	var bad []string
	for _, u := range append(slices.Clone(chk.Uses), chk.Unnamed) {
		who := fmt.Sprintf("agent %q", u.Name)
		if u.Name == "" {
			who = "an agent without a name"
		}
		for _, name := range u.Tools {
			if ok, why := t.Available(name); !ok {
				bad = append(bad, fmt.Sprintf("%s is given tool %q, but %s", who, name, why))
			}
		}
	}
	if len(bad) > 0 {
		return strings.Join(bad, "; ") + " (tools offered here: " + strings.Join(t.names(), ", ") + ")", nil
	}
	given := chk.Tools()
	if aboutCode(task) && !slices.ContainsFunc(given, func(n string) bool { return slices.Contains(readTools, n) }) {
		warnings = append(warnings, "the task is about the files of the workspace, but no agent is given read_file, list_dir or search_files: without them the agents never see a file")
	}
	if len(given) > 0 && !slices.ContainsFunc(given, func(n string) bool { return strings.Contains(chk.Reasons, n) }) {
		warnings = append(warnings, "agents are given tools ("+strings.Join(given, ", ")+"), but meta.reasoning does not say which and why")
	}
	return "", warnings
}
