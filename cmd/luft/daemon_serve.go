package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/runtime"
)

// daemonLogMax is the size at which daemon.log is rotated to daemon.log.1.
const daemonLogMax = 10 << 20

// serveDaemon runs the daemon in this process until SIGTERM/SIGINT or a shutdown request.
func serveDaemon(ctx context.Context, e *env, g *globalFlags, f *daemonFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	gate := daemon.NewGate()
	dir, err := filepath.Abs(stateDir(e, g))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	logw, err := daemon.OpenLog(filepath.Join(dir, daemon.LogFile), daemonLogMax)
	if err != nil {
		return err
	}
	defer logw.Close()
	nd, err := newNode(ctx, e, g, dir, logw)
	if err != nil {
		return err
	}
	defer nd.Close()
	// Hosted runs park a call that needs approval: an MCP client or POST
	// /api/runs/{id}/approve answers it.
	h, err := serveHost(ctx, e, g, host.ServeOptions{Caller: "daemon", AskApprovals: true, WrapScheduler: gate.Wrap,
		Node: nd.keeper.ID(), Lease: nd.keeper, Logf: nd.logf})
	if err != nil {
		return err
	}
	defer h.Close()
	cfg, st, svc, sched := h.cfg, h.store, h.Service, h.Scheduler
	nd.svc.Store(svc)
	var px *proxy.Proxy
	defer func() {
		if px != nil {
			px.Close()
		}
	}()
	v := buildVersion()
	d, err := daemon.New(daemon.Options{
		StateDir: dir, Service: svc, Store: st, Version: v, Listen: f.listen, Token: e.getenv("LUFT_TOKEN"),
		Grace: f.grace, Gate: gate, Log: logw, Now: e.now, Keeper: nd.keeper,
		NewSpec: hostedSpec(h.Registry, cfg),
		Ready: func(info daemon.Info) {
			readyFD(e, info)
		},
		Mounts: func(d *daemon.Daemon) []daemon.Mount {
			mounts := mcpMounts(d, svc, v, logw, cfg)
			// The proxy door at /v1/: its turns go through the daemon's one scheduler.
			ups, def := proxy.FromConfig(cfg, e.getenv)
			p, err := proxy.New(proxy.Options{Upstreams: ups, Default: def, Scheduler: sched, Service: svc, Log: logw,
				Secret: d.Token(), IdleTTL: cfg.Proxy.IdleTimeout, MaxBody: cfg.Proxy.MaxBody})
			if err != nil {
				fmt.Fprintf(logw, "luft: proxy: %v\n", err)
				return mounts
			}
			px = p
			return append(mounts, daemon.Mount{Pattern: "/v1/", Handler: p, OpenOnLoopback: true})
		},
	})
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	stop := e.notify(sigs)
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := d.Run(sctx); err != nil {
		if errors.Is(err, daemon.ErrAlreadyRunning) {
			return &exitError{code: exitFailed, err: err}
		}
		return err
	}
	return nil
}

// hostedSpec turns a start request of a door (the API, MCP) into what the Service runs:
// the backend must exist, and the config's limits apply.
func hostedSpec(backends runtime.BackendSource, cfg config.Config) func(daemon.StartRequest) (runtime.Spec, error) {
	return func(req daemon.StartRequest) (runtime.Spec, error) {
		if _, err := backends.Get(req.Backend); err != nil {
			return runtime.Spec{}, fmt.Errorf("backend: %w", err)
		}
		s := req.Spec()
		if s.Class == "" {
			s.Class = agent.ClassInteractive
		}
		if s.Limits.MaxAgentCalls <= 0 {
			s.Limits.MaxAgentCalls = 10000
		}
		s.Limits.MaxLogBytes, s.Limits.MaxReportBytes = cfg.Limits.MaxLogBytes, cfg.Limits.MaxReportBytes
		return s, nil
	}
}
