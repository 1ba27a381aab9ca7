// Package acpfake is a fake coding agent that speaks the Agent Client Protocol (the agent
// side of github.com/coder/acp-go-sdk) for testing luft's acp backend. It runs no model:
// what it does is driven by the prompt text. cmd/luft-fake-acp serves it on stdin and
// stdout, configured by the environment (OptionsFromEnv).
//
// # Capabilities
//
//   - initialize: protocol version 1; loadSession only when a state directory is set.
//   - session/new: a fresh id "fake-<hex>"; offers the models of Options.Models (default
//     fake-small, the current one, and fake-large) unless there are none.
//   - session/load: reads the session from the state directory, so a new process can
//     resume what an earlier one started, and replays its history as user and agent
//     message chunks, as real agents do.
//   - session/set_model: switches to an offered model.
//   - session/cancel: ends a running prompt, which answers stopReason "cancelled".
//
// # Prompts
//
// The prompt's text blocks are joined with newlines. A line whose first word is one of
// these does what it says, in order:
//
//	EDIT <path>   tool call kind edit on path (relative to the session cwd), with a diff;
//	              asks permission, and when allowed writes "edited by luft-fake-acp\n"
//	              there through fs/write_text_file
//	RUN <cmd...>  tool call kind execute with raw input {"command": cmd}; asks
//	              permission and reports the outcome (it runs nothing)
//	FETCH <url>   tool call kind fetch; asks permission
//	READ <path>   fs/read_text_file, and says what came back
//	WRITE <path>  fs/write_text_file without asking permission first
//	ENV           says its environment: "env: " and its NAME=value pairs, sorted
//	HANG          says "hanging until cancelled", then waits for session/cancel (or the
//	              connection's end) and answers "cancelled"
//	CRASH         writes a line to stderr and exits with status 3 without answering
//	NOTICE <text> sends text as a reply chunk with no break after it, as codex-acp
//	              passes on Codex's warnings ("Model metadata for … not found. …")
//
// A refused permission is answered as EnvOnReject says: by default the agent reports the
// tool call failed and goes on; "cancel" ends the prompt with stopReason "cancelled" (as
// codex does); "quiet" ends it with "end_turn" and no further text (as opencode and
// Claude Code do).
//
// Every prompt first streams a thought. When the word JSON appears anywhere (luft's
// schema instruction contains it) the reply is one ```json fenced block holding
// {"ok": true, "session": id, "turn": n, "model": m}; otherwise the reply echoes the
// prompt, "echo: " and its words, streamed as one chunk per word, after a line per
// directive's outcome. From the second turn of a session on — including a session
// resumed by another process — the reply starts "(turn N of session ID) ".
//
// # Ground truth
//
// Every request and notification it receives, each permission outcome and each file
// request it makes is appended to the log (Options.LogPath) as one JSON line (Entry),
// written before the agent answers, so a client that has its answer can read it.
// ReadLog reads the log back.
package acpfake
