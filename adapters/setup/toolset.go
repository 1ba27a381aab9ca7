package setup

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/luft-run/luft/adapters/mcptools"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/config"
)

// toolset resolves the tools agents ask for: the built-ins at once, and the tools of the
// [mcp_servers] ("server__tool") once an agent first asks for one, so a run whose agents
// use no upstream tool never starts those servers. Both go through one tools.Set, so the
// approval policy covers upstream tools too.
type toolset struct {
	cfg     tools.Config
	servers []mcptools.Server
	base    *tools.Set

	mu       sync.Mutex
	full     *tools.Set
	upstream *mcptools.Upstream
	closed   bool
}

func newToolset(cfg config.Config, protected []string) (*toolset, error) {
	tc := tools.Config{Workspace: cfg.Tools.Workspace, AllowCommands: cfg.Tools.AllowCommands,
		Approval: tools.Approval(cfg.Tools.Approval), Destructive: cfg.Tools.Destructive, CommandTimeout: cfg.Tools.CommandTimeout,
		Protected: protected, Env: cfg.Tools.Env, Writable: cfg.Tools.Writable}
	ts := &toolset{cfg: tc}
	for _, name := range slices.Sorted(maps.Keys(cfg.MCPServers)) {
		s := cfg.MCPServers[name]
		ts.servers = append(ts.servers, mcptools.Server{Name: name, Command: s.Command, Args: s.Args, Env: s.Env, PassEnv: s.PassEnv, URL: s.URL})
	}
	// Names in [tools] destructive may be upstream tools, which are not known before the
	// servers are started: check only the built-in ones now.
	builtin := tc
	builtin.Destructive = nil
	for _, n := range tc.Destructive {
		if !strings.Contains(n, "__") {
			builtin.Destructive = append(builtin.Destructive, n)
		}
	}
	base, err := tools.New(builtin)
	if err != nil {
		return nil, err
	}
	ts.base = base
	return ts, nil
}

// Resolve implements adapters.ToolResolver. The servers start under ctx (the asking
// call's: a cancelled run does not wait for them); a failure is not kept, so a later call
// tries again.
func (t *toolset) Resolve(ctx context.Context, names []string) ([]tools.Tool, error) {
	upstream := false
	for _, n := range names {
		upstream = upstream || strings.Contains(n, "__")
	}
	if !upstream || len(t.servers) == 0 {
		return t.base.Resolve(names)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.full == nil {
		if t.closed {
			return nil, errors.New("tools: the run has ended; its MCP servers are stopped")
		}
		cctx, cancel := context.WithTimeout(ctx, mcptools.ConnectTimeout)
		defer cancel()
		up, err := mcptools.Open(cctx, t.servers)
		if err != nil {
			return nil, err
		}
		full, err := tools.New(t.cfg, up.Tools()...)
		if err != nil {
			up.Close()
			return nil, err
		}
		t.upstream, t.full = up, full
	}
	return t.full.Resolve(names)
}

// Close stops the upstream servers a run started.
func (t *toolset) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.upstream != nil {
		return t.upstream.Close()
	}
	return nil
}
