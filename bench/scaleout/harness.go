package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/storage"
)

// key is the one rate-limited API key of the fake engine that every node shares.
type key struct {
	engine *testkit.Engine
	srv    *testkit.Server
	url    string
}

// newKey starts a fake engine whose one key admits limit requests per period (429 when
// its bucket is empty), each answered in about 40 ms.
func newKey(limit int, period time.Duration) (*key, error) {
	e := testkit.NewEngine(testkit.Config{Slots: 64, DefaultMaxTokens: 4, DecodePerToken: 10 * time.Millisecond,
		Limits: testkit.Limits{RPM: limit, Period: period}})
	srv := testkit.NewServer(e)
	url, err := srv.Start("")
	if err != nil {
		return nil, err
	}
	return &key{engine: e, srv: srv, url: url}, nil
}

func (k *key) close() { _ = k.srv.Close() }

// counts is the engine's requests and 429s, from its log.
func (k *key) counts() (requests, rejected int) {
	for _, r := range k.engine.Log() {
		requests++
		if r.Status == http.StatusTooManyRequests {
			rejected++
		}
	}
	return requests, rejected
}

// cluster is daemons, each on its own state dir, on one PostgreSQL database.
type cluster struct {
	luft  string // the luft binary
	url   string // the database
	drop  func() error
	st    storage.DB // the bench's own view of the database
	root  string
	nodes []*member
}

type member struct {
	dir, state string
	env        []string
	pid        int
}

// newCluster creates a database and n nodes' dirs; script is each node's wf.lua. The
// daemons are not started yet.
func newCluster(luft string, n int, k *key, lease, heartbeat time.Duration, script string) (*cluster, error) {
	url, drop, err := pgtest.Create()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "luft-scaleout-")
	if err != nil {
		_ = drop()
		return nil, err
	}
	st, err := storage.OpenURL(context.Background(), url, filepath.Join(root, "bench"))
	if err != nil {
		_ = drop()
		os.RemoveAll(root)
		return nil, fmt.Errorf("open the bench's database: %w", err)
	}
	c := &cluster{luft: luft, url: url, drop: drop, st: st, root: root}
	toml := fmt.Sprintf("default_backend = \"local\"\n[backends.local]\ntype = \"openai\"\nbase_url = %q\nmodel = \"m\"\n[node]\nlease = %q\nheartbeat = %q\n",
		k.url, lease.String(), heartbeat.String())
	for i := range n {
		dir := filepath.Join(root, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			c.close()
			return nil, err
		}
		for name, text := range map[string]string{"luft.toml": toml, "wf.lua": script} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				c.close()
				return nil, err
			}
		}
		c.nodes = append(c.nodes, &member{dir: dir, state: filepath.Join(dir, "st"),
			env: childEnv("OPENAI_API_KEY=k", "LUFT_STORAGE_URL="+url)})
	}
	return c, nil
}

// childEnv is this process's environment without LUFT_* (which would change what the
// daemons do), plus add.
func childEnv(add ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LUFT_") {
			env = append(env, kv)
		}
	}
	return append(env, add...)
}

// luftOn runs luft against node n's state dir and returns its stdout.
func (c *cluster) luftOn(n *member, args ...string) (string, error) {
	cmd := exec.Command(c.luft, append([]string{"--state-dir", n.state}, args...)...)
	cmd.Dir, cmd.Env = n.dir, n.env
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("luft %s on %s: %v\n%s%s", strings.Join(args, " "), n.state, err, out, errOut.String())
	}
	return string(out), nil
}

// start starts node n's daemon and records its pid.
func (c *cluster) start(n *member) error {
	if _, err := c.luftOn(n, "daemon", "start"); err != nil {
		return err
	}
	info, err := daemon.ReadInfo(n.state)
	if err != nil {
		return fmt.Errorf("daemon of %s started but its info is unreadable: %w", n.state, err)
	}
	n.pid = info.PID
	return nil
}

// kill SIGKILLs node n's daemon, waits until it is gone and returns when the signal
// was sent.
func (c *cluster) kill(n *member) (time.Time, error) {
	if err := syscall.Kill(n.pid, syscall.SIGKILL); err != nil {
		return time.Time{}, fmt.Errorf("kill daemon %d: %w", n.pid, err)
	}
	at := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := daemon.WaitGone(ctx, n.state); err != nil {
		return at, fmt.Errorf("daemon %d still holds %s after SIGKILL: %w", n.pid, n.state, err)
	}
	n.pid = 0
	return at, nil
}

// poll calls cond every 20 ms until it holds, fails, or within has passed.
func poll(within time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // polling another process's writes
	}
}

