// Package door holds what luft's front doors share, below every one of them: the
// request that starts a run (StartRequest, the body of the daemon's POST /api/runs and
// what the MCP tools start), a handler mounted on a host (Mount), and the one JSON shape
// of a run (Run) that `luft status --json`/`list --json`, the daemon API and the MCP
// workflow tools all answer with.
//
// It sits above runtime and storage and below cmd/luft, daemon, mcp and proxy, so a door
// never imports its host to speak with it: the daemon mounts an MCP server without the
// MCP package knowing the daemon, and each door asks its host for runs through a small
// interface of its own (mcp.Host).
//
// Rules: plain values and conversions only. Nothing here starts a run, opens a store or
// listens; that is runtime's and the hosts' work.
package door
