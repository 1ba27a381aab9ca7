// Package acp is the acp:* backend: a coding agent (Claude Code, Codex, opencode, Gemini
// CLI, or any command that speaks the Agent Client Protocol on stdin/stdout) run as a
// subprocess and spoken to through github.com/coder/acp-go-sdk (SPEC §6).
//
// # Built-in agents
//
// Builtin knows the usual commands; configuration can name any other.
//
//	acp:claude    claude-code-acp             npm i -g @zed-industries/claude-code-acp
//	acp:codex     codex-acp                   npm i -g @zed-industries/codex-acp
//	acp:opencode  opencode acp                npm i -g opencode-ai
//	acp:gemini    gemini --acp                npm i -g @google/gemini-cli
//
// Each agent logs in with its own CLI; luft never handles its credentials. An agent that
// answers "authentication required" fails the call with a message saying so.
//
// # Environment
//
// An agent does not inherit luft's environment, which may hold keys for other services
// (luft's own OPENAI_API_KEY, cloud credentials, tokens). It gets tools.BaseEnv (PATH,
// HOME, USER, LOGNAME, LANG, LC_*, TERM, TZ, TMPDIR), AgentBaseEnv (XDG_* folders,
// HTTP(S)_PROXY/NO_PROXY, NODE_EXTRA_CA_CERTS, SSL_CERT_FILE/DIR), the variables its
// own login reads, and what its [backends.NAME] env list names:
//
//	acp:claude    ANTHROPIC_*, CLAUDE_*
//	acp:codex     OPENAI_API_KEY, OPENAI_BASE_URL, CODEX_*
//	acp:opencode  OPENCODE_*
//	acp:gemini    GEMINI_*, GOOGLE_API_KEY, GOOGLE_CLOUD_*, GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_GENAI_USE_VERTEXAI
//
// An agent that logs in through a file under HOME (claude login, codex login) needs
// nothing more; one that takes a provider's key from the environment (opencode with
// ANTHROPIC_API_KEY, claude on Bedrock with AWS_*) gets it by naming it in env. The
// agent runs its own tools in its own process, which luft cannot confine with the
// kernel as it does run_command: what it may do is the permission policy below.
//
// # One call
//
// Every call spawns the agent afresh (its stderr kept, bounded, for error messages),
// initializes ACP (protocol version 1; the client offers fs/read_text_file and
// fs/write_text_file confined to the workspace, and no terminal), opens a session whose
// cwd is the workspace — or, when the request carries session_id, loads that session
// (session/load; an agent that does not advertise loadSession cannot resume, and the call
// says so) — selects the model when the request or the configuration names one (an agent
// that offers no model selection, or not that model, fails the call rather than
// silently running another model), sends the prompt and collects the reply. The system
// prompt and the prompt go as text blocks; with a schema a third block asks for only a
// JSON value matching it and carries the schema, and the JSON is taken from the reply: the
// whole text, else a ```json fenced block, else the first complete {...} or [...] in it.
// When none parses, Output is the text and the runtime's schema retry takes over.
//
// A coding agent runs its own loop — many model requests, tool calls, edits — that luft
// cannot see into, so the whole prompt is admitted through the scheduler as one turn
// (one call.Do). Its cost estimate is the prompt's length; the agent's real usage is
// unknown. ACP reports usage only optionally: when the prompt response carries it, it
// is used, otherwise usage is estimated from text length (four bytes a token: the
// prompt's blocks in, the reply out), so token displays and budgets stay approximate.
//
// Progress: agent_message_chunk → "text", agent_thought_chunk → "thought", tool_call and
// tool_call_update → "tool_call" (a short "title [kind] status" line), every diff a tool
// call carries → "edit" (the path), and each permission decision → "tool_call". History
// that session/load replays is neither reported nor part of the reply.
//
// Ending a call: when ctx is done, or no message has come from the agent for IdleTimeout
// (default five minutes), the client sends session/cancel, waits briefly for the agent
// to end the prompt, then closes its stdin and kills it (the whole process group on Unix,
// since agents are often wrappers such as npx around the real process). Run returns only
// once the process has been reaped: with ctx's error, or one wrapping ErrIdleTimeout.
//
// # Permissions
//
// The agent asks before acting (session/request_permission); the answer follows the
// configuration, never a blanket yes. Refusals always win:
//
//   - Approval "deny" refuses every request, whatever the allow-lists say.
//   - A request naming any file outside the workspace is refused (lexically and after
//     resolving symlinks).
//   - edit, delete, move: every path the call names must be inside the workspace and at
//     least one must be named; then allowed when AllowEdits is set or Approval is "allow".
//     Under "ask" without AllowEdits the call fails with *tools.ApprovalError.
//   - execute: allowed only when its command (raw input "command"/"cmd", else the title)
//     passes run_command's rule (tools.CommandAllowed): read as a shell reads plain
//     words, it starts word by word with an AllowCommands entry and holds nothing that
//     would make a shell do more (; & | < > ` $ ( ) outside quotes, newlines), so
//     "go test ./... && rm -rf ~" is not "go test". Anything else is refused and the
//     agent told so.
//   - Everything else (fetch, read, search, other, ...): Approval "allow" allows, "deny"
//     refuses, "ask" (and the zero value) refuses and fails the call with
//     *tools.ApprovalError, after cancelling the prompt.
//
// Allowing picks the agent's allow_once option (never allow_always, which would let the
// agent skip later questions); an agent that offers none is refused. The agent's own
// writes through fs/write_text_file pass the same edit rule and write_file's
// tools.Guard (version control's folders and luft.toml/.luft anywhere in the workspace,
// files with more than one hard link and dangling links are refused, and the file
// opened is the file checked), and every file access goes through an os.Root on the
// workspace, so symlinks cannot lead outside it. Edit, delete and move requests that
// name a protected file are refused likewise. Reading a file that does not exist answers
// ACP's -32002 (resource not found), which agents that create files (Gemini CLI) expect.
// Terminal methods are not offered and answer "method not found".
//
// Agents differ in what they do after a refusal: codex ends the prompt "cancelled",
// opencode and Claude Code end their turn with no text, others go on. Whenever the agent
// then stops without an answer, the call fails (status error) with an error naming each
// refused request and why it was refused, the same for every agent; an agent that went on
// and answered keeps its result.
package acp
