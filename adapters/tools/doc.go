// Package tools holds the tools an openai agent may call in its tool loop: the built-ins
// (read_file, list_dir, search_files, write_file, edit_file, run_command) and any extra
// Tool a caller registers (an MCP server's tools, say). A Set is built once from the
// [tools] table of luft.toml; an agent's `tools = {...}` list is turned into Tools by
// Set.Resolve, and the backend sends each Tool's Spec to the model and runs its Call when
// the model asks for it.
//
// # Confinement
//
// File tools never reach outside the workspace ([tools] workspace, default the process's
// working directory). Paths the model gives are relative to the workspace; an absolute
// path is accepted only when it lies inside the workspace. Every file operation goes
// through an os.Root opened on the workspace, so ".." that climbs out, and symbolic links
// (to files or directories) that lead outside, are refused by the kernel-facing layer,
// not by string checks alone. Errors name the path and the workspace so the model can
// correct itself.
//
// Writes go through a Guard (also used for coding agents' writes, see package acp):
// version control's folders and luft's own config (ProtectedNames: .git, .hg, .svn,
// .bzr, .jj, _darcs, .luft, luft.toml) anywhere in the workspace, the protected paths
// (the active config file and state dir), files with more than one hard link and
// dangling symbolic links are refused. A .git/config with core.fsmonitor, or a hook,
// would run a command the next time anyone uses git there; a planted luft.toml would
// choose the next run's backend and allow-list; a hard link made beforehand would carry
// the write to a file outside, or into luft's journal. The file is opened once and, on
// Linux, the opened file itself (/proc/self/fd) is checked again, so a link swapped in
// between the check and the open is caught. Reading any of these is fine.
//
// Names may change under a tool while it works (another process renaming a folder of
// the path to a symbolic link that leads out, or a file to a FIFO). os.Root opens each
// part of a path without following links and follows the ones inside itself, so a swap
// can make a call fail but never lead it outside; what a file is gets decided by the
// descriptor once it is open, never by an earlier Stat, and every open is non-blocking,
// so a FIFO (or a device) swapped in is refused rather than waited on, and
// search_files reads no more than its size cap of a file that grew after it was
// listed. A hard link in the workspace is the workspace's own name of its file
// (pnpm links its store into node_modules): read_file and search_files read it,
// write_file and edit_file refuse it. Commands cannot make one to a file outside
// (package sandbox).
//
// run_command runs no shell. The command is a program and its arguments; a single command
// string is split into words the way a shell would split plain words and quotes, and
// shell syntax (; | & > < ` $ ( ) or a newline) is refused rather than passed on. A
// command runs only when its first words equal one of the [tools] allow_commands entries,
// compared word by word: "go test" allows `go test ./...` but not `go testx` or `go vet`.
// The process runs in the workspace directory with a timeout (default 2 minutes; its
// whole process group is killed on Unix) and a cap on the output it returns.
//
// An allowed program is trusted with whatever further arguments the model adds (and
// `go test` runs code the agent wrote), so what a command can reach is bounded by design
// rather than by its arguments:
//
//   - the kernel confines it (package sandbox, Landlock on Linux): it may write only in
//     the workspace, a private $TMPDIR removed after the call, the workspace's command
//     cache ($XDG_CACHE_HOME, <user cache>/luft/commands/<hash of the workspace>, kept
//     between calls so `go test` need not rebuild everything) and [tools] writable; it
//     may read only those, the system's folders, its program's folder, PATH's folders,
//     the toolchains' (toolCaches) and [tools] readable; it may connect to no TCP port
//     but those [tools] network names. luft's protected paths (state dir, config) and
//     the user's credentials (Secrets) are hidden from it even inside a readable folder
//     (in its own mount namespace), so the default .luft inside the workspace is out of
//     its reach. It holds no capability, so it reads no process's environment or
//     memory, and luft's daemon refuses it on its socket. Inside the workspace the rest
//     is writable to a command — .git, say — since Landlock grants folders whole: the
//     Guard protects against file tools, not against an allowed command. A hook or
//     fsmonitor planted that way runs confined, with the same minimal environment, when
//     a later command runs git. Allow only commands you would let write the workspace.
//     Where the kernel cannot confine as the policy says (sandbox.Check), run_command is
//     refused, unless [tools] unconfined lets commands run without;
//   - its environment is ChildEnv's: BaseEnv (PATH, HOME, USER, LOGNAME, LANG, LC_*,
//     TERM, TZ, TMPDIR) and the names [tools] env gives; no API key or token of luft's
//     reaches it.
//
// A failing tool is not a failing agent: a tool's error, and a command's non-zero exit,
// go back to the model as the tool result so it can correct itself.
//
// # Approval
//
// A tool is destructive when its Spec says so (write_file and edit_file, which change
// files; an MCP tool marked destructiveHint and not readOnlyHint) or when [tools]
// destructive lists it. The other built-ins are not: the read tools change nothing, and
// run_command is bounded by its allow-list. Under "ask", a run_command call for a
// command the allow-list does not name asks too (NeedsApproval), and runs, confined as
// any command, once approved. Resolve wraps each destructive tool in the approval
// policy ([tools] approval):
//
//   - "allow" runs it;
//   - "deny" refuses it with an ordinary tool error, so the model is told and may go on;
//   - "ask" (the default) runs it once a person said yes: the runtime parks the call,
//     asks (the terminal's live view, an MCP client, the daemon's API), and runs the tool
//     with a context marked by Approved; a no reaches the model as DeclinedText. Where no
//     one can answer (a CLI run without a terminal, an unattended daemon run), the agent
//     call fails with an *ApprovalError naming the tool and the setting that lets it run.
//
// So under the default policy a file write waits for a yes; a workflow that writes files
// where no one watches (CI) sets [tools] approval = "allow".
package tools
