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

	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// cliNodeSuffix ends the node id of the luft commands of a state dir that host a run
// themselves on PostgreSQL (`luft run` without a daemon): "<state dir's node id>.cli".
const cliNodeSuffix = ".cli"

// daemonNode is a process as a node of its store: its id, its lease keeper, and the store
// of its own the keeper renews on (rule: heartbeats never queue behind the node's journal
// writes). The daemon is one; so is a `luft run` that hosts its run on PostgreSQL.
type daemonNode struct {
	keeper *node.Keeper
	store  storage.DB
	svc    atomic.Pointer[runtime.Service] // set once the host's Service exists
	logf   func(format string, args ...any)
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