// close stops every daemon still up, drops the database and removes the dirs.
func (c *cluster) close() {
	for _, n := range c.nodes {
		if n.pid == 0 {
			continue
		}
		if _, err := c.luftOn(n, "daemon", "stop"); err != nil {
			_ = syscall.Kill(n.pid, syscall.SIGKILL)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_ = daemon.WaitGone(ctx, n.state)
		cancel()
	}
	c.st.Close()
	if err := c.drop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.RemoveAll(c.root)
}

// submit starts a detached run of wf.lua on node n and returns its id.
func (c *cluster) submit(n *member) (string, error) {
	out, err := c.luftOn(n, "run", "--detach", "-w", "wf.lua")
	id := strings.TrimSpace(out)
	if err == nil && len(id) != 36 {
		err = fmt.Errorf("run --detach on %s printed %q, not a run id", n.state, out)
	}
	return id, err
}

// waitDone waits (polling the database) until every run has ended and returns an error
// naming any that did not complete with want in its report.
func (c *cluster) waitDone(ids []string, want string, within time.Duration) error {
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for _, id := range ids {
		for {
			r, err := c.st.GetRun(ctx, id)
			if err != nil {
				return err
			}
			if r.Status == storage.StatusCompleted {
				if !strings.Contains(string(r.Report), want) {
					return fmt.Errorf("run %s completed with report %s, want %s", id, r.Report, want)
				}
				break
			}
			if !slices.Contains([]string{storage.StatusRunning, storage.StatusQueued, storage.StatusInterrupted, storage.StatusSuspended}, r.Status) {
				return fmt.Errorf("run %s ended %s: %s", id, r.Status, r.Error)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("run %s still %s after %v", id, r.Status, within)
			}
			time.Sleep(20 * time.Millisecond) // polling another process's writes
		}
	}
	return nil
}

// finished is how many journal entries of run id have completed.
func (c *cluster) finished(id string) (int, error) {
	j, err := c.st.Journal(context.Background(), id)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range j {
		if e.Status == storage.EntryCompleted {
			n++
		}
	}
	return n, nil
}

// mem is one process's resident set size and its peak, in KiB.
type mem struct{ rss, hwm int64 }

// readMem reads VmRSS and VmHWM of pid from /proc/PID/status.
func readMem(pid int) (mem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return mem{}, err
	}
	defer f.Close()
	return parseStatus(f.Name(), bufio.NewScanner(f))
}

func parseStatus(name string, sc *bufio.Scanner) (mem, error) {
	var m mem
	var seen int
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return mem{}, fmt.Errorf("%s: %s is %q, want a number of kB", name, k, v)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return mem{}, fmt.Errorf("%s: %s: %v", name, k, err)
		}
		if k == "VmRSS" {
			m.rss = n
		} else {
			m.hwm = n
		}
		seen++
	}
	if err := sc.Err(); err != nil {
		return mem{}, err
	}
	if seen != 2 {
		return mem{}, fmt.Errorf("%s has no VmRSS and VmHWM lines (not Linux?)", name)
	}
	return m, nil
}

// cpuTime is the CPU time (user + system) pid has used, from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(string(b))
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux port.
const clockTick = 100

func parseStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc/PID/stat: no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	// After the name: state(0) ppid pgrp session tty tpgid flags minflt cminflt majflt
	// cmajflt utime(11) stime(12).
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/stat: %v", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// sampler reads the RSS of pids every interval and keeps each one's largest.
type sampler struct {
	mu   sync.Mutex
	peak map[int]int64
	stop chan struct{}
	done chan struct{}
}

func sample(pids []int, every time.Duration) *sampler {
	s := &sampler{peak: map[int]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			for _, pid := range pids {
				if m, err := readMem(pid); err == nil {
					s.mu.Lock()
					s.peak[pid] = max(s.peak[pid], m.rss)
					s.mu.Unlock()
				}
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end stops the sampler and returns each pid's largest RSS seen (KiB).
func (s *sampler) end() map[int]int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// waitEnded waits until every run has ended, however it ended.
func (c *cluster) waitEnded(ids []string, within time.Duration) error {
	for _, id := range ids {
		if err := poll(within, "run "+id+" to end", func() (bool, error) {
			r, err := c.st.GetRun(context.Background(), id)
			return err == nil && !slices.Contains([]string{storage.StatusRunning, storage.StatusQueued, storage.StatusInterrupted, storage.StatusSuspended}, r.Status), err
		}); err != nil {
			return err
		}
	}
	return nil
}

// machineBusy is the time all CPUs of the machine have spent busy (not idle or waiting on
// I/O) since boot, from the cpu line of /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

func parseProcStat(s string) (time.Duration, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("/proc/stat: the first line is not the cpu totals")
	}
	var ticks int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %v", err)
		}
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are already in user
			continue
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTick, nil
}

// serverCPU is the CPU time of each process of the PostgreSQL server whose data dir is
// $LUFT_TEST_POSTGRES_DIR/data (what .ci/postgres starts): the postmaster and its
// children, the connections' backends among them. nil when that variable is unset (a
// server elsewhere) or the server's pid file is unreadable.
func serverCPU() map[int]time.Duration {
	dir := os.Getenv("LUFT_TEST_POSTGRES_DIR")
	if dir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(b), "\n")
	root, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return nil
	}
	out := map[int]time.Duration{}
	if t, err := cpuTime(root); err == nil {
		out[root] = t
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		s, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(s), ')')
		f := strings.Fields(string(s[i+1:]))
		if i < 0 || len(f) < 2 || f[1] != strconv.Itoa(root) {
			continue
		}
		if t, err := parseStat(string(s)); err == nil {
			out[pid] = t
		}
	}
	return out
}

// serverCPUSince is the server's CPU time since before (a serverCPU reading): a backend
// started since counts from zero; one that ended since is lost.
func serverCPUSince(before map[int]time.Duration) (time.Duration, bool) {
	if before == nil {
		return 0, false
	}
	var d time.Duration
	for pid, t := range serverCPU() {
		d += t - before[pid]
	}
	return d, true
}
