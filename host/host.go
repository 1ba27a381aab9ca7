package host

import (
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/setup"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// DefaultSlots are the concurrent turns per lane when neither the door nor the config
// sets them.
const DefaultSlots = 8

// Options say what a host's backends are built from.
type Options struct {
	// StateDir is where the host's runs live; agents may not write it.
	StateDir string
	Config   config.Config
	// Getenv is the environment the backends are configured from (OPENAI_*, LUFT_MODEL,
	// LUFT_MOCK_*, the keys named by api_key_env).
	Getenv func(string) string
	// MockFile is --mock-file: scripted replies registered as "mockfile"; "" = none.
	MockFile string
}

// ServeOptions say how a host serves runs: its scheduler and its Service.
type ServeOptions struct {
	// Slots are the concurrent turns per lane: with SlotsGiven they beat the config's
	// [scheduler] slots, else the config's win when set; 0 = DefaultSlots.
	Slots      int
	SlotsGiven bool
	// Clock times the scheduler's and the runs' waits; nil = the wall clock (read from
	// Now for the runs when Now is set).
	Clock scheduler.Clock
	Now   func() time.Time
	// Caller is who the host's runs are fair-shared as ("cli", "daemon", "mcp", "embed").
	Caller string
	// AskApprovals parks a call that needs approval until it is answered; set it only
	// where an answer can be given (runtime.Options.AskApprovals).
	AskApprovals bool
	// WrapScheduler, when set, wraps the scheduler before the Service gets it (the
	// daemon's gate, which holds turns while it drains).
	WrapScheduler func(scheduler.Scheduler) scheduler.Scheduler
	// Node and Lease make the Service a node's (runtime.Options.Node, .Lease): the
	// daemon's. Logf is the host's log (runtime.Options.Logf).
	Node  string
	Lease runtime.Lease
	Logf  func(format string, args ...any)
}

// Host is a host's wiring: its backends, and once Serve has run the one scheduler every
// turn of its runs passes and the Service every door stands on.
type Host struct {
	opts     Options
	Backends *setup.Backends
	// Registry is what Serve gives the Service: the backends' registry, which a door may
	// replace before Serve (the Go API adds the backends its program registers).
	Registry  *adapters.Registry
	Scheduler scheduler.Scheduler
	Service   *runtime.Service
}

// Open is a host's first step: its backends from the config, the environment and the
// mock file, under the host's policy. Its errors are mistakes in that input. Close
// stops what the backends start.
func Open(o Options) (*Host, error) {
	b, err := openBackends(o)
	if err != nil {
		return nil, err
	}
	return &Host{opts: o, Backends: b, Registry: b.Registry}, nil
}

// openBackends builds the backend registry of the config (adapters/setup), protecting the
// state dir and the config file from the agents.
func openBackends(o Options) (*setup.Backends, error) {
	return setup.Open(setup.Options{Config: o.Config, Getenv: o.Getenv, MockFile: o.MockFile,
		Protected: ProtectedPaths(o.StateDir, o.Config)})
}

// Serve is a host's second step: the scheduler, with a lane per configured backend, and
// the Service over st and the host's registry. st stays the caller's to close.
func (h *Host) Serve(st storage.Store, o ServeOptions) error {
	h.Scheduler = h.newScheduler(st, o)
	svc, err := h.newService(st, o)
	if err != nil {
		return err
	}
	h.Service = svc
	return nil
}

// newScheduler is the one scheduler of the host, its lanes from the config.
func (h *Host) newScheduler(st storage.Store, o ServeOptions) scheduler.Scheduler {
	slots := o.Slots
	if slots == 0 {
		slots = DefaultSlots
	}
	ex := scheduler.NewExecutor(SchedulerConfig(h.opts.Config, slots, o.SlotsGiven), o.Clock)
	h.share(ex, st, o)
	var s scheduler.Scheduler = ex
	if o.WrapScheduler != nil {
		s = o.WrapScheduler(s)
	}
	return s
}

// newService is the Service over st: the host's registry and scheduler, the config's
// limits on what a run records.
func (h *Host) newService(st storage.Store, o ServeOptions) (*runtime.Service, error) {
	return runtime.New(runtime.Options{
		Store:        st,
		StateDir:     h.opts.StateDir,
		Backends:     h.Registry,
		Scheduler:    h.Scheduler,
		Clock:        o.Clock,
		Now:          o.Now,
		Caller:       o.Caller,
		Events:       EventLimits(h.opts.Config.Limits),
		AskApprovals: o.AskApprovals,
		Node:         o.Node,
		Lease:        o.Lease,
		Logf:         o.Logf,
	})
}

// Config is the config the host was built from.
func (h *Host) Config() config.Config { return h.opts.Config }

// Close stops what the backends started (upstream MCP servers). The Service's store is
// its opener's to close, before this.
func (h *Host) Close() error { return h.Backends.Close() }
