package mcp

import (
	"maps"
	"slices"
	"strings"

	"github.com/luft-run/luft/adapters/setup"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/config"
)

// CatalogOf lists the tools of set, each as Resolve gives it to an agent (so a tool the
// approval policy wraps is marked destructive), with the upstream servers.
func CatalogOf(set *tools.Set, approval string, servers []ServerInfo) ToolCatalog {
	if approval == "" {
		approval = string(tools.ApprovalAsk)
	}
	cat := ToolCatalog{Approval: approval, Workspace: set.Workspace(), Tools: []ToolInfo{}, Servers: servers}
	if cat.Servers == nil {
		cat.Servers = []ServerInfo{}
	}
	for _, name := range set.Names() {
		ts, err := set.Resolve([]string{name})
		if err != nil || len(ts) != 1 {
			continue
		}
		sp := ts[0].Spec()
		cat.Tools = append(cat.Tools, ToolInfo{Name: name, Description: sp.Description, Destructive: sp.Destructive})
	}
	return cat
}

// CatalogFromConfig is what sub-agents may call under cfg: the built-in tools of its
// [tools] table and its [mcp_servers].
func CatalogFromConfig(cfg config.Config) (ToolCatalog, error) {
	set, err := tools.New(setup.BuiltinToolsConfig(cfg, nil))
	if err != nil {
		return ToolCatalog{}, err
	}
	var servers []ServerInfo
	for _, name := range slices.Sorted(maps.Keys(cfg.MCPServers)) {
		s := cfg.MCPServers[name]
		servers = append(servers, ServerInfo{Name: name, Command: strings.TrimSpace(s.Command + " " + strings.Join(s.Args, " ")), URL: s.URL})
	}
	cat := CatalogOf(set, cfg.Tools.Approval, servers)
	cat.AllowCommands = cfg.Tools.AllowCommands
	return cat, nil
}
