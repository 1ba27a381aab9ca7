package mcp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/mark3labs/mcp-go/server"
)

// A run started through MCP records who started it as its caller (runtime.Spec.Caller,
// stored with the run and kept by resumes): "mcp:" and a digest of the session's key. The
// key is the session key the stdio relay sends (HeaderSession), which lives as long as
// the `luft mcp serve` process and so outlives the daemon sessions the relay opens
// again after a restart; a client on HTTP with no such header is known by its mcp-go
// session id; `luft mcp serve --standalone` draws one per process. Only the digest is
// stored or logged, so nothing that reads runs learns a key it could present.
//
// Cancel and approve are the session's own business: a session may cancel or approve a
// run it started, or one not started through MCP (luft run, the API); reading (status,
// events, lists, await) is open to every session.

// HeaderSession carries the stdio relay's session key to the daemon: the runs a
// `luft mcp serve` process starts stay its own across reconnects. It is a secret of the
// relay (128 random bits); a value shorter than 16 or longer than 128 bytes is ignored.
const HeaderSession = "Luft-Session"

type sessionKey struct{}

// withSessionKey makes key the session key of the requests under ctx.
func withSessionKey(ctx context.Context, key string) context.Context {
	if len(key) < 16 || len(key) > 128 {
		return ctx
	}
	return context.WithValue(ctx, sessionKey{}, key)
}

// newSessionKey is a fresh random session key.
func newSessionKey() string { return rand.Text() }

// owner is who the request's session is as the caller of the runs it starts, or "" when
// the request has no session (a sessionless request of protocol 2026-07-28).
func owner(ctx context.Context) string {
	key, _ := ctx.Value(sessionKey{}).(string)
	if key == "" {
		if cs := server.ClientSessionFromContext(ctx); cs != nil {
			key = cs.SessionID()
		}
	}
	if key == "" {
		return ""
	}
	return SessionCaller(key)
}

// SessionCaller is the caller recorded for the runs of the session with this key (its
// HeaderSession, else its mcp-go session id): "mcp:" and a digest of the key.
func SessionCaller(key string) string {
	sum := sha256.Sum256([]byte("luft mcp session\x00" + key))
	return "mcp:" + hex.EncodeToString(sum[:12])
}

// Caller is who a request's runs count as in the scheduler's fair shares, and who
// started them: its MCP session (owner).
func Caller(ctx context.Context) string {
	if o := owner(ctx); o != "" {
		return o
	}
	// A sessionless request (protocol 2026-07-28) is known by its client's name.
	if pi := server.RequestProtocolInfoFromContext(ctx); pi != nil && pi.ClientInfo != nil && pi.ClientInfo.Name != "" {
		return "mcp:" + event.Cut(pi.ClientInfo.Name, 64, "")
	}
	return "mcp"
}

// startedThroughMCP reports whether a run's caller is an MCP door's.
func startedThroughMCP(caller string) bool {
	return caller == "mcp" || strings.HasPrefix(caller, "mcp:")
}

// runCaller is the caller a run was started with.
func runCaller(info runtime.RunInfo) string {
	var spec struct {
		Caller string `json:"caller"`
	}
	_ = json.Unmarshal(info.Spec, &spec)
	return spec.Caller
}

// mayControl says why the request's session may not cancel or approve run info, or nil
// when it may: the run is its own, or was not started through MCP.
func mayControl(ctx context.Context, tool string, info runtime.RunInfo) error {
	c := runCaller(info)
	if !startedThroughMCP(c) {
		return nil
	}
	if o := owner(ctx); o != "" && o == c {
		return nil
	}
	what := "run"
	if info.Workflow == SubagentWorkflow {
		what = "sub-agent"
	}
	return fmt.Errorf("%s: %s %s was started by another MCP session: a session may %s only the runs it started (or runs not started through MCP); its status and events stay readable, and `luft cancel`/`luft approve` in a terminal act on any run",
		tool, what, info.ID, verb(tool))
}

func verb(tool string) string {
	if tool == "approve" {
		return "approve calls of"
	}
	return "cancel"
}
