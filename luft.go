package luft

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// Options configure an Engine. Only StateDir is required.
type Options struct {
	// StateDir holds the runs: luft.db (runs, events, the journal) and runs/<id>/ (the
	// scripts each run loaded). It is created when missing. The CLI's default is
	// ./.luft (or $LUFT_HOME); point both at one folder to see the Engine's runs with
	// `luft list`.
	StateDir string
	// StorageURL, a postgres:// URL, keeps the runs (runs, events, the journal, approvals,
	// tool calls) in that PostgreSQL database instead of luft.db, shared with the daemons
	// and commands that use it (SPEC §9); StateDir still holds runs/<id>/. "" takes the
	// config's [storage] url, and with none SQLite in StateDir. The environment
	// (LUFT_STORAGE_URL) is not read: that is the CLI's.
	StorageURL string
	// ConfigPath is a luft.toml to read ([backends.NAME], [scheduler], [tools],
	// [limits]); Config is one already parsed (config.Parse). At most one may be set.
	// With neither, no file is read: agents run on the offline mock backend unless
	// OPENAI_BASE_URL/OPENAI_API_KEY are set or a custom backend is registered.
	ConfigPath string
	Config     *config.Config
	// Backend is the default backend of calls that name none ("" = the config's
	// default_backend, else mock); it may name a custom backend. Script.Backend
	// overrides it for one run.
	Backend string
	// Concurrency is how many model turns run at once per backend and model (the
	// scheduler's slots per lane) and the default max_inflight of pipeline(); 0 = the
	// config's [scheduler] slots, else 8.
	Concurrency int
	// EventBuffer bounds the channel Run.Events returns; 0 = 64. A reader that falls
	// behind holds up only its own stream (see Run.Events).
	EventBuffer int
	// Getenv reads the environment the backends are configured from (OPENAI_*,
	// LUFT_MODEL, LUFT_MOCK_*, the keys named by api_key_env); nil = os.Getenv.
	Getenv func(string) string
	// Clock times every wait of a run and the scheduler (timeouts, budgets, backoff,
	// rate-limit waits) and stamps events; nil = the wall clock. Tests pass a fake one.
	// RunInfo.CreatedAt, which the store stamps, follows the wall clock.
	Clock Clock
	// Caller is who this Engine's runs are fair-shared as in its scheduler; "" = "embed".
	Caller string
	// Approvals parks a destructive tool call under [tools] approval = "ask" (write_file,
	// edit_file, an MCP tool marked destructiveHint, a command allow_commands does not
	// name) until it is answered: the run shows StatusAwaitingApproval, its
	// RunInfo.PendingApprovals list the call, an EventApprovalRequested says so, and
	// Engine.Approve (or luft approve, over the same state dir) answers. Without it, and
	// without Approve, a destructive tool's call fails its agent call (see ApprovalError)
	// and a command not allowed is refused to the model, so a run never waits for an
	// answer no one gives.
	Approvals bool
	// Approve, when set, is asked each pending approval of the Engine's runs as it comes
	// (several may be asked at once); it implies Approvals. Its answer decides the call;
	// an error or a panic declines it. Engine.Approve may still answer first. Its ctx
	// ends when the run ends or the Engine closes; Close waits for it to return.
	Approve ApproveFunc
}

// Clock is the time source an Engine waits on.
type Clock = scheduler.Clock

// Option adds to what Options say; WithBackend makes one.
type Option interface {
	apply(*settings) error
}

type optionFunc func(*settings) error

func (f optionFunc) apply(s *settings) error { return f(s) }

type settings struct {
	custom []*customBackend
}

// WithBackend registers b as the backend name (letters, digits, dashes; no slash, quote
// or space) for the Engine: agent{backend="name"} runs on it, and so does every call
// when Options.Backend is name. The name may not be one the Engine already has (mock,
// mockfile, openai, the acp:* agents, or one of the config's [backends]).
func WithBackend(name string, b Backend) Option {
	return optionFunc(func(s *settings) error {
		if err := checkBackendName(name); err != nil {
			return fmt.Errorf("WithBackend: %v; give it a short name such as \"mymodel\"", err)
		}
		if b == nil {
			return fmt.Errorf("WithBackend(%q): the backend is nil", name)
		}
		for _, c := range s.custom {
			if c.id == name {
				return fmt.Errorf("WithBackend(%q): registered twice; give each backend its own name", name)
			}
		}
		s.custom = append(s.custom, &customBackend{id: name, b: b})
		return nil
	})
}

