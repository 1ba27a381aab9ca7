// Package scheduler admits agent turns. Every model turn of every run in a process asks the
// one Scheduler for a Permit before it reaches a backend and hands the permit back with
// what the turn cost, so the scheduler can learn budgets. This package never imports the
// backends or the Lua VM: it sees turns and outcomes as plain values.
//
// Gate is the simple admission policy: a fixed number of concurrent turns, granted in
// arrival order. The admission scheduler (classes, continuations first, fair shares,
// predictive rate-limit budgets) replaces it behind the same interface.
package scheduler
