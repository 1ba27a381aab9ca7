// Package suggest finds the known name a mistyped one was most likely meant to be, for
// "did you mean" hints: a command, a flag, an option of agent{}.
package suggest
