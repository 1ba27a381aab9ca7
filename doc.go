// Package luft runs luft workflows — multi-agent LLM workflows written as sandboxed Lua
// scripts — from a Go program, with the same runtime, journal and scheduler as the luft
// CLI, the daemon and the MCP server.
//
// An Engine owns a state dir (the SQLite store of runs, events and the journal), the
// backends (the config's, the environment's, the offline mock, and custom ones) and one
// scheduler that admits every model turn of its runs:
//
//	eng, err := luft.New(luft.Options{StateDir: ".luft"})
//	if err != nil { ... }
//	defer eng.Close()
//	res, err := eng.Run(ctx, luft.Script{Path: "review.lua", Args: map[string]any{"topic": "auth"}})
//
// Run runs a script to its end; Start returns a *Run to follow (Events), stop (Cancel)
// and wait for (Wait). Resume continues a stopped run from its journal: calls that
// finished return their recorded results without a backend. Status, List and Events read
// what the state dir holds, including runs of other processes (the CLI's, when both use
// one state dir).
//
// The doors luft serves are there too: MCPHandler is the MCP server (workflow and
// sub-agent tools) and ProxyHandler the OpenAI-compatible proxy for agents that keep
// their own loop, both over the Engine's runs and its one scheduler.
//
// A custom model is a Backend — one method, Complete — registered with WithBackend; each
// of its calls is a model turn the scheduler admits, so Options.Concurrency bounds them
// like any backend's.
//
// Approvals: a destructive tool call of an openai agent (write_file, edit_file, an MCP
// tool marked destructiveHint, a command [tools] allow_commands does not name) under the
// default [tools] approval = "ask" needs a person's yes. By default the Engine asks no
// one: a destructive tool's call fails its agent call (*ApprovalError), and a command
// not allowed is refused to the model. With Options.Approvals the
// run parks instead (StatusAwaitingApproval, RunInfo.PendingApprovals,
// EventApprovalRequested) until Engine.Approve answers; with Options.Approve the Engine
// asks that function for each call as it comes.
//
// Errors that stop a run are typed for errors.As: *ScriptError (the script does not
// compile or raised an error), *LimitError (a sandbox limit), *BudgetError (budget{}),
// *DivergenceError (a resumed script asks for different calls than its journal),
// *ApprovalError (an agent call needed an approval no one could give) and
// *NotFoundError (no such run); cancellation and suspension match ErrCancelled,
// ErrTimeout, ErrSuspended and ErrShutdown with errors.Is.
//
// The packages under this module other than luft (runtime, scheduler, storage, adapters,
// lua, ...) are luft's implementation: they change with it. Programs embed luft through
// this package.
package luft
