package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/storage"
)

// IDFile holds the per-state-dir part of a node's id.
const IDFile = "node.id"

// Defaults of a node's lease (SPEC §9): a renewal every second, a lease of ten, so a GC
// pause or a network blip does not cost a takeover.
const (
	DefaultHeartbeat = time.Second
	DefaultLease     = 10 * time.Second
	// MinHeartbeat is the shortest renewal interval a Keeper takes: a lease shorter than
	// three of them is refused (a ticker needs a positive interval, and the store could
	// not keep up anyway).
	MinHeartbeat = time.Millisecond
)

var validPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ID returns the id of the node that state dir dir belongs to: "<hostname>-<id>", the id
// kept in dir/node.id (made on first use).
func ID(dir string) (string, error) {
	host := hostPart()
	path := filepath.Join(dir, IDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if !validPart.MatchString(id) {
			return "", fmt.Errorf("node id: %s holds %q, not an id (letters, digits, '.', '_', '-'): remove the file to make a new one", path, id)
		}
		return host + "-" + id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("node id: read %s: %w", path, err)
	}
	buf := make([]byte, 4)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	id := hex.EncodeToString(buf)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("node id: create %s: %w", dir, err)
	}
	// O_EXCL: two processes making the file at once agree on the one written first.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return ID(dir)
	}
	if err != nil {
		return "", fmt.Errorf("node id: create %s: %w", path, err)
	}
	_, werr := f.WriteString(id + "\n")
	if err := errors.Join(werr, f.Close()); err != nil {
		return "", fmt.Errorf("node id: write %s: %w", path, err)
	}
	return host + "-" + id, nil
}

// hostPart is this host's name as node ids carry it.
func hostPart() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, host)
}

// SameHost reports whether node id names a node of this host, whose processes this
// process can see (their pids mean the same here). "" is this host's: a run recorded
// before nodes existed.
func SameHost(id string) bool {
	if id == "" {
		return true
	}
	i := strings.LastIndexByte(id, '-')
	return i > 0 && id[:i] == hostPart()
}

// Options configure a Keeper.
type Options struct {
	// Store is where the node renews its lease: a store of its own (its own connection),
	// not the one the node's runs write to.
	Store storage.Store
	Node  storage.Node  // ID required; Address and PID as shown by luft daemon status
	Lease time.Duration // the lease's length; default DefaultLease
	Every time.Duration // how often it renews; default DefaultHeartbeat, at most Lease/3
	// Margin is how long before the lease's end by this process's clock the self-fence
	// closes (Valid turns false); default Lease/5, at least Every.
	Margin time.Duration
	// Held returns the runs the node drives now, at their attempts (runtime.Service.Held).
	Held func() []storage.Lease
	// Lost is told of the runs a renewal found claimed by another node
	// (runtime.Service.Lost).
	Lost func([]storage.Lease)
	Logf func(format string, args ...any)
}

// Keeper keeps a node's lease. It implements runtime.Lease.
type Keeper struct {
	opts Options

	mu      sync.Mutex
	renewed time.Time // the start of the last successful renewal (monotonic)
	failing bool      // the last renewal failed
}

// NewKeeper checks o and returns a Keeper whose lease counts as renewed now (a node that
// has just started holds nothing yet).
func NewKeeper(o Options) (*Keeper, error) {
	if o.Store == nil || o.Node.ID == "" {
		return nil, errors.New("node: Options.Store and Options.Node.ID are required")
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Every <= 0 {
		o.Every = DefaultHeartbeat
	}
	o.Every = min(o.Every, o.Lease/3)
	if o.Every < MinHeartbeat {
		return nil, fmt.Errorf("node: a lease of %s leaves a renewal every %s, less than %s: set [node] lease to at least %s",
			o.Lease, o.Every, MinHeartbeat, 3*MinHeartbeat)
	}
	if o.Margin <= 0 {
		o.Margin = max(o.Lease/5, o.Every)
	}
	if o.Margin >= o.Lease {
		return nil, fmt.Errorf("node: lease margin %s is not shorter than the lease %s", o.Margin, o.Lease)
	}
	if o.Held == nil {
		o.Held = func() []storage.Lease { return nil }
	}
	if o.Lost == nil {
		o.Lost = func([]storage.Lease) {}
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return &Keeper{opts: o, renewed: time.Now()}, nil
}

// ID is the node's id.
func (k *Keeper) ID() string { return k.opts.Node.ID }

// SetAddress sets the address later heartbeats record (the daemon's HTTP address, known
// once it listens).
func (k *Keeper) SetAddress(addr string) {
	k.mu.Lock()
	k.opts.Node.Address = addr
	k.mu.Unlock()
}

// Every is how often the keeper renews the lease.
func (k *Keeper) Every() time.Duration { return k.opts.Every }

// Length is the lease's length.
func (k *Keeper) Length() time.Duration { return k.opts.Lease }

// Until is the end of a lease taken now.
func (k *Keeper) Until() time.Time { return time.Now().Add(k.opts.Lease) }

// Valid reports whether the lease surely holds: the last successful renewal began less
// than Lease - Margin ago by the monotonic clock.
func (k *Keeper) Valid() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return time.Since(k.renewed) < k.opts.Lease-k.opts.Margin
}

// Renew renews the lease once: it records the node's heartbeat and extends the lease of
// every held run, and reports the lost ones to Lost.
func (k *Keeper) Renew(ctx context.Context) error {
	start := time.Now()
	held := k.opts.Held()
	k.mu.Lock()
	n := k.opts.Node
	k.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, k.opts.Lease-k.opts.Margin)
	defer cancel()
	lost, err := k.opts.Store.Heartbeat(rctx, n, start.Add(k.opts.Lease), held)
	if err != nil && ctx.Err() != nil {
		return err // the keeper is being stopped: not a failure to renew
	}
	k.mu.Lock()
	was := k.failing
	k.failing = err != nil
	if err == nil {
		k.renewed = start
	}
	k.mu.Unlock()
	if err != nil {
		if !was {
			k.opts.Logf("node %s: renewing the lease failed (runs stop starting calls %s after the last renewal): %v",
				k.opts.Node.ID, k.opts.Lease-k.opts.Margin, err)
		}
		return err
	}
	if was {
		k.opts.Logf("node %s: lease renewed again", k.opts.Node.ID)
	}
	if len(lost) > 0 {
		for _, l := range lost {
			k.opts.Logf("run %s: ownership lost: attempt %d was claimed by another node; stopping it here", l.RunID, l.Attempt)
		}
		k.opts.Lost(lost)
	}
	return nil
}

// Run renews the lease every Every until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.opts.Every)
	defer t.Stop()
	for {
		_ = k.Renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
