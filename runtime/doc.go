// Package runtime owns a run's life: it loads and compiles the workflow, drives the Lua VM,
// carries every agent call through budgets, the scheduler and a backend (with retries,
// timeouts and structured-output checks), and records the run's events in order before any
// subscriber sees them. What a run records is bounded by EventLimits (the size of each
// event, the events and their bytes per attempt), so no script can fill the disk; a
// subscriber reads the log at its own pace, so a slow one never holds up the run. Service is
// the surface every front door uses: the CLI, the daemon, the MCP server, the proxy and
// the Go API (package luft).
//
// A finished agent call is journaled before the script sees it, and so is each tool call
// its model asks for (runtime/tools.go): a retried call, or a call a resumed run runs
// again, is answered the recorded output of a tool it asks for again instead of running
// the tool twice, and a tool begun but never finished is reported to the model as
// interrupted rather than run again.
//
// Token and USD budgets are reserved turn by turn before the scheduler sees a turn
// (runtime/budget.go), so parallel calls cannot overshoot them by more than one turn's
// estimation error, and the time budget counts every attempt's driven time. Every wait —
// timeout_ms, the time budget, --timeout, retry backoff, polls — runs on Options.Clock,
// so tests drive them on a virtual clock.
//
// A failure of the state dir itself (storage.Broken: a full or failing disk, a corrupt
// database) met while journaling a call, pinning a file or storing events stops the run
// with that cause before the script sees the call's result, so pcall cannot catch it: the
// run ends suspended (unwritable: resumable as it is once there is space) or failed
// (corrupt), never as a script error. A run stored as running whose process is gone is
// shown as interrupted by Status and List; Resume of a completed run runs nothing and
// returns its stored result.
//
// A run's agent counts, usage and cost are live (runtime/totals.go): the run's row is
// brought up to date as calls finish, so every process reading the state dir sees them
// while the run goes on, and Status and List of a run this process drives read them from
// memory. A call cut off by a cancel, a timeout or a suspension counts as cancelled, not
// failed.
//
// A door records a run it does not drive with a VM (the proxy's conversations of agents
// that keep their own loop) as an external run (runtime/external.go): OpenExternal, then
// External.Record and Close, each durable when it returns; a failure of the state dir is
// the door's to tell its client, and NotifyUnrecorded's watcher (the daemon) is told too.
// On a leased node an external run is held under the lease (Held) and its writes are
// fenced on its attempt; a node that takes over one whose node died cannot resume it and
// ends it instead (IsExternal, EndTakenOver).
//
// A cancel or an approval answer given by another process is stored; the process driving
// the run hears of it at once when its store notifies (a small notifier interface,
// notify.go, that storage.Postgres implements with LISTEN/NOTIFY) and otherwise finds it
// by polling (Options.CancelPoll, four times as long while the store's listener is up).
// A claim of a run still running keeps its cancel request, and the new attempt ends
// cancelled before its script starts.
//
// The Service's files: service.go (Options, New, which runs are driven), spec.go (what a
// run is told and how it ends), start.go, resume.go, run.go (launching and executing a
// VM's run), query.go (status, list, events, cancel), notify.go (notices), lease.go,
// approvals.go, external.go.
//
// runtime does not know how a backend speaks or how turns are ordered; it asks an
// adapters.Backend and a scheduler.Scheduler.
package runtime
