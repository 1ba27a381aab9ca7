// Package bench holds luft's benchmarks. They are programs, run on purpose (never by
// `go test`), that measure wall time and memory and print side-by-side tables:
//
//	go run ./bench/fanout            # runtime overhead of a parallel fan-out of mock agents
//	go run ./bench/resume            # time to resume a run whose journal holds N completed calls
package bench
