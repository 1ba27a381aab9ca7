package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
func openStore(ctx context.Context, e *env, g *globalFlags, mustExist bool) (*storage.SQLite, error) {
	dir := stateDir(e, g)
	if mustExist {
		if _, err := os.Stat(filepath.Join(dir, storage.DBFile)); err != nil {
			return nil, usageErr("no luft state in %s (run a workflow first, or pass --state-dir / set LUFT_HOME to where your runs are)", dir)
		}
	}
	st, err := storage.Open(ctx, dir)
	if err != nil {
		if errors.Is(err, storage.ErrCorruptState) || errors.Is(err, storage.ErrSchemaTooNew) {
			return nil, usageErr("%v", err)
		}
		return nil, fmt.Errorf("open state dir %s: %w", dir, err)
	}
	return st, nil
}

// newService builds the runtime over an open store, with the process's one admission
// scheduler: every lane (backend + model) gets slots concurrent turns and learns its
// rate-limit budgets from the headers of its responses.
func newService(e *env, st storage.Store, dir string, backends runtime.BackendSource, slots int) (*runtime.Service, error) {
	return runtime.New(runtime.Options{
		Store:     st,
		StateDir:  dir,
		Backends:  backends,
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: slots}}, nil),
		Now:       e.now,
		Caller:    "cli",
	})
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
