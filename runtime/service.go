package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// BackendSource resolves a backend id ("" = the default) to a backend.
type BackendSource interface {
	Get(id string) (adapters.Backend, error)
}

// Options configure a Service.
type Options struct {
	Store     storage.Store       // required: runs, events and the journal
	StateDir  string              // where copies of each run's scripts go (runs/<id>/); "" = none
	Backends  BackendSource       // required
	Scheduler scheduler.Scheduler // admits every model turn; default: an Executor, 8 slots per lane
	Now       func() time.Time    // default: Clock.Now
	// Clock times every wait of a run (timeout_ms, budgets, --timeout, retry backoff,
	// polls); default: the wall clock, reading the time from Now when that is set.
	Clock  scheduler.Clock
	Caller string // who starts runs ("cli", an MCP session id, ...)
	// ReadFile reads the main workflow file and, on resume, the files a run pinned;
	// default os.ReadFile. Files loaded by workflow() are always read from inside the
	// calling script's folder (readWorkflowFile), never through this.
	ReadFile func(path string) ([]byte, error)
	// Backoff is the wait before retry attempt n (n >= 2) of a failed call; default
	// exponential from 200 ms with jitter, capped at 10 s.
	Backoff func(attempt int) time.Duration
	// CancelPoll is how often a run looks for a cancel request or an approval answer made
	// by another process; default 250 ms. On a store that notifies (PostgreSQL) the run
	// hears of them at once, and polls only every 4 × CancelPoll while its listener is up.
	CancelPoll time.Duration
	// PID is the process id recorded as a run's owner; default os.Getpid().
	PID int
	// Events bounds what each run records; zero fields take DefaultEventLimits.
	Events EventLimits
	// AskApprovals parks a destructive tool call under [tools] approval = "ask" until
	// Approve answers it (the run shows awaiting_approval). Set it where someone can
	// answer: the daemon, an MCP server, a terminal's live view. Without it such a call
	// fails its agent call with *tools.ApprovalError, so a non-interactive run never
	// waits for an answer no one can give.
	AskApprovals bool
	// Node is the id of the node this process is (package node), recorded as the owner
	// of each run it starts or resumes; "" = none (a run is then held by PID alone).
	Node string
	// Lease, when set, holds each run this Service drives under the node's lease (a
	// daemon's: package node renews Held and reports Lost): a run records its end, and
	// the self-fence stops calls and tools once the lease may have lapsed. nil = runs are
	// held by their process (PID), as a CLI command holds them.
	Lease Lease
	// Workspaces are the names of the workspace this node's tools and coding agents work
	// in ([node] workspaces): a run that uses them records the first, and Claimable and
	// Resume take only runs whose workspace is one of them (or none, or this node's own:
	// NodeWorkspace(Node), what a run records here when Workspaces is empty).
	Workspaces []string
	// Logf, when set, is told what a reader of the host's log should know (a run stopped
	// since another node claimed it).
	Logf func(format string, args ...any)
}

// Service starts, resumes and inspects runs: the one surface the CLI, the MCP server, the
// daemon and the Go API use. One Service per process; it is safe for concurrent use.
type Service struct {
	opts Options

	mu        sync.Mutex
	live      map[string]*Run                    // runs driven by this process
	claimed   map[string]int                     // runs claimed and not launched yet: id → attempt
	approvals map[string][]chan storage.Approval // run id/approval id → calls parked on it
	hosted    map[string]int                     // runs a door of this process drives without a script (OpenExternal)
	heldExt   map[string]bool                    // those of hosted recorded under the node's lease (Held)

	quiesced   atomic.Bool // Quiesce was called
	notifyOnce sync.Once   // subscribes to the store's notices (listenNotices)
	externalWatch
}