// Engine runs workflows: it owns the state dir's store, the backends and the one
// scheduler that admits every model turn of its runs. It is safe for concurrent use.
// Open one Engine per state dir in a process (New refuses a second) and Close it when
// done.
type Engine struct {
	svc      *runtime.Service
	store    storage.DB
	host     *host.Host // its backends and scheduler
	registry *adapters.Registry
	cfg      config.Config
	dir      string
	opts     Options
	warnings []string

	// ctx ends when the Engine closes; event streams stop with it.
	ctx    context.Context
	cancel context.CancelFunc

	// mu is held for reading while a run starts, so Close sees every run started.
	mu     sync.RWMutex
	closed bool

	// asking counts the goroutines that put approvals to Options.Approve.
	asking sync.WaitGroup

	sched   scheduler.Scheduler // the one scheduler every door of this Engine shares
	proxies []io.Closer         // ProxyHandler's, ended by Close
}

// openDirs are the state dirs an open Engine of this process holds. Two Services over
// one dir in one process would each take the other's running runs for runs whose process
// died (they share the pid), and could resume them twice.
var openDirs sync.Map

// New opens an Engine over opts.StateDir. Its errors name the option at fault.
func New(opts Options, more ...Option) (*Engine, error) {
	var set settings
	for i, o := range more {
		if o == nil {
			return nil, fmt.Errorf("luft.New: option %d is nil", i+1)
		}
		if err := o.apply(&set); err != nil {
			return nil, fmt.Errorf("luft.New: %w", err)
		}
	}
	if opts.StateDir == "" {
		return nil, errors.New("luft.New: Options.StateDir is empty; set it to the folder runs are kept in (the CLI uses .luft)")
	}
	if err := config.CheckStorageURL(opts.StorageURL); err != nil {
		return nil, fmt.Errorf("luft.New: Options.StorageURL: %w", err)
	}
	if opts.ConfigPath != "" && opts.Config != nil {
		return nil, errors.New("luft.New: both Options.ConfigPath and Options.Config are set; give one")
	}
	if opts.Concurrency < 0 || opts.Concurrency > config.MaxSlots {
		return nil, fmt.Errorf("luft.New: Options.Concurrency %d is out of range (0 for the default, or 1..%d)", opts.Concurrency, config.MaxSlots)
	}
	if opts.EventBuffer < 0 {
		return nil, fmt.Errorf("luft.New: Options.EventBuffer %d is negative (0 for the default of 64)", opts.EventBuffer)
	}
	if opts.EventBuffer == 0 {
		opts.EventBuffer = 64
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Caller == "" {
		opts.Caller = "embed"
	}
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, fmt.Errorf("luft.New: Options.StateDir %s: %w", opts.StateDir, err)
	}
	var cfg config.Config
	switch {
	case opts.Config != nil:
		cfg = *opts.Config
	case opts.ConfigPath != "":
		if cfg, err = config.Load(opts.ConfigPath, opts.Getenv, ""); err != nil {
			return nil, fmt.Errorf("luft.New: Options.ConfigPath: %w", err)
		}
	}
	if _, loaded := openDirs.LoadOrStore(dir, true); loaded {
		return nil, fmt.Errorf("luft.New: state dir %s is already open by another Engine of this process; share that Engine, or Close it first", dir)
	}
	e, err := open(opts, dir, cfg, set)
	if err != nil {
		openDirs.Delete(dir)
		return nil, err
	}
	return e, nil
}

