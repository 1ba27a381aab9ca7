package lua

import (
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua/luaval"
)

// Limits are the sandbox limits of one run. Zero fields take the defaults.
type Limits struct {
	MaxAgentCalls  int   // agent() calls per run; default 10,000
	MaxStringBytes int   // largest string a builder may make; default 16 MiB
	MaxCallDepth   int   // Lua call frames per coroutine; default 200
	MaxPcallDepth  int   // nested pcall/xpcall per branch; default 64
	MaxNesting     int   // nested workflow/parallel/pmap/pipeline calls; default 32
	MaxMemoryBytes int64 // Go heap at which the run is stopped; default 4 GiB, < 0 = off
	// MaxLogBytes caps one log()/print() message; a longer one is cut with a marker.
	// Default 1 MiB.
	MaxLogBytes int
	// MaxReportBytes caps the report as JSON: its longest strings are cut with a marker;
	// a value too big even then (its structure alone) ends the run with a limit error.
	// Default 1 MiB.
	MaxReportBytes int
	JSON           luaval.Limits
}

func (l Limits) withDefaults() Limits {
	if l.MaxAgentCalls <= 0 {
		l.MaxAgentCalls = 10000
	}
	if l.MaxStringBytes <= 0 {
		l.MaxStringBytes = 16 << 20
	}
	if l.MaxCallDepth <= 0 {
		l.MaxCallDepth = 200
	}
	if l.MaxPcallDepth <= 0 {
		l.MaxPcallDepth = 64
	}
	if l.MaxNesting <= 0 {
		l.MaxNesting = 32
	}
	if l.MaxMemoryBytes == 0 {
		l.MaxMemoryBytes = 4 << 30
	}
	if l.MaxLogBytes <= 0 {
		l.MaxLogBytes = event.DefaultMaxBytes
	}
	if l.MaxReportBytes <= 0 {
		l.MaxReportBytes = event.DefaultMaxBytes
	}
	return l
}

// Config is what one VM needs to run a workflow.
type Config struct {
	Host    Host
	Limits  Limits
	RunID   string
	Resumed bool
	Attempt int
	// Concurrency is the run's concurrency: the default max_inflight of pipeline stages.
	Concurrency int
	// BranchWindow is how many branches of one parallel call are alive at once when the
	// script sets no max_concurrency; default 32 × Concurrency. Agent calls are bounded
	// by the scheduler anyway, so the window only bounds memory: a 100,000-item fan-out
	// keeps a few hundred coroutines, not 100,000.
	BranchWindow int
	// Args is the decoded --args JSON (nil for none).
	Args any
	// Now is the clock for elapsed times and fresh luft.now values; default time.Now.
	Now func() time.Time
	// Rand returns a fresh random float in [0,1) for luft.random; default math/rand/v2.
	Rand func() float64
	// UUID returns a fresh UUID string for luft.uuid.
	UUID func() string
}
