package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// The suffixes of the node ids of the luft commands of a state dir that host runs
// themselves on PostgreSQL, "<state dir's node id><suffix>": `luft run` without a daemon
// (.cli), `luft mcp serve --standalone` (.mcp) and `luft proxy serve` (.proxy).
const (
	cliNodeSuffix   = ".cli"
	mcpNodeSuffix   = ".mcp"
	proxyNodeSuffix = ".proxy"
)

// daemonNode is a process as a node of its store: its id, its lease keeper, and the store
// of its own the keeper renews on (rule: heartbeats never queue behind the node's journal
// writes). The daemon is one; so is a `luft run` that hosts its run on PostgreSQL.
type daemonNode struct {
	keeper *node.Keeper
	store  storage.DB
	svc    atomic.Pointer[runtime.Service] // set once the host's Service exists
	logf   func(format string, args ...any)
	// base is the state dir's node id, of which a hosting command's id is a suffixed
	// form (hostNode); "" for the daemon.
	base string
}

// hostNode makes a luft command that hosts runs in its own process (`luft run`, `luft mcp
// serve --standalone`, `luft proxy serve`) a node of its own on PostgreSQL, "<state dir's
// node id><suffix>", which holds its runs under a lease renewed on its own connection as a
// daemon does: any daemon of the database takes them over once this process dies or stops
// renewing. It returns nil on SQLite, where the runs are held by this process's pid (a
// daemon of the state dir takes them over once it is gone). The caller passes the node to
// its Service (options), then starts the renewal once the Service exists (hold).
func hostNode(ctx context.Context, e *env, g *globalFlags, suffix string, logf func(string, ...any)) (*daemonNode, error) {
	url, err := storageURL(e, g)
	if err != nil || url == "" {
		return nil, err
	}
	id, err := node.ID(stateDir(e, g))
	if err != nil {
		return nil, err
	}
	n, err := newNodeAs(ctx, e, g, id+suffix, logf)
	if err != nil {
		return nil, err
	}
	n.base = id
	return n, nil
}

// options makes o the Service options of the node's runs: it owns them under its lease,
// and its log is the node's. A run's tools work in the state dir's [tools] workspace, as
// its daemon's do, unless the config names the node's workspaces: a run that uses them
// records the state dir's node's workspace, which its daemon serves, rather than one of
// this node's that no daemon would.
func (n *daemonNode) options(o *runtime.Options, cfg config.Config) {
	o.Node, o.Lease, o.Logf = n.keeper.ID(), n.keeper, n.logf
	if len(cfg.Node.Workspaces) == 0 && n.base != "" {
		o.Workspaces = []string{runtime.NodeWorkspace(n.base)}
	}
}

// serveOptions is options for a host's Service.
func (n *daemonNode) serveOptions(o *host.ServeOptions, cfg config.Config) {
	var ro runtime.Options
	n.options(&ro, cfg)
	o.Node, o.Lease, o.Logf, o.Workspaces = ro.Node, ro.Lease, ro.Logf, ro.Workspaces
}

// hold starts renewing the lease of the runs svc drives (Held) and stopping those another
// node claimed (Lost), until the returned stop is called, which also closes the keeper's
// store: call it once the runs' ends are stored. A nil node (SQLite) holds nothing.
func (n *daemonNode) hold(svc *runtime.Service) (stop func()) {
	if n == nil {
		return func() {}
	}
	n.svc.Store(svc)
	stopRenew := n.renew()
	var once sync.Once
	return func() { once.Do(func() { stopRenew(); n.Close() }) }
}

// newNode makes the daemon of state dir dir a node: its id (node.ID), and a lease keeper
// on a store of its own, with the config's [node] lease and heartbeat.
func newNode(ctx context.Context, e *env, g *globalFlags, dir string, logw io.Writer) (*daemonNode, error) {
	id, err := node.ID(dir)
	if err != nil {
		return nil, err
	}
	return newNodeAs(ctx, e, g, id, log.New(logw, "", log.LstdFlags|log.LUTC).Printf)
}

// newNodeAs makes this process node id, telling logf what a reader of its log should
// know (a renewal that failed, a run lost to another node).
func newNodeAs(ctx context.Context, e *env, g *globalFlags, id string, logf func(string, ...any)) (*daemonNode, error) {
	cfg, err := loadConfig(e, g)
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, e, g, false)
	if err != nil {
		return nil, err
	}
	n := &daemonNode{store: st, logf: logf}
	n.keeper, err = node.NewKeeper(node.Options{
		Store: st, Node: storage.Node{ID: id, PID: os.Getpid(), StartedAt: time.Now()},
		Lease: cfg.Node.Lease, Every: cfg.Node.Heartbeat,
		Held: func() []storage.Lease {
			if s := n.svc.Load(); s != nil {
				return s.Held()
			}
			return nil
		},
		Lost: func(l []storage.Lease) {
			if s := n.svc.Load(); s != nil {
				s.Lost(l)
			}
		},
		Logf: n.logf,
	})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("[node]: %w", err)
	}
	return n, nil
}

// renew renews the node's lease every heartbeat until the returned stop is called (the
// daemon's renewal is its claim loop's, in package daemon).
func (n *daemonNode) renew() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); n.keeper.Run(ctx) }()
	return func() { cancel(); wg.Wait() }
}

// Close closes the keeper's store.
func (n *daemonNode) Close() { n.store.Close() }
