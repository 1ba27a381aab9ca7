// Package runtime owns a run's life: it loads and compiles the workflow, drives the Lua VM,
// carries every agent call through budgets, the scheduler and a backend (with retries,
// timeouts and structured-output checks), and records the run's events in order before any
// subscriber sees them. Engine is the surface every front door uses: the CLI today, the MCP
// server, the daemon and the Go API later.
//
// A finished agent call is journaled before the script sees it, and so is each tool call
// its model asks for (runtime/tools.go): a retried call, or a call a resumed run runs
// again, is answered the recorded output of a tool it asks for again instead of running
// the tool twice, and a tool begun but never finished is reported to the model as
// interrupted rather than run again.
//
// runtime does not know how a backend speaks or how turns are ordered; it asks an
// adapters.Backend and a scheduler.Scheduler.
package runtime
