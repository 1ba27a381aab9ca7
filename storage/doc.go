// Package storage keeps what a run leaves behind. Today that is the event log of each run
// (Memory, an in-process implementation); the durable SQLite store with the journal, runs
// and phases implements the same interfaces and more.
package storage
