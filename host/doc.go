// Package host builds a host's backends, scheduler and runtime.Service from a config:
// the wiring every process that runs workflows does once, in named steps.
//
//	Open:  config → backends (adapters/setup: the registry, the tools, their policy)
//	Serve: backends + store → the one scheduler (its lanes from the config) → runtime.Service
//
// The CLI's run, the daemon, the standalone MCP server and the Go API (package luft) all
// build their hosts here, so every door gets the same policy: the scheduler's lanes
// (SchedulerConfig), what a run may record (EventLimits), a script's sandbox limits
// (ScriptLimits) and the paths no agent may write (ProtectedPaths).
//
// The steps are separate because the doors do different things between them: the CLI
// hands a run to a running daemon after its backends are checked and before it opens
// the store, and the Go API adds its custom backends to the registry. Each door opens its
// own store and words its own errors; this package names no command or option.
//
// It sits one room above runtime: it imports runtime, scheduler, storage and
// adapters/setup, and nothing below it imports it.
package host
