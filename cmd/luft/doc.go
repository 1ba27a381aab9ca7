// Command luft runs multi-agent LLM workflows written as sandboxed Lua scripts.
//
// The commands here are thin: they parse flags, build options, call the runtime and
// render what it reports. Every exit code is decided in one place (exitCode), and all
// process state — stdio, environment, signals, the clock — comes from one env value, so
// tests can run the whole CLI in-process.
package main
