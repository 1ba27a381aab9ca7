package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/luft-run/luft/config"
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

// schedulerConfig is the admission scheduler's configuration: a lane per configured
// backend (its slots, TPM, RPM, replicas and fallback; "ID/*" for its other models) and,
// for every other lane, slots concurrent turns (--max-concurrency when given, else
// [scheduler] slots, else 8). Lanes learn what is not configured from the headers of
// their responses; an OpenAI-compatible lane with no configured limits scouts (one turn
// until its first answer) so that the first burst of a run does not meet a 429.
func schedulerConfig(cfg config.Config, slots int, slotsFromFlag bool) scheduler.Config {
	if !slotsFromFlag && cfg.Scheduler.Slots > 0 {
		slots = cfg.Scheduler.Slots
	}
	sc := scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: slots}, SuspendAfter: cfg.Scheduler.SuspendAfter,
		Lanes: map[string]scheduler.LaneConfig{
			"openai/*": {Slots: slots, Scout: true}, // the backend OPENAI_BASE_URL/OPENAI_API_KEY make
		}}
	for id, b := range cfg.Backends {
		n, tpm, rpm, replicas, fallback := cfg.Lane(id)
		if n == 0 {
			n = slots
		}
		lane := scheduler.LaneConfig{Slots: n, TPM: tpm, RPM: rpm, Replicas: 1 + len(replicas), Scout: b.Type == "openai"}
		if fallback != "" {
			lane.Fallback = fallback + "/" + cfg.Backends[fallback].Model
		}
		sc.Lanes[id+"/"+b.Model] = lane
		sc.Lanes[id+"/*"] = lane
	}
	return sc
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

// eventLimits applies the config's [limits] on what a run records.
func eventLimits(l config.Limits) func(*runtime.Options) {
	return func(o *runtime.Options) {
		o.Events = runtime.EventLimits{MaxEventBytes: l.MaxEventBytes, MaxEvents: l.MaxEvents, MaxTotalBytes: l.MaxEventsBytes}
	}
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
