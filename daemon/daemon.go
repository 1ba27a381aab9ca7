package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// Files of a daemon in its state dir.
const (
	LockFile   = "daemon.lock"
	InfoFile   = "daemon.json"
	SocketFile = "daemon.sock"
	TokenFile  = "daemon.token"
	LogFile    = "daemon.log"
)

// maxSocketPath is the longest unix socket path every unix accepts (sun_path is 104
// bytes on macOS and the BSDs, 108 on Linux, including the NUL).
const maxSocketPath = 103

// Info is what <state>/daemon.json says of a running daemon.
type Info struct {
	PID       int       `json:"pid"`
	Socket    string    `json:"socket"`
	Addr      string    `json:"addr,omitempty"` // the HTTP address, when it listens on one
	StartedAt time.Time `json:"started_at"`
	Version   string    `json:"version"`
}

// Options configure a Daemon.
type Options struct {
	StateDir string           // required
	Service  *runtime.Service // required: hosts every run
	Store    storage.Store    // required: the Service's store
	// NewSpec turns an API start request into what the Service runs (the CLI applies the
	// config's limits and defaults); nil uses the request as it is.
	NewSpec func(StartRequest) (runtime.Spec, error)
	Version string
	// Listen is a TCP address for the HTTP API ("" = the unix socket only). A loopback
	// address needs no configured token (one is generated into <state>/daemon.token); any
	// other needs Token.
	Listen string
	Token  string // the bearer token HTTP requests must carry; "" = generated
	Grace  time.Duration
	// Gate, when the Service's scheduler is behind it (Gate.Wrap), lets shutdown stop
	// admitting turns and give the admitted ones the grace period to finish; without
	// it, hosted runs get the grace period to end as a whole.
	Gate *Gate
	Log  io.Writer // the daemon's log; nil = discarded
	// WatchEvery is how often the daemon checks that its state dir, lock file, socket
	// and luft.db are still the ones it started with; default 2 s.
	WatchEvery time.Duration
	Now        func() time.Time
	// Ready is called once the daemon answers on its socket.
	Ready func(Info)
	// Keeper, when set, makes the daemon a node of its store: it renews the node's lease
	// (on the Keeper's own store) and runs the claim loop, which takes over runs whose
	// lease lapsed or whose process died and wakes suspended runs whose time has come.
	// The Service must hold its runs under it (runtime.Options.Lease).
	Keeper *node.Keeper
	// ClaimEvery is how often the claim loop looks for runs to take over; default the
	// Keeper's heartbeat.
	ClaimEvery time.Duration
	// Mounts are further doors served beside the API (the MCP server at /mcp, the
	// proxy at /v1/). It is called once, before the daemon listens, with the daemon
	// itself so a door can start hosted runs through it (Daemon.Start).
	Mounts func(*Daemon) []Mount
}

// Mount is a handler served by the daemon beside its API (door.Mount, which a door
// builds without importing the daemon).
type Mount = door.Mount

// ErrAlreadyRunning is returned by Run when another daemon holds the state dir.
var ErrAlreadyRunning = errors.New("a luft daemon already runs for this state dir")

// Daemon hosts runs. Create it with New and serve with Run.
type Daemon struct {
	opts  Options
	lock  *os.File // held for the life of the process
	log   *log.Logger
	info  Info
	token string

	stopping atomic.Bool // no new runs once set
	shutdown chan struct{}
	stopOnce sync.Once
	// stopGrace is the grace period the shutdown was asked with (ShutdownWithin); nil =
	// Options.Grace.
	stopGrace atomic.Pointer[time.Duration]

	mu     sync.Mutex
	hosted int                    // runs started or resumed here
	timers map[string]*time.Timer // wake-ups of suspended runs, until their resume returns
	woke   map[string]time.Time   // when a timer's resume returned, for the claim loop
	wg     sync.WaitGroup         // run trackers

	mounts []Mount

	// storageProblem is StatusJSON.StorageProblem (nil = none).
	storageProblem atomic.Pointer[string]
	// unrecorded is the problem noteUnrecorded stored there, if it is still the one.
	unrecorded atomic.Pointer[string]
}

