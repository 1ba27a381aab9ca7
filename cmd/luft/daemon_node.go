package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// daemonNode is the daemon as a node of its store: its id, its lease keeper, and the
// store of its own the keeper renews on (rule: heartbeats never queue behind the node's
// journal writes).
type daemonNode struct {
	keeper *node.Keeper
	store  storage.DB
	svc    atomic.Pointer[runtime.Service] // set once the host's Service exists
	log    *log.Logger
}

// newNode makes the daemon of state dir dir a node: its id (node.ID), and a lease keeper
// on a store of its own, with the config's [node] lease and heartbeat.
func newNode(ctx context.Context, e *env, g *globalFlags, dir string, logw io.Writer) (*daemonNode, error) {
	cfg, err := loadConfig(e, g)
	if err != nil {
		return nil, err
	}
	id, err := node.ID(dir)
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, e, g, false)
	if err != nil {
		return nil, err
	}
	n := &daemonNode{store: st, log: log.New(logw, "", log.LstdFlags|log.LUTC)}
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

func (n *daemonNode) logf(format string, args ...any) { n.log.Printf(format, args...) }

// Close closes the keeper's store.
func (n *daemonNode) Close() { n.store.Close() }
