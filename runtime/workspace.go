package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/storage"
)

// A run whose agents use local tools or an ACP coding agent needs the workspace they work
// in (SPEC §9): it records one before its first such call, and from then on only a node
// that serves that workspace takes it over. A run that only calls APIs records none and
// moves freely.
//
// A workspace is a name ([node] workspaces, Options.Workspaces): the first name of the
// node that made the first such call. A node that names none records its own workspace,
// NodeWorkspace(its id): such a run waits for that very node.

// nodeWorkspacePrefix begins the workspace of a node that names none. A declared name
// never has a ':' (config.CheckWorkspaces).
const nodeWorkspacePrefix = "node:"

// NodeWorkspace is the workspace a run records that uses the local tools of node id when
// that node names no workspace: only that node serves it.
func NodeWorkspace(id string) string { return nodeWorkspacePrefix + id }

// ErrWorkspaceNotServed refuses to resume here a run whose workspace this node does not
// serve.
var ErrWorkspaceNotServed = errors.New("this node does not serve the run's workspace")

// workspaceBackend is a backend whose agent works in this machine's workspace (an ACP
// coding agent) rather than behind an API.
type workspaceBackend interface{ UsesWorkspace() bool }

// usesWorkspace reports whether a call of req on b works in the local workspace: it is
// given tools (built-in tools work in [tools] workspace; an MCP server's may act on this
// machine too), or its backend is a coding agent.
func usesWorkspace(req agent.Request, b adapters.Backend) bool {
	if len(req.Tools) > 0 {
		return true
	}
	wb, ok := b.(workspaceBackend)
	return ok && wb.UsesWorkspace()
}

// ownWorkspace is the workspace a run records that uses this node's tools ("" for a
// Service that is no node: its runs are held by their process alone).
func (s *Service) ownWorkspace() string {
	if len(s.opts.Workspaces) > 0 {
		return s.opts.Workspaces[0]
	}
	if s.opts.Node != "" {
		return NodeWorkspace(s.opts.Node)
	}
	return ""
}

// Serves reports whether this Service's node may drive a run that needs workspace ws:
// "" (the run only calls APIs), one of its Workspaces, or its own NodeWorkspace.
func (s *Service) Serves(ws string) bool {
	return ws == "" || slices.Contains(s.opts.Workspaces, ws) ||
		(s.opts.Node != "" && ws == NodeWorkspace(s.opts.Node))
}

// notServed says why this node does not resume a run that needs workspace ws, and the fix.
func (s *Service) notServed(ws string) string {
	if node, ok := strings.CutPrefix(ws, nodeWorkspacePrefix); ok {
		return fmt.Sprintf("its agents used the local tools of node %s, which names no workspace ([node] workspaces), so only that node may go on with it: start a daemon on that node's state dir", node)
	}
	mine := "this node serves none"
	if len(s.opts.Workspaces) > 0 {
		mine = fmt.Sprintf("this node serves %q", s.opts.Workspaces)
	}
	return fmt.Sprintf("its agents use local tools in workspace %q and %s ([node] workspaces): resume it on a node that serves %q, or, if this machine's [tools] workspace is that checkout, add %q to [node] workspaces",
		ws, mine, ws, ws)
}

// runWorkspace is the workspace one attempt of a run has recorded, shared by its calls.
type runWorkspace struct {
	mu   sync.Mutex
	name string
}

// bindWorkspace records, before the run's first call that uses the local workspace, the
// workspace it needs: from then on only a node serving it takes the run over. The write is
// fenced on the attempt and lands before the call starts.
func (h *host) bindWorkspace(ctx context.Context) error {
	w := &h.run.workspace
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.name != "" {
		return nil
	}
	ws := h.e.ownWorkspace()
	if ws == "" {
		return nil
	}
	if err := h.store().UpdateRun(ctx, h.run.ID, storage.RunUpdate{Workspace: &ws}); err != nil {
		return fmt.Errorf("record the workspace %q the run needs: %w", ws, err)
	}
	w.name = ws
	return nil
}

// Waiting says why a run no node drives is not taken over, as `luft status` shows it: a
// run that needs a workspace waits for a node that serves it ("" for any other run, and
// for a run whose lease has not lapsed or whose resume time has not come).
func Waiting(r storage.Run, now time.Time) string {
	if r.Workspace == "" {
		return ""
	}
	var since string
	switch {
	case (r.Status == storage.StatusRunning || r.Status == storage.StatusInterrupted) && !r.LeaseUntil.IsZero() && !now.Before(r.LeaseUntil):
		since = fmt.Sprintf("the lease of node %s lapsed %s ago", r.Node, now.Sub(r.LeaseUntil).Round(time.Second))
	case r.Status == storage.StatusSuspended && !r.ResumeAfter.IsZero() && !now.Before(r.ResumeAfter):
		since = fmt.Sprintf("its resume time passed %s ago", now.Sub(r.ResumeAfter).Round(time.Second))
	default:
		return ""
	}
	if node, ok := strings.CutPrefix(r.Workspace, nodeWorkspacePrefix); ok {
		return fmt.Sprintf("waiting for node %s, whose local tools it used (%s)", node, since)
	}
	return fmt.Sprintf("waiting for a node that serves workspace %s (%s)", r.Workspace, since)
}
