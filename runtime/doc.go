// Package runtime owns a run's life: it loads and compiles the workflow, drives the Lua VM,
// carries every agent call through budgets, the scheduler and a backend (with retries,
// timeouts and structured-output checks), and records the run's events in order before any
// subscriber sees them. What a run records is bounded by EventLimits (the size of each
// event, the events and their bytes per attempt), so no script can fill the disk; a
// subscriber reads the log at its own pace, so a slow one never holds up the run. Engine is the surface every front door uses: the CLI today, the MCP
// server, the daemon and the Go API later.
//
// runtime does not know how a backend speaks or how turns are ordered; it asks an
// adapters.Backend and a scheduler.Scheduler.
package runtime
