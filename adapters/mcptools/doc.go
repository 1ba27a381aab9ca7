// Package mcptools connects luft to upstream MCP tool servers (the [mcp_servers] table of
// luft.toml) and offers their tools to luft agents as tools.Tool values.
//
// # Connecting
//
// Open connects to every configured server at once, each as an MCP client named "luft":
// a server with a command is started as a subprocess and spoken to over stdio; a server
// with a url is spoken to over streamable HTTP. Each connection performs the MCP
// handshake and lists the server's tools, following nextCursor across pages, within
// ConnectTimeout (or the caller's earlier deadline). If any server fails, Open closes the
// ones that succeeded and returns every failure, each naming the server, what went wrong
// and what to check. Upstream.Close closes every client and ends every subprocess: stdin
// is closed first, then SIGTERM, then SIGKILL, as mcp-go's stdio transport does.
//
// A subprocess does not inherit luft's environment, which holds API keys: it gets
// tools.BaseEnv (PATH, HOME, USER, LOGNAME, LANG, LC_*, TERM, TZ, TMPDIR) from it plus the
// server's env table and the variables its pass_env list names (the way to hand a server
// its own token without writing it into the config file). Its stderr is
// kept (the last few KiB) only to explain failures; it is never copied to luft's own
// output.
//
// # Names
//
// A tool is offered to models as "<server>__<tool>" (two underscores), so two servers
// may both have a "search" tool. Server names must already be made of letters, digits,
// '_' and '-', without "__", and at most 48 bytes: they come from the user's config,
// which is the place to fix them. Tool names come from the upstream server and are made
// to fit: a name that is not already [a-zA-Z0-9_-] and 64 bytes at most is rewritten
// (other bytes become '_', then it is cut to fit) and gets a suffix of 8 hex digits of
// the original name's SHA-256, so two tools never share a name after rewriting.
//
// # Schemas and destructive tools
//
// A tool's Parameters are its MCP input schema as a JSON object. mcp-go decodes the
// schema into its own type, which keeps type, properties, required,
// additionalProperties and $defs; other top-level keywords are not carried over.
//
// Spec.Destructive is true only when the tool's annotations say destructiveHint: true
// explicitly and do not say readOnlyHint: true. MCP's own default for a missing
// destructiveHint is true (a client should assume the worst), but most servers never
// annotate their tools, and treating all of those as destructive would put every
// upstream tool behind the approval policy. luft trusts an explicit claim instead and
// lets the user gate the rest by choosing which servers to configure. Note that tools
// built with mcp-go's mcp.NewTool carry destructiveHint: true unless their author
// overrides it, and are destructive here.
//
// # Calls
//
// Tool.Call sends tools/call with the model's arguments, which must be a JSON object
// (empty or null arguments send {}); the bytes are passed through, so large integers
// keep their precision. The result's text content is joined with newlines; other content
// becomes a short bracketed placeholder (an image, audio, a binary resource, a resource
// link) and an embedded text resource is shown with its URI. A result without content
// but with structuredContent returns that as JSON. A result marked isError returns a
// *ToolError whose message is the result's text, which the model sees as "error: ...".
// A failure to reach the server returns an error naming the server. Calls honour their
// context: over stdio a cancelled call sends notifications/cancelled, over HTTP it ends
// the request.
//
// Tools of one Upstream may be called concurrently. Calling a tool after Close returns
// an error.
package mcptools
