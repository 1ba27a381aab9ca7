package setup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/luft-run/luft/adapters/mcptools"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/config"
)

// toolset resolves the tools agents ask for: the built-ins at once, and the tools of an
// [mcp_servers] server ("server__tool") once an agent first asks for one of that server's
// tools, so a run whose agents use no upstream tool never starts any server, and a server
// that cannot start fails only the agents that asked for its tools. Every tool goes
// through one tools.Set, so the approval policy covers upstream tools too.
type toolset struct {
	cfg     tools.Config
	servers map[string]mcptools.Server // by name
	base    *tools.Set

	mu        sync.Mutex
	full      *tools.Set // the built-ins and the started servers' tools; nil: none started
	upstreams []*mcptools.Upstream
	started   map[string]bool
	upTools   []tools.Tool
	closed    bool
}

// ToolsConfig is the tool set of cfg's [tools]: the workspace, the commands and the
// folders agents may use, the approval policy and the destructive tools (the names of
// upstream tools, "server__tool", among them); protected are the paths no agent may
// write. It is the one reading of [tools]: the backends' tools and the MCP door's
// catalog both start from it.
func ToolsConfig(cfg config.Config, protected []string) tools.Config {
	return tools.Config{Workspace: cfg.Tools.Workspace, AllowCommands: cfg.Tools.AllowCommands,
		Approval: tools.Approval(cfg.Tools.Approval), Destructive: cfg.Tools.Destructive, CommandTimeout: cfg.Tools.CommandTimeout,
		Protected: protected, Env: cfg.Tools.Env, Writable: cfg.Tools.Writable,
		Readable: cfg.Tools.Readable, Network: cfg.Tools.Network, Unconfined: cfg.Tools.Unconfined}
}

// BuiltinToolsConfig is ToolsConfig for the built-in tools alone: the destructive names
// of upstream tools are left out, since such a tool is known only once its server runs.
func BuiltinToolsConfig(cfg config.Config, protected []string) tools.Config {
	return withServers(ToolsConfig(cfg, protected), nil)
}

// withServers is c for the built-ins and the tools of the started servers: the [tools]
// destructive names that belong to them.
func withServers(c tools.Config, started map[string]bool) tools.Config {
	all := c.Destructive
	c.Destructive = nil
	for _, n := range all {
		if server, _, up := strings.Cut(n, "__"); !up || started[server] {
			c.Destructive = append(c.Destructive, n)
		}
	}
	return c
}

func newToolset(cfg config.Config, protected []string) (*toolset, error) {
	tc := ToolsConfig(cfg, protected)
	ts := &toolset{cfg: tc, servers: map[string]mcptools.Server{}, started: map[string]bool{}}
	for _, name := range slices.Sorted(maps.Keys(cfg.MCPServers)) {
		s := cfg.MCPServers[name]
		ts.servers[name] = mcptools.Server{Name: name, Command: s.Command, Args: s.Args, Env: s.Env, PassEnv: s.PassEnv, URL: s.URL}
	}
	// Names in [tools] destructive may be upstream tools, which are not known before their
	// server is started: check only that such a name's server is configured now.
	for _, n := range tc.Destructive {
		if server, _, up := strings.Cut(n, "__"); up {
			if _, ok := ts.servers[server]; !ok {
				return nil, fmt.Errorf("tools: [tools] destructive names %q, but no [mcp_servers.%s] is configured", n, server)
			}
		}
	}
	base, err := tools.New(ts.toolConfig())
	if err != nil {
		return nil, err
	}
	ts.base = base
	return ts, nil
}

// toolConfig is the tools.Config of the built-ins and the started servers' tools.
func (t *toolset) toolConfig() tools.Config { return withServers(t.cfg, t.started) }

// Resolve implements adapters.ToolResolver. The servers whose tools are named and are not
// running yet start under ctx (the asking call's: a cancelled run does not wait for
// them); a failure is not kept, so a later call tries again.
func (t *toolset) Resolve(ctx context.Context, names []string) ([]tools.Tool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var need []mcptools.Server
	for _, n := range names {
		server, _, up := strings.Cut(n, "__")
		if s, ok := t.servers[server]; up && ok && !t.started[server] && !slices.ContainsFunc(need, func(x mcptools.Server) bool { return x.Name == server }) {
			need = append(need, s)
		}
	}
	if len(need) > 0 {
		if t.closed {
			return nil, errors.New("tools: the run has ended; its MCP servers are stopped")
		}
		cctx, cancel := context.WithTimeout(ctx, mcptools.ConnectTimeout)
		defer cancel()
		up, err := mcptools.Open(cctx, need)
		if err != nil {
			return nil, err
		}
		for _, s := range need {
			t.started[s.Name] = true
		}
		full, err := tools.New(t.toolConfig(), append(slices.Clone(t.upTools), up.Tools()...)...)
		if err != nil {
			for _, s := range need {
				delete(t.started, s.Name)
			}
			up.Close()
			return nil, err
		}
		t.upstreams, t.upTools, t.full = append(t.upstreams, up), append(t.upTools, up.Tools()...), full
	}
	if t.full == nil {
		return t.base.Resolve(names)
	}
	return t.full.Resolve(names)
}

// Close stops the upstream servers a run started.
func (t *toolset) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	errs := make([]error, len(t.upstreams))
	for i, up := range t.upstreams {
		errs[i] = up.Close()
	}
	return errors.Join(errs...)
}