// New checks the options and returns a Daemon.
func New(opts Options) (*Daemon, error) {
	if opts.StateDir == "" || opts.Service == nil || opts.Store == nil {
		return nil, errors.New("daemon: StateDir, Service and Store are required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Grace <= 0 {
		opts.Grace = 10 * time.Second
	}
	if opts.WatchEvery <= 0 {
		opts.WatchEvery = defaultWatchEvery
	}
	if opts.NewSpec == nil {
		opts.NewSpec = func(r StartRequest) (runtime.Spec, error) { return r.Spec(), nil }
	}
	return &Daemon{opts: opts, log: log.New(opts.Log, "", log.LstdFlags|log.LUTC),
		shutdown: make(chan struct{}), timers: map[string]*time.Timer{}, woke: map[string]time.Time{}}, nil
}

// Shutdown asks a running daemon to stop as SIGTERM does, with Options.Grace.
func (d *Daemon) Shutdown() { d.stopOnce.Do(func() { close(d.shutdown) }) }

// ShutdownWithin asks a running daemon to stop as Shutdown does, giving hosted runs
// grace (0 = none) instead of Options.Grace. It returns the grace period the shutdown
// has: the first request's, when the daemon was already asked to stop.
func (d *Daemon) ShutdownWithin(grace time.Duration) time.Duration {
	if grace < 0 {
		grace = 0
	}
	d.stopOnce.Do(func() {
		d.stopGrace.Store(&grace)
		close(d.shutdown)
	})
	return d.grace()
}

// grace is the grace period of the shutdown.
func (d *Daemon) grace() time.Duration {
	if g := d.stopGrace.Load(); g != nil {
		return *g
	}
	return d.opts.Grace
}

// Run holds the state dir, serves the API and hosts runs until ctx ends or Shutdown is
// called, then shuts down gracefully (see the package doc).
func (d *Daemon) Run(ctx context.Context) error {
	dir, root, err := d.holdStateDir()
	if err != nil {
		return err
	}
	defer root.Close()
	listeners, sock, watch, err := d.listen(dir)
	if err != nil {
		return err
	}
	defer root.Remove(SocketFile)
	if err := d.writeInfo(dir, sock, listeners); err != nil {
		closeAll(listeners)
		return err
	}
	defer root.Remove(InfoFile)

	// A door's run (the proxy's) the state dir cannot record shows in the status too.
	d.opts.Service.NotifyUnrecorded(d.noteUnrecorded)
	defer d.opts.Service.NotifyUnrecorded(nil)
	if d.opts.Mounts != nil {
		d.mounts = d.opts.Mounts(d)
	}
	servers, serveErr := d.serve(listeners)
	d.log.Printf("started: pid %d, socket %s, http %q, version %s", d.info.PID, d.info.Socket, d.info.Addr, d.info.Version)
	// The node first, then the recovery: the runs recover resumes start under a lease
	// just renewed. Resumed before the node's first renewal, on a slow start (a loaded
	// machine) they found the lease's clock already past its margin, stopped at their
	// first call (the self-fence), and waited for their lease to lapse and a node to take
	// them over again.
	stopNode := d.runNode()
	d.recover(ctx)
	if d.opts.Ready != nil {
		d.opts.Ready(d.info)
	}
	runErr := d.awaitStop(ctx, dir, watch, serveErr)
	d.drain()
	stopNode()
	stopServers(servers)
	d.log.Printf("stopped")
	return runErr
}

// holdStateDir makes the state dir ready and takes its lock, which stays held until the
// process exits (the OS releases it then), so whoever waits for it to be free (luft
// daemon stop) knows the process is gone, not just its API. One daemon per process.
//
// The daemon's own files are removed through the returned handle on the dir, so that a
// moved dir loses them where it is now and a dir made at the old path (maybe a new
// daemon's) keeps its own.
func (d *Daemon) holdStateDir() (string, *os.Root, error) {
	dir, err := filepath.Abs(d.opts.StateDir)
	if err != nil {
		return "", nil, fmt.Errorf("daemon: state dir %s: %w", d.opts.StateDir, err)
	}
	if err := checkDir(dir); err != nil {
		return "", nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", nil, fmt.Errorf("daemon: open state dir %s: %w", dir, err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		root.Close()
		return "", nil, fmt.Errorf("daemon: open its lock file: %w", err)
	}
	held, err := lockFile(lock)
	if err != nil || held {
		lock.Close()
		root.Close()
		if held {
			return "", nil, alreadyRunning(dir)
		}
		return "", nil, fmt.Errorf("daemon: lock %s: %w", lock.Name(), err)
	}
	d.lock = lock
	return dir, root, nil
}

// listen opens the daemon's listeners: the private unix socket first, then the TCP
// address of Options.Listen, if any. It also returns the socket's path and what the
// state-dir watch follows. On an error nothing is left listening and the socket is gone.
func (d *Daemon) listen(dir string) ([]net.Listener, string, []watched, error) {
	ul, sock, err := listenSocket(dir)
	if err != nil {
		return nil, "", nil, err
	}
	fail := func(err error) ([]net.Listener, string, []watched, error) {
		ul.Close()
		os.Remove(sock)
		return nil, "", nil, err
	}
	watch, err := watchList(dir, d.lock, sock)
	if err != nil {
		return fail(err)
	}
	listeners := []net.Listener{ul}
	if d.opts.Listen != "" {
		if d.token, err = d.httpToken(dir); err != nil {
			return fail(err)
		}
		tl, err := net.Listen("tcp", d.opts.Listen)
		if err != nil {
			return fail(fmt.Errorf("daemon: listen on %s: %w", d.opts.Listen, err))
		}
		listeners = append(listeners, tl)
	}
	return listeners, sock, watch, nil
}

// listenSocket listens on the state dir's socket, private to its user. The lock is
// held, so a socket left there is a dead daemon's and is replaced.
func listenSocket(dir string) (net.Listener, string, error) {
	sock := filepath.Join(dir, SocketFile)
	if len(sock) > maxSocketPath {
		return nil, "", fmt.Errorf("daemon: socket path %s is %d bytes, longer than unix sockets allow (%d): use a shorter --state-dir", sock, len(sock), maxSocketPath)
	}
	if fi, err := os.Lstat(sock); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, "", fmt.Errorf("daemon: %s exists and is not a socket: remove it", sock)
		}
		if err := os.Remove(sock); err != nil {
			return nil, "", fmt.Errorf("daemon: remove the stale socket %s: %w", sock, err)
		}
	}
	ul, err := net.Listen("unix", sock)
	if err != nil {
		return nil, "", fmt.Errorf("daemon: listen on %s: %w", sock, err)
	}
	if u, ok := ul.(*net.UnixListener); ok {
		u.SetUnlinkOnClose(false) // Close would unlink by path
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ul.Close()
		os.Remove(sock)
		return nil, "", fmt.Errorf("daemon: make %s private: %w", sock, err)
	}
	return ul, sock, nil
}

