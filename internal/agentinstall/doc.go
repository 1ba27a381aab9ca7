// Package agentinstall registers `luft mcp serve` with the coding agents people run luft
// from, and installs luft's workflow-authoring skill where each of them reads skills
// (`luft install`).
//
// Each agent keeps MCP servers in its own file and format:
//
//	Claude Code  ~/.claude.json (or $CLAUDE_CONFIG_DIR/.claude.json)  mcpServers.luft {type, command, args}
//	Codex        ~/.codex/config.toml (or $CODEX_HOME)                 [mcp_servers.luft] command, args
//	OpenCode     $XDG_CONFIG_HOME/opencode/opencode.json               mcp.luft {type: "local", command, enabled}
//	Gemini CLI   ~/.gemini/settings.json                               mcpServers.luft {command, args}
//
// and the skill goes to <folder>/luft-workflows/ in ~/.claude/skills (Claude Code) or
// ~/.agents/skills (Codex, OpenCode and Gemini CLI all read it; Gemini CLI as an alias of
// ~/.gemini/skills).
//
// The rules, in the order they protect the user's files:
//   - Read and check everything first; a config luft cannot edit safely (malformed, a
//     dangling symlink, read-only, not a regular file, too large) stops the whole run
//     with nothing written and says what to add by hand.
//   - Touch only luft's entry. JSON keeps every other key, its order and the bytes of every
//     value luft does not own; TOML is edited as text (only the lines of [mcp_servers.luft])
//     and the result is parsed and compared with the original before it is written.
//   - Back up every config file before changing it (FILE.luft-backup-<UTC time>), write
//     through a temporary file and a rename, and write through a symlink to its target.
//   - Be idempotent: a second run finds nothing to change and says so; --uninstall
//     removes luft's entry (and its container when nothing else is left in it) and the
//     skill's files, keeping a shared skill folder another agent still uses.
package agentinstall
