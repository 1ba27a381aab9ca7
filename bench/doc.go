// Package bench holds luft's benchmarks. They are programs, run on purpose, that measure
// and print side-by-side tables:
//
//	go run ./bench/fanout            # runtime overhead of a parallel fan-out of mock agents
//	go run ./bench/resume            # time to resume a run whose journal holds N completed calls
//	go run ./bench/tuiview           # what the live terminal view costs a wide fan-out
//	go run ./bench/hosted            # the openai backend against hosted-API rate limits, time compressed
//	go run ./bench/sched             # the admission scheduler beside its baselines, W1–W4
//	go run ./bench/mcp               # the MCP door: execute → status running, run_done → await answered
//	go run ./bench/mcpload           # 50 MCP sessions × 10 sub-agents through a daemon process: wall time, its RSS
//	go run ./bench/proxy             # own-loop agents through luft's proxy vs straight at a hosted API
//	go run ./bench/proxyoverhead     # latency and time to first byte the proxy adds, 200 open streams
//	go run ./bench/confine           # what confining a run_command call costs, beside a direct exec
//	go run ./bench/scaleout          # 1, 2 and 3 daemons on one PostgreSQL and one shared key: throughput, memory, takeover
//
// fanout, resume, tuiview, mcp and mcpload measure wall time and are never run by `go test`. hosted
// runs on a scaled clock, against the test kit's provider models (-model all), luft
// beside a direct client with SDK retries (-direct); its test asserts one fast variant's
// 429s and extra requests on the classic model, not its times, and prints the whole
// table on a virtual clock with `go test ./bench/hosted -run TestModelsTable -v -args
// -table`. bench/sched runs on a virtual clock, so it is deterministic: its fast
// variants are also tests that assert the scheduler's targets as ratios, and a missed
// target fails them. Its headline W1 and W2 figures are luft as shipped (Lua workflows,
// the runtime, the Executor: `go test -run ThroughRuntime -v ./bench/sched/...`); the
// command's own W1–W4 tables drive the decision core directly. proxy runs on a
// scaled clock over loopback HTTP; its test runs the same measurement on a virtual clock
// (a testing/synctest bubble, HTTP in memory) and asserts the proxy's targets. scaleout
// needs a PostgreSQL server (LUFT_TEST_POSTGRES) and measures real daemons on the wall
// clock; its test runs one small repetition of each part (skipped with -short or without
// a server) and asserts no 429 on the shared key and no claim before the lease lapses.
//
// Every bench prints the machine first (bench/internal/machine): CPU model, cores, load
// average and Go version, so that figures from two machines, or from one machine under
// two loads, are not compared as if they were the same.
package bench
