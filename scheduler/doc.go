// Package scheduler admits agent turns. Every model turn of every run in a process asks the
// one Scheduler for a Permit before it reaches a backend and hands the permit back with
// what the turn cost, so the scheduler can learn budgets. This package never imports the
// backends or the Lua VM: it sees turns and outcomes as plain values.
//
// Core is the decision logic, pure over (state, event, now): lanes (backend + model) with
// slots and tokens/requests-per-minute budgets configured or learned from rate-limit
// headers; interactive before batch with ageing; continuations (later turns of one agent
// call) first, ranked by the call's first admission; fair shares across callers by tokens
// served; reservations with a learned safety margin, and for turns without an output cap
// a high quantile of recent completions; wait, suspend or refuse decisions; 429 and 5xx
// handling, circuit breakers, fallback lanes and load-bounded replica affinity per
// conversation. It has no goroutines and no clock, so it is tested and
// benchmarked on virtual time.
//
// Time: every wait is kept as a time.Time taken from the clock's now plus a duration,
// so it carries Go's monotonic clock reading, and the core ranks and queues by
// Time.Sub from its first now rather than by Unix times. A system clock set ahead or
// back while a turn waits moves none of it: the turn is admitted when the wait is over
// by the monotonic clock, with no early burst (and no 429s) and no hour-long stall.
// A server's absolute times (Anthropic's RFC 3339 resets, an HTTP-date retry-after)
// become such a wait when they are read, measured from luft's clock or, when that
// disagrees with the response's Date by more than a few seconds, from the Date. Only a
// suspended run's resume time is wall-clock time, since it outlives the process.
//
// The core's files, one concern each: core.go (Core and its events), action.go (what
// the core is told and tells back), ranking.go (rank keys and the per-caller queues),
// admission.go (what may run now, on which lane), affinity.go (which replica, per
// conversation), settle.go (what an answer's usage and headers teach), retry.go (what
// a 429 or a 5xx teaches), silent.go (the pace 429s alone teach a lane whose provider
// reports no limits), short.go (the short windows a 429 shows a provider enforces its
// known limits over), runs.go (runs, their suspension and their forgetting),
// stats.go (counters for a status view). What a lane knows is in lane.go (its state,
// slots and circuit breaker), budget.go (its dead-reckoned buckets), estimator.go (its
// estimate error, margin and output lengths) and headers.go (rate-limit headers read
// into Telemetry).
//
// Executor puts a Core behind the Scheduler interface for real use: one lock, an injected
// clock, a timer at the core's next wake-up, blocking Admit, and Notify callbacks the
// runtime turns into events. Gate is the simplest policy (fixed slots, arrival order),
// kept as a baseline for benchmarks.
package scheduler
