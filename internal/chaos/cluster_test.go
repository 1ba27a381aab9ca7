package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/node"
)

// buildLuft builds luft from ./cmd/luft into a temp dir, once for the test.
func buildLuft(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "luft")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/luft-run/luft/cmd/luft")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/luft: %v\n%s", err, out)
	}
	return bin
}

// withParam adds the query parameter k=v to a database URL.
func withParam(t *testing.T, dbURL, k, v string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// proc is one daemon process: a node on a state dir of its own.
type proc struct {
	name   string // n1, n2, ...: also its application_name in the database
	dir    string // its working dir, holding luft.toml and the state dir st
	state  string
	node   string // its node id
	cmd    *exec.Cmd
	pid    int
	exited chan struct{}
}

// cluster is daemon processes of one luft binary on one database and one fake key.
type cluster struct {
	t      *testing.T
	bin    string
	dbURL  string
	key    *fakeKey
	config string // luft.toml of every daemon
	base   string

	mu    sync.Mutex
	procs []*proc // every process started, in order
	n     int
}

// start starts a daemon on a fresh state dir (a new node) and waits until it answers.
func (c *cluster) start() *proc {
	c.t.Helper()
	c.mu.Lock()
	c.n++
	p := &proc{name: fmt.Sprintf("n%d", c.n), exited: make(chan struct{})}
	c.mu.Unlock()
	p.dir = filepath.Join(c.base, p.name)
	p.state = filepath.Join(p.dir, "st")
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, "luft.toml"), []byte(c.config), 0o600); err != nil {
		c.t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	defer pr.Close()
	logf, err := os.Create(filepath.Join(p.dir, "stderr.log"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(c.bin, "--state-dir", p.state, "--config", filepath.Join(p.dir, "luft.toml"),
		"daemon", "start", "--foreground")
	p.cmd.Dir = p.dir
	p.cmd.Env = append(daemonEnv(), "HOME="+p.dir, "XDG_CONFIG_HOME="+filepath.Join(p.dir, "xdg"),
		"LUFT_DAEMON_READY_FD=3", "OPENAI_API_KEY=chaos-shared-key",
		"LUFT_STORAGE_URL="+withParam(c.t, c.dbURL, "application_name", p.name))
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.ExtraFiles = []*os.File{pw}
	if err := p.cmd.Start(); err != nil {
		pw.Close()
		c.t.Fatal(err)
	}
	pw.Close()
	p.pid = p.cmd.Process.Pid
	c.key.register(p.pid, p.name)
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		var info daemon.Info
		if json.Unmarshal([]byte(line), &info) != nil || info.PID != p.pid {
			<-p.exited
			c.t.Fatalf("daemon %s exited before it answered: %s", p.name, c.tail(p))
		}
	case <-time.After(90 * time.Second):
		// A daemon answers once it has resumed the runs left by dead processes of its
		// host (daemon.recover), up to a killed node's share of 200 runs: on a loaded
		// 2-core machine (CI runs other packages beside this one) that took over 30 s.
		c.t.Fatalf("daemon %s did not answer within 90 s: %s", p.name, c.tail(p))
	}
	id, err := node.ID(p.state)
	if err != nil {
		c.t.Fatal(err)
	}
	p.node = id
	return p
}

// daemonEnv is the test's environment without LUFT_*, OPENAI_* and GORACE, which would
// change what the daemons run.
func daemonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LUFT_") && !strings.HasPrefix(kv, "OPENAI_") && !strings.HasPrefix(kv, "GORACE=") &&
			!strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	return env
}

// kill SIGKILLs p and waits until it is gone.
func (c *cluster) kill(p *proc) time.Time {
	c.t.Helper()
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill %s: %v", p.name, err)
	}
	at := time.Now()
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("daemon %s still runs 10 s after SIGKILL", p.name)
	}
	return at
}

func (c *cluster) signal(p *proc, sig syscall.Signal) time.Time {
	c.t.Helper()
	if err := syscall.Kill(p.pid, sig); err != nil {
		c.t.Fatalf("%v %s: %v", sig, p.name, err)
	}
	return time.Now()
}

// stopAll ends every daemon still running: SIGCONT (one may be stopped), then SIGTERM,
// then SIGKILL after a grace.
func (c *cluster) stopAll() {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.exited:
			continue
		default:
		}
		_ = syscall.Kill(p.pid, syscall.SIGCONT)
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			<-p.exited
		}
	}
}

// tail is the end of p's daemon log and stderr.
func (c *cluster) tail(p *proc) string {
	var b strings.Builder
	for _, f := range []string{filepath.Join(p.state, daemon.LogFile), filepath.Join(p.dir, "stderr.log")} {
		data, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "\n--- %s:\n%s", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// submit starts a run of script with args on p's daemon, through its API.
func (c *cluster) submit(ctx context.Context, p *proc, script string, args any) (string, error) {
	cl, err := daemon.Dial(ctx, p.state)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	return cl.Start(ctx, daemon.StartRequest{Script: script, Path: filepath.Join(p.dir, "chaos.lua"), Args: args, Caller: "chaos"})
}
