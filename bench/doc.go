// Package bench holds luft's benchmarks. They are programs, run on purpose, that measure
// and print side-by-side tables:
//
//	go run ./bench/fanout            # runtime overhead of a parallel fan-out of mock agents
//	go run ./bench/resume            # time to resume a run whose journal holds N completed calls
//	go run ./bench/sched             # the admission scheduler beside its baselines, W1–W4
//
// fanout and resume measure wall time and are never run by `go test`. bench/sched runs
// on a virtual clock, so it is deterministic: its fast variants are also tests that
// assert the scheduler's targets as ratios.
package bench
