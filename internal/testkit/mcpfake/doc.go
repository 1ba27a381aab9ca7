// Package mcpfake is a fake upstream MCP tool server for luft's tests: the server that
// adapters/mcptools connects to, built on mcp-go's own server package so the wire format
// is the real one. It serves the same tools over stdio and over streamable HTTP.
//
// # Tools
//
//	lookup{key}        returns "value-of-<key>"                 readOnlyHint true
//	add{a, b}          returns a+b (numbers, shortest decimal)    no annotations
//	delete_record{id}  returns "deleted record <id>"            destructiveHint true
//	fail{}             a result with isError true: "record store unavailable"
//	wait{}             blocks until its request is cancelled     readOnlyHint true
//	env{}              the server's environment, NAME=value lines  readOnlyHint true
//	snapshot{}         text, an image, an embedded text resource and a resource link
//
// Tools are listed two to a page, so a client that ignores nextCursor misses some.
// A call whose arguments do not fit the tool's schema gets an isError result naming the
// problem, as a real server would.
//
// # Ground truth
//
// Every tools/call is recorded (tool name, arguments as received, decoded) before it is
// answered, so a test that has its answer can read the call with Fake.Calls. With
// Fake.LogTo each call is also written as one JSON line (a Call) to a writer; ReadLog
// reads such a file back. That is how a test sees the calls a stdio fake received in
// another process.
//
// # Two ways to serve
//
// Over streamable HTTP in process: Fake.StartHTTP(t) serves on 127.0.0.1:0 and returns
// the endpoint URL and a stop function (also run at cleanup). After stop the URL refuses
// connections, which makes a reliable "unreachable server" for tests.
//
// Over stdio in a subprocess: a test package calls ServeChildIfRequested first in its
// TestMain, and ChildCommand gives the command, arguments and environment that re-run
// the test binary as a stdio fake (EnvStdio set, EnvLog naming the log file). This needs
// no build step and no go toolchain at test time. The command cmd/luft-fake-mcp serves
// the same fake on stdin/stdout for use outside Go tests; both go through Serve.
//
// Rules: the HTTP server binds loopback only; nothing sleeps; wait{} ends only when its
// request's context ends (client cancellation, a closed stdin, or stop).
//
// mcp-go's stdio server keeps its session in a package variable, so one process serves
// at most one stdio session at a time: tests that call ServeStdio in process must not run
// in parallel with each other.
package mcpfake
