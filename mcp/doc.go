// Package mcp is luft's MCP door (SPEC §8): an MCP server, on github.com/mark3labs/mcp-go,
// over runtime.Service. It offers the workflow tools (workflow_execute, workflow_status,
// workflow_events, workflow_await, workflow_cancel, workflow_list_runs,
// workflow_list_files, workflow_validate), the sub-agent tools, and resources: the
// authoring skill, the examples list and luft://example/{name}.
//
// A Server is served over streamable HTTP (Handler, mounted by the daemon at /mcp) or
// over stdio (ServeStdio, for `luft mcp serve --standalone`). Runs are started through a
// Host: in the daemon that is (*daemon.Daemon).Start, so runs outlive the MCP client;
// standalone it is ServiceHost, which starts them on the local Service. Everything else
// (status, events, cancel, list) reads the Service. Each MCP session is a caller of the
// scheduler's fair shares and the owner of its runs (runtime.Spec.Caller = "mcp:" + a
// digest of its session key, owner.go): cancel and approve act only on the session's own
// runs and on runs not started through MCP; reading is open to all. Paths reach only .lua
// files inside the client's MCP roots, or the server's workspace when it declared none
// (paths.go), and a message over MaxBody is answered with a JSON-RPC error for its id
// (oversize.go).
//
// The sub-agent tools (spawn, await, run, status, cancel, approve, tools) run each
// sub-agent as a hosted run of a one-call workflow (subagentScript), so a handle is a run
// id and outlives the server and the daemon. A run whose tool call waits for approval
// (runtime's awaiting_approval) is answered through the awaiting client: one that
// declared elicitation is asked by the await hook, others get the pending call in the
// await's answer and reply with approve.
//
// Relay is the other half of `luft mcp serve`: a transparent stdio <-> streamable HTTP
// bridge to the daemon's /mcp over its unix socket that survives a restart of the daemon
// (it replays the client's initialize on a new session and answers the requests that
// were in flight with an error).
//
// Rules: a tool's failure the caller can fix (a script error, an unknown run id, a bad
// argument, an oversized input) is a tool result with isError set and a text saying what
// to do, never a protocol error; every input has a bound (script size, events per page,
// await timeout), and no tool waits longer than the caller asked.
package mcp
