// Package chaos holds the chaos test of scale-out (SPEC §9): real luft daemons on one
// PostgreSQL database and one rate-limited key of the fake engine, with daemons SIGKILLed
// and SIGSTOPped under them while they drive runs. The package has no code of its own;
// its test builds luft, starts the daemons as child processes and judges the outcome from
// the database and from the fake engine's log, never from what the daemons say of
// themselves:
//
//   - the writer of every row is known to the database: each daemon process connects
//     with an application_name of its own, and triggers the test installs (in a schema of
//     its own, beside luft's tables) record who claimed each attempt of a run and flag
//     any write from a process that does not hold the run's current attempt;
//   - the engine's log names the daemon process that sent each request (the test maps
//     each connection to its process through /proc) and the run and step it was for
//     (from the prompt).
//
// It skips only when LUFT_TEST_POSTGRES is unset (CI sets it), and runs alone in about
// half a minute.
package chaos
