package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// stateDir is where runs live: --state-dir, else LUFT_HOME, else ./.luft.
func stateDir(e *env, g *globalFlags) string {
	if g.stateDir != "" {
		return g.stateDir
	}
	if h := e.getenv("LUFT_HOME"); h != "" {
		return h
	}
	return ".luft"
}

// openStore opens the state dir. With mustExist, a missing state dir is an input error
// instead of being created (commands that only read runs).
func openStore(ctx context.Context, e *env, g *globalFlags, mustExist bool) (storage.DB, error) {
	dir := stateDir(e, g)
	url, err := storageURL(e, g)
	if err != nil {
		return nil, err
	}
	if mustExist && url == "" {
		if _, err := os.Stat(filepath.Join(dir, storage.DBFile)); err != nil {
			return nil, usageErr("no luft state in %s (run a workflow first, or pass --state-dir / set LUFT_HOME to where your runs are)", dir)
		}
	}
	st, err := storage.OpenURL(ctx, url, dir)
	if err != nil {
		if errors.Is(err, storage.ErrCorruptState) || errors.Is(err, storage.ErrSchemaTooNew) || errors.Is(err, storage.ErrBadStorageURL) {
			return nil, usageErr("%v", err)
		}
		if url != "" {
			return nil, err // it names the database
		}
		return nil, fmt.Errorf("open state dir %s: %w", dir, err)
	}
	return st, nil
}

// loadConfig reads the config file (--config, else ./luft.toml, else the user's
// config.toml). An invalid file is an input error naming the file, line and key.
func loadConfig(e *env, g *globalFlags) (config.Config, error) {
	cfg, err := config.Load(g.configPath, e.getenv, e.getenv("HOME"))
	if err != nil {
		return cfg, usageErr("invalid config: %v", err)
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(e.stderr, "luft: warning: config %s\n", w)
	}
	return cfg, nil
}

// schedulerConfig is the admission scheduler's configuration (package host decides
// it for every door): slots concurrent turns per lane, unless the config sets them and
// --max-concurrency was not given.
func schedulerConfig(cfg config.Config, slots int, slotsFromFlag bool) scheduler.Config {
	return host.SchedulerConfig(cfg, slots, slotsFromFlag)
}

func newService(e *env, st storage.Store, dir string, backends runtime.BackendSource, sc scheduler.Config, more ...func(*runtime.Options)) (*runtime.Service, error) {
	o := runtime.Options{
		Store:     st,
		StateDir:  dir,
		Backends:  backends,
		Scheduler: scheduler.NewExecutor(sc, nil),
		Now:       e.now,
		Caller:    "cli",
	}
	for _, f := range more {
		f(&o)
	}
	return runtime.New(o)
}

// runRefError maps a failure to find a run to an input error.
func runRefError(err error) error {
	if errors.Is(err, storage.ErrRunNotFound) || errors.Is(err, storage.ErrAmbiguousRun) {
		if strings.Contains(err.Error(), "luft list") {
			return usageErr("%v", err)
		}
		return usageErr("%v (luft list shows your runs)", err)
	}
	return err
}

// served is a host this process serves runs from (the daemon, a standalone MCP server):
// its absolute state dir, its backends, scheduler and Service (package host), and the
// store under them.
type served struct {
	*host.Host
	dir   string
	cfg   config.Config
	store storage.DB
}

// serveHost opens the state dir's config, backends and store and serves o's Service over
// them, making the state dir absolute (in g too, so later lookups agree) and private to
// the user. Its runs are timed by e's clock.
func serveHost(ctx context.Context, e *env, g *globalFlags, o host.ServeOptions) (*served, error) {
	dir, err := filepath.Abs(stateDir(e, g))
	if err != nil {
		return nil, err
	}
	g.stateDir = dir
	cfg, err := loadConfig(e, g)
	if err != nil {
		return nil, err
	}
	h, err := openBackends(e, g, cfg, "")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		h.Close()
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	st, err := openStore(ctx, e, g, false)
	if err != nil {
		h.Close()
		return nil, err
	}
	o.Now = e.now
	if o.Node == "" {
		// The owner of the runs this process starts: the state dir's node, with this pid.
		// An unreadable node.id leaves them held by pid alone.
		o.Node, _ = node.ID(dir)
	}
	if err := h.Serve(st, o); err != nil {
		st.Close()
		h.Close()
		return nil, err
	}
	return &served{Host: h, dir: dir, cfg: cfg, store: st}, nil
}

// Close closes the store, then the backends.
func (s *served) Close() {
	s.store.Close()
	s.Host.Close()
}
