// Package agent holds the plain values that cross luft's layers for one agent call: the
// Request a workflow script asks for, the Result a backend returns, and the token Usage that
// the scheduler, budgets and the journal account. It imports nothing from luft, so the lua
// VM, the runtime, the scheduler and the backends can all speak it without knowing each other.
package agent
