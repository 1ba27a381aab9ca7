package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
)

// senderKey is the context key of the daemon process a connection comes from.
type senderKey struct{}

// fakeKey is one API key of the fake engine that every daemon shares: one engine, one
// set of rate-limit buckets, one base URL. It puts the name of the daemon process that
// sent each request into the request's x-luft-caller header, so the engine's log
// (Record.Caller) says who sent what.
type fakeKey struct {
	engine *testkit.Engine
	url    string
	port   int

	mu    sync.Mutex
	procs map[int]string // pid → the daemon process's name
}

func startKey(t *testing.T, cfg testkit.Config) *fakeKey {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKey{engine: testkit.NewEngine(cfg), port: ln.Addr().(*net.TCPAddr).Port, procs: map[int]string{}}
	k.url = "http://" + ln.Addr().String() + "/v1"
	h := testkit.NewServer(k.engine).Handler()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name, _ := r.Context().Value(senderKey{}).(string)
			r.Header.Del("x-gateway-inference-fairness-id")
			r.Header.Set("x-luft-caller", name)
			h.ServeHTTP(w, r)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, senderKey{}, k.sender(c))
		},
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return k
}

// register names the daemon process pid; its connections are attributed to name.
func (k *fakeKey) register(pid int, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.procs[pid] = name
}

// sender is the name of the daemon process at the other end of c: the process holding
// the socket whose local port is c's remote port (both ends are on this host), found
// through /proc/net/tcp and the processes' file descriptors. "unknown" when none is.
func (k *fakeKey) sender(c net.Conn) string {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return "unknown"
	}
	inode := socketInode(ra.Port, k.port)
	if inode == "" {
		return "unknown"
	}
	k.mu.Lock()
	procs := make(map[int]string, len(k.procs))
	for pid, n := range k.procs {
		procs[pid] = n
	}
	k.mu.Unlock()
	want := "socket:[" + inode + "]"
	for pid, name := range procs {
		fds := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		ents, err := os.ReadDir(fds)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && l == want {
				return name
			}
		}
	}
	return "unknown"
}

// socketInode is the inode of the TCP socket with local port local and remote port
// remote, from /proc/net/tcp (and tcp6); "" when there is none.
func socketInode(local, remote int) string {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", local)) || !strings.HasSuffix(fs[2], fmt.Sprintf(":%04X", remote)) {
				continue
			}
			fh.Close()
			return fs[9]
		}
		fh.Close()
	}
	return ""
}