// writeInfo records who the daemon is and where it listens in the state dir's info file.
func (d *Daemon) writeInfo(dir, sock string, listeners []net.Listener) error {
	d.info = Info{PID: os.Getpid(), Socket: sock, StartedAt: d.opts.Now().UTC(), Version: d.opts.Version}
	if len(listeners) > 1 {
		d.info.Addr = listeners[1].Addr().String()
	}
	b, _ := json.MarshalIndent(d.info, "", "  ")
	infoPath := filepath.Join(dir, InfoFile)
	if err := os.WriteFile(infoPath, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("daemon: write %s: %w", infoPath, err)
	}
	return nil
}

// serve serves the API on each listener: the unix socket (its peers checked by
// credentials) and the TCP address (behind the token). A server that fails reports on
// the returned channel.
func (d *Daemon) serve(listeners []net.Listener) ([]*http.Server, <-chan error) {
	servers := []*http.Server{{Handler: d.handler(false), ReadHeaderTimeout: 10 * time.Second, ConnContext: peerContext}}
	if len(listeners) > 1 {
		servers = append(servers, &http.Server{Handler: d.handler(true), ReadHeaderTimeout: 10 * time.Second})
	}
	serveErr := make(chan error, len(servers))
	for i, s := range servers {
		go func() {
			if err := s.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	return servers, serveErr
}

// awaitStop waits for the reason to stop: a signal, a shutdown request, a server that
// failed, or the state dir moved away under the daemon. It returns the error Run ends
// with (nil for a signal or a request).
func (d *Daemon) awaitStop(ctx context.Context, dir string, watch []watched, serveErr <-chan error) error {
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	gone := watchStateDir(wctx, watch, d.opts.WatchEvery)
	select {
	case <-ctx.Done():
		d.log.Printf("signalled: shutting down")
	case <-d.shutdown:
		d.log.Printf("asked to shut down (grace %s)", d.grace())
	case err := <-serveErr:
		d.log.Printf("serving failed: %v", err)
		return err
	case why := <-gone:
		d.log.Printf("state dir %s moved or deleted (%s): shutting down", dir, why)
		return fmt.Errorf("daemon: %w: %s; no client can reach this daemon, so it stopped and suspended its runs (start a daemon on the state dir where it is now: luft daemon start --state-dir DIR)", ErrStateDirGone, why)
	}
	return nil
}

// stopServers ends the servers; requests in flight (event streams) end with them.
func stopServers(servers []*http.Server) {
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range servers {
		if s.Shutdown(sctx) != nil {
			s.Close()
		}
	}
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// checkDir creates the state dir and refuses one that every user may write: whoever can
// write there can replace the socket the CLI talks to. (A group-writable one is common
// under a umask of 002 with a group of one's own; clients refuse a socket another user
// owns in any case.)
func checkDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("daemon: create state dir %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("daemon: state dir %s: %w", dir, err)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("daemon: state dir %s is writable by other users (mode %04o): its socket could be replaced; run chmod go-w %s", dir, fi.Mode().Perm(), dir)
	}
	if !ownedByMe(fi) {
		return fmt.Errorf("daemon: state dir %s belongs to another user: use a state dir of your own (--state-dir)", dir)
	}
	return nil
}

// alreadyRunning names the daemon that holds dir.
func alreadyRunning(dir string) error {
	if info, err := ReadInfo(dir); err == nil {
		addr := ""
		if info.Addr != "" {
			addr = ", http " + info.Addr
		}
		return fmt.Errorf("%w: pid %d, socket %s%s, started %s (luft daemon stop ends it): %s", ErrAlreadyRunning,
			info.PID, info.Socket, addr, info.StartedAt.Format(time.RFC3339), dir)
	}
	return fmt.Errorf("%w (it is still starting or stopping): %s", ErrAlreadyRunning, dir)
}

// ReadInfo reads <dir>/daemon.json.
func ReadInfo(dir string) (Info, error) {
	var info Info
	b, err := os.ReadFile(filepath.Join(dir, InfoFile))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("read %s: %w", filepath.Join(dir, InfoFile), err)
	}
	return info, nil
}

// httpToken is the bearer token of the HTTP API: Options.Token, else the one in
// <dir>/daemon.token (made on first use, mode 0600). A non-loopback address needs a
// token the user chose.
func (d *Daemon) httpToken(dir string) (string, error) {
	host, _, err := net.SplitHostPort(d.opts.Listen)
	if err != nil {
		return "", fmt.Errorf("daemon: --listen %s: want HOST:PORT (e.g. 127.0.0.1:7878): %v", d.opts.Listen, err)
	}
	if d.opts.Token != "" {
		return d.opts.Token, nil
	}
	if !loopbackHost(host) {
		return "", fmt.Errorf("daemon: --listen %s is not a loopback address: set LUFT_TOKEN to the bearer token clients must send", d.opts.Listen)
	}
	path := filepath.Join(dir, TokenFile)
	if fi, err := os.Stat(path); err == nil {
		if fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("daemon: %s is readable by other users (mode %04o): run chmod 600 %s", path, fi.Mode().Perm(), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("daemon: read %s: %w", path, err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("daemon: make a token: %w", err)
	}
	t := hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("daemon: write %s: %w", path, err)
	}
	return t, nil
}

// loopbackHost reports whether host names this machine only.
func loopbackHost(host string) bool {
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackListener reports whether the daemon's HTTP address is a loopback one.
func (d *Daemon) loopbackListener() bool {
	host, _, err := net.SplitHostPort(d.opts.Listen)
	return err == nil && loopbackHost(host)
}