func open(opts Options, dir string, cfg config.Config, set settings) (_ *Engine, err error) {
	h, err := host.Open(host.Options{StateDir: dir, Config: cfg, Getenv: opts.Getenv})
	if err != nil {
		return nil, fmt.Errorf("luft.New: backends: %w", err)
	}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if h.Registry, err = withCustom(h.Registry, set.custom); err != nil {
		return nil, fmt.Errorf("luft.New: %w", err)
	}
	if _, err := h.Registry.Get(opts.Backend); err != nil {
		return nil, fmt.Errorf("luft.New: Options.Backend: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("luft.New: create state dir: %w (pick a folder this process may write, in Options.StateDir)", err)
	}
	url := cmp.Or(opts.StorageURL, cfg.Storage.URL)
	st, err := storage.OpenURL(context.Background(), url, dir)
	if err != nil {
		return nil, fmt.Errorf("luft.New: open state dir %s: %w", dir, err)
	}
	if err := h.Serve(st, host.ServeOptions{Slots: opts.Concurrency, SlotsGiven: opts.Concurrency > 0, Clock: opts.Clock, Caller: opts.Caller,
		// The runs park a call that needs approval only where the program answers it.
		AskApprovals: opts.Approvals || opts.Approve != nil}); err != nil {
		st.Close()
		return nil, fmt.Errorf("luft.New: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{svc: h.Service, store: st, host: h, registry: h.Registry, cfg: cfg, dir: dir, opts: opts, ctx: ctx, cancel: cancel, sched: h.Scheduler}
	e.warnings = append(append(e.warnings, cfg.Warnings...), h.Backends.Warnings...)
	return e, nil
}

// withCustom is reg with the custom backends added; a name reg already has is refused.
func withCustom(reg *adapters.Registry, custom []*customBackend) (*adapters.Registry, error) {
	if len(custom) == 0 {
		return reg, nil
	}
	var all []adapters.Backend
	for _, id := range reg.IDs() {
		b, _ := reg.Get(id)
		all = append(all, b)
	}
	for _, c := range custom {
		if _, err := reg.Get(c.id); err == nil {
			return nil, fmt.Errorf("WithBackend(%q): a built-in or configured backend already has this name; pick another", c.id)
		}
		all = append(all, c)
	}
	return adapters.NewRegistry(reg.Default(), all...), nil
}

// StateDir is the absolute path of the Engine's state dir.
func (e *Engine) StateDir() string {
	if e == nil {
		return ""
	}
	return e.dir
}

// Warnings are what the config and the backends want the user told once: a deprecated
// config key, commands agents may run that this kernel cannot confine, and so on.
func (e *Engine) Warnings() []string {
	if e == nil {
		return nil
	}
	return append([]string(nil), e.warnings...)
}

// Backends are the ids of the backends scripts may name, sorted.
func (e *Engine) Backends() []string {
	if e == nil {
		return nil
	}
	return e.registry.IDs()
}

// Close stops the Engine. A run still going is suspended, as when a host shuts down: its
// finished calls are journaled and Resume (on a new Engine) goes on from there. Close
// waits for those runs to record their end, then closes the state dir. Calling it again
// does nothing.
func (e *Engine) Close() error {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	live := e.svc.Live()
	for _, r := range live {
		r.Suspend()
	}
	for _, r := range live {
		<-r.Done()
	}
	e.cancel()
	e.asking.Wait()
	var errs []error
	for _, p := range e.proxies {
		errs = append(errs, p.Close())
	}
	err := errors.Join(append(errs, e.host.Close(), e.store.Close())...)
	openDirs.Delete(e.dir)
	return err
}

// errNilEngine is the error of a method called on a nil *Engine.
var errNilEngine = errors.New("luft: the *Engine is nil; make one with luft.New")

// use checks a call of op: the Engine exists and is open, and ctx is set.
func (e *Engine) use(ctx context.Context, op string) error {
	done, err := e.starting(ctx, op)
	if err != nil {
		return err
	}
	done()
	return nil
}

// starting is use that also holds off Close until done is called: a run that starts is
// then among the runs Close suspends.
func (e *Engine) starting(ctx context.Context, op string) (done func(), err error) {
	if e == nil {
		return nil, errNilEngine
	}
	if ctx == nil {
		return nil, fmt.Errorf("luft: %s: ctx is nil; pass context.Background() or a request's context", op)
	}
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return nil, ErrClosed
	}
	return e.mu.RUnlock, nil
}