// Quiesce stops the runs of this Service from going into new work while their host
// shuts down: from now on a run that reaches phase() is suspended there, without
// starting the phase (a resume starts it). Calls already going are left to finish; the
// host also stops admitting turns (the daemon's Gate).
func (s *Service) Quiesce() { s.quiesced.Store(true) }

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Store == nil {
		return nil, errors.New("runtime: Options.Store is nil")
	}
	if opts.Backends == nil {
		return nil, errors.New("runtime: Options.Backends is nil")
	}
	if opts.Scheduler == nil {
		opts.Scheduler = scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 8}}, nil)
	}
	switch {
	case opts.Clock != nil && opts.Now == nil:
		opts.Now = opts.Clock.Now
	case opts.Clock == nil && opts.Now != nil:
		opts.Clock = nowClock{opts.Now}
	case opts.Clock == nil:
		opts.Clock, opts.Now = scheduler.RealClock(), time.Now
	}
	if opts.ReadFile == nil {
		opts.ReadFile = os.ReadFile
	}
	if opts.Backoff == nil {
		opts.Backoff = defaultBackoff
	}
	if opts.Caller == "" {
		opts.Caller = "local"
	}
	if opts.CancelPoll <= 0 {
		opts.CancelPoll = 250 * time.Millisecond
	}
	if opts.PID == 0 {
		opts.PID = os.Getpid()
	}
	return &Service{opts: opts, live: map[string]*Run{}, claimed: map[string]int{}, hosted: map[string]int{}, heldExt: map[string]bool{}}, nil
}

// host marks run id as driven by this process though no script of this Service drives it
// (an external run: see OpenExternal), so Status and List show it running rather than
// interrupted; call release when the run ends.
func (s *Service) host(id string) (release func()) {
	s.mu.Lock()
	s.hosted[id]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hosted[id]--; s.hosted[id] <= 0 {
				delete(s.hosted, id)
				delete(s.heldExt, id)
			}
			s.mu.Unlock()
		})
	}
}

// holdExternal has Held return external run id (recorded, at attempt 1) while it is
// hosted, on a node with a lease.
func (s *Service) holdExternal(id string) {
	if s.opts.Lease == nil {
		return
	}
	s.mu.Lock()
	if s.hosted[id] > 0 {
		s.heldExt[id] = true
	}
	s.mu.Unlock()
}

// Live returns the runs this process drives now.
func (s *Service) Live() []*Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Run, 0, len(s.live))
	for _, r := range s.live {
		out = append(out, r)
	}
	return out
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// alive reports whether pid, recorded as the owner of a running run, still drives it.
func (s *Service) alive(id string, pid int) bool {
	if pid == s.opts.PID {
		s.mu.Lock()
		_, ok := s.live[id]
		_, claimed := s.claimed[id]
		ok = ok || claimed || s.hosted[id] > 0
		s.mu.Unlock()
		return ok
	}
	return processAlive(pid)
}

// driven reports whether a live process, this one or another, drives the run. A run held
// under a lease is driven while its lease lasts (by the lease end on its row), unless its
// process, on this host, is known gone; one held by a process is driven while that
// process lives, which only a process of the same host can tell: a run of another host's
// process counts as driven.
func (s *Service) driven(r storage.Run) bool {
	if r.Status != storage.StatusRunning {
		return false
	}
	here := node.SameHost(r.Node)
	if !r.LeaseUntil.IsZero() {
		switch {
		case r.PID == s.opts.PID && r.Node == s.opts.Node:
			return s.alive(r.ID, r.PID)
		case here && r.PID != 0 && !processAlive(r.PID):
			return false
		}
		return s.opts.Now().Before(r.LeaseUntil)
	}
	if !here {
		return true
	}
	return r.PID != 0 && s.alive(r.ID, r.PID)
}

func (s *Service) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func defaultBackoff(attempt int) time.Duration {
	d := 200 * time.Millisecond << min(attempt-2, 6)
	if d > 10*time.Second {
		d = 10 * time.Second
	}
	// Full jitter keeps many failing calls from retrying in lockstep.
	return time.Duration(float64(d) * (0.5 + 0.5*rand.Float64()))
}

// gone reports whether a run nobody drives (!driven) surely has no process left that could
// still write to it: one without a lease, or one whose lease names this process or a
// dead process of this host. A lapsed lease alone is not enough: its node may be paused
// (SIGSTOP, a VM stopped) and wake.
func (s *Service) gone(r storage.Run) bool {
	if r.LeaseUntil.IsZero() {
		return true
	}
	if r.PID == s.opts.PID && r.Node == s.opts.Node {
		return true
	}
	return node.SameHost(r.Node) && r.PID != 0 && !processAlive(r.PID)
}
