// Package daemon is the long-lived host of luft runs: one runtime.Service and one
// admission scheduler for every run and caller on the machine (SPEC §8).
//
// One daemon serves one state dir. It holds an exclusive lock on <state>/daemon.lock for
// its whole life (so a second one refuses to start and says where the first one is),
// writes <state>/daemon.json with its pid, socket, address and version, and serves the
// local JSON API on the unix socket <state>/daemon.sock (mode 0600; clients refuse a
// socket that others could open) and, when asked, on a loopback HTTP address where every
// request needs the bearer token and a loopback Host (and Origin, when one is sent), so a
// web page cannot reach it by DNS rebinding.
//
// Runs outlive their callers: on start the daemon resumes every run left running by a
// process that is gone and wakes suspended runs at their resume time; on shutdown it
// stops admitting new runs and new turns, queued ones included (see Gate), suspends a
// run that reaches a new phase there (runtime.Service.Quiesce), gives the turns in
// flight a grace period (Options.Grace, or the shutdown request's) to finish and be
// journaled, then suspends the runs (each ends with its journal and events stored) so
// the next start resumes them.
// A daemon killed outright loses nothing either: the journal holds every finished call.
package daemon
