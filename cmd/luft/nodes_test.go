package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/storage"
)

// nodeLease is the lease of the nodes in these tests: short, so a takeover comes soon,
// and long enough that a node on a loaded 2-core machine keeps renewing it.
const nodeLease = 3 * time.Second

// longSteps calls 40 agents one after another (~50 ms each under the mock's latency):
// long enough to be mid-flight when its daemon is killed.
const longSteps = `function main()
  local n = 0
  for i = 1, 40 do if agent{prompt = "step " .. i}.ok then n = n + 1 end end
  report({steps = n})
end`

// nodeCluster is daemons, each on its own state dir, sharing one PostgreSQL database.
type nodeCluster struct {
	t     *testing.T
	url   string
	st    storage.DB // the test's own view of the database
	nodes []*daemonTest
}

func newNodeCluster(t *testing.T, n int, lease time.Duration) *nodeCluster {
	url := pgtest.URL(t)
	st, err := storage.OpenURL(t.Context(), url, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := &nodeCluster{t: t, url: url, st: st}
	for range n {
		dt := newDaemonTest(t, "LUFT_STORAGE_URL="+url, "LUFT_MOCK_LATENCY_MS=50")
		writeFiles(t, dt.dir, map[string]string{"wf.lua": longSteps,
			"luft.toml": fmt.Sprintf("[node]\nlease = %q\nheartbeat = \"200ms\"\n", lease)})
		c.nodes = append(c.nodes, dt)
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(dt.state, daemon.LogFile))
				t.Logf("log of the daemon of %s:\n%s", dt.state, b)
			}
		})
	}
	return c
}

// id is the node id of daemon i (its state dir's).
func (c *nodeCluster) id(i int) string {
	id, err := node.ID(c.nodes[i].state)
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// startRuns starts n detached runs on daemon i and waits until each has finished a few
// calls.
func (c *nodeCluster) startRuns(i, n int) []string {
	c.t.Helper()
	var ids []string
	for range n {
		out, errOut, code := c.nodes[i].luft("run", "--detach", "-w", "wf.lua")
		id := strings.TrimSpace(out)
		if code != 0 || len(id) != 36 {
			c.t.Fatalf("run --detach on node %d: exit %d %q\n%s", i, code, out, errOut)
		}
		ids = append(ids, id)
	}
	for _, id := range ids {
		waitFor(c.t, 30*time.Second, "run "+id+" to finish 3 calls", func() bool { return len(c.finished(id)) >= 3 })
	}
	return ids
}

// finished is the run's completed journal entries: call key → completed_seq.
func (c *nodeCluster) finished(id string) map[string]int64 {
	j, err := c.st.Journal(context.Background(), id)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range j {
		if e.Status == storage.EntryCompleted {
			out[e.CallKey] = e.CompletedSeq
		}
	}
	return out
}

func (c *nodeCluster) run(id string) storage.Run {
	r, err := c.st.GetRun(context.Background(), id)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// waitClaimed waits until node owner holds each run at a later attempt than before and
// returns how long after since each claim came.
func (c *nodeCluster) waitClaimed(ids []string, before map[string]int, owner string, since time.Time, within time.Duration) []time.Duration {
	c.t.Helper()
	var took []time.Duration
	for _, id := range ids {
		waitFor(c.t, within, fmt.Sprintf("node %s to take run %s over", owner, id), func() bool {
			r := c.run(id)
			return r.Node == owner && r.Attempt > before[id]
		})
		took = append(took, time.Since(since))
	}
	return took
}

// checkDone waits for each run to complete with its 40 steps, and checks that no call
// finished before a kill ran again: its journal entry keeps the completion it had.
func (c *nodeCluster) checkDone(ids []string, kept map[string]map[string]int64) {
	c.t.Helper()
	for _, id := range ids {
		waitFor(c.t, 60*time.Second, "run "+id+" to complete", func() bool {
			return c.run(id).Status == storage.StatusCompleted
		})
		if r := c.run(id); !strings.Contains(string(r.Report), `"steps":40`) {
			c.t.Errorf("run %s report %s, want 40 steps", id, r.Report)
		}
		now := c.finished(id)
		for key, seq := range kept[id] {
			if now[key] != seq {
				c.t.Errorf("run %s: call %s finished before the kill (completion %d) ran again (completion %d)", id, key, seq, now[key])
			}
		}
	}
}

// Two real daemons on one PostgreSQL database: each is a node with a stable id, shown by
// luft daemon status; when one is SIGKILLed, the other takes its runs over within the
// lease + 2 s and finishes them with no finished call run again. Five kills, alternating.
func TestNodesTakeOverAKilledDaemonsRuns(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	pids := []int{c.nodes[0].start().PID, c.nodes[1].start().PID}
	out, errOut, code := c.nodes[0].luft("daemon", "status", "--json")
	if code != 0 || !strings.Contains(out, `"node": "`+c.id(0)+`"`) {
		t.Fatalf("daemon status --json: exit %d, want node %s\n%s%s", code, c.id(0), out, errOut)
	}
	waitFor(t, 10*time.Second, "both nodes in daemon status", func() bool {
		out, _, _ := c.nodes[1].luft("daemon", "status")
		return strings.Contains(out, c.id(0)) && strings.Contains(out, c.id(1)+" · ")
	})
	var all []string
	kept := map[string]map[string]int64{}
	var took []time.Duration
	victim := 0
	for round := range 5 {
		other := 1 - victim
		ids := c.startRuns(victim, 2)
		all = append(all, ids...)
		before := map[string]int{}
		for _, id := range ids {
			r := c.run(id)
			if r.Node != c.id(victim) || r.LeaseUntil.IsZero() {
				t.Fatalf("run %s: owner %q lease %v, want node %s under a lease", id, r.Node, r.LeaseUntil, c.id(victim))
			}
			before[id] = r.Attempt
		}
		if out, _, _ := c.nodes[other].luft("status", ids[0]); !regexp.MustCompile(`(?m)^node +` + regexp.QuoteMeta(c.id(victim)) + `$`).MatchString(out) {
			t.Errorf("status on the other node does not name the owner %s:\n%s", c.id(victim), out)
		}
		if err := syscall.Kill(pids[victim], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		c.nodes[victim].kill(pids[victim])
		for _, id := range ids {
			kept[id] = c.finished(id) // the dead node wrote its last
		}
		d := c.waitClaimed(ids, before, c.id(other), killed, nodeLease+2*time.Second)
		t.Logf("round %d: node %s killed; node %s took its runs over after %v", round, c.id(victim), c.id(other), d)
		took = append(took, d...)
		pids[victim] = c.nodes[victim].start().PID
		victim = other
	}
	c.checkDone(all, kept)
	slices.Sort(took)
	t.Logf("takeover latency over %d runs, lease %s: median %v, min %v, max %v",
		len(took), nodeLease, took[len(took)/2], took[0], took[len(took)-1])
	out, _, _ = c.nodes[0].luft("list")
	if !strings.Contains(out, "NODE") {
		t.Errorf("luft list shows no owner node:\n%s", out)
	}
}

// A node stopped (SIGSTOP) past its lease loses its runs to another node; woken (SIGCONT),
// it writes nothing more for them: its renewal finds them lost and it stops them, and its
// calls in flight are refused by the fence.
func TestNodeWokenAfterLosingItsRunsWritesNothing(t *testing.T) {
	c := newNodeCluster(t, 2, 3*time.Second)
	pa, pb := c.nodes[0].start().PID, c.nodes[1].start().PID
	ids := c.startRuns(0, 3)
	before := map[string]int{}
	for _, id := range ids {
		before[id] = c.run(id).Attempt
	}
	if err := syscall.Kill(pa, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer syscall.Kill(pa, syscall.SIGCONT)
	c.waitClaimed(ids, before, c.id(1), stopped, 3*time.Second+2*time.Second)
	// Nothing else writes while the zombie wakes: the new owner is stopped too.
	if err := syscall.Kill(pb, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	bStopped := time.Now()
	snap := c.snapshot(ids)
	if err := syscall.Kill(pa, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	logA := filepath.Join(c.nodes[0].state, daemon.LogFile)
	waitFor(t, 10*time.Second, "the woken node to stop the runs it lost", func() bool {
		b, _ := os.ReadFile(logA)
		n := 0
		for _, id := range ids {
			if strings.Contains(string(b), "run "+id+": attempt 1 stopped, no longer this node's") {
				n++
			}
		}
		return n == len(ids)
	})
	after := c.snapshot(ids)
	syscall.Kill(pb, syscall.SIGCONT)
	if time.Since(bStopped) >= 3*time.Second {
		t.Logf("the second node was stopped %v, past its lease: the comparison still holds, nothing but the woken node could write", time.Since(bStopped))
	}
	for _, id := range ids {
		if snap[id] != after[id] {
			t.Errorf("run %s: writes landed from the node that lost it: %s → %s", id, snap[id], after[id])
		}
	}
	// The renewal that finds the runs lost logs after the fence has stopped them.
	waitFor(t, 5*time.Second, "the woken node's log to name the lost ownership", func() bool {
		b, _ := os.ReadFile(logA)
		return strings.Contains(string(b), "ownership lost")
	})
	kept := map[string]map[string]int64{}
	for _, id := range ids {
		kept[id] = c.finished(id)
	}
	c.checkDone(ids, kept)
}

// snapshot is what the store holds of each run: its events, journal and row.
func (c *nodeCluster) snapshot(ids []string) map[string]string {
	out := map[string]string{}
	for _, id := range ids {
		evs, err := c.st.Events(context.Background(), id, 0, 0)
		if err != nil {
			c.t.Fatal(err)
		}
		var keys []string
		for k, v := range c.finished(id) {
			keys = append(keys, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(keys)
		r := c.run(id)
		out[id] = fmt.Sprintf("%d events, journal %v, status %s attempt %d node %s", len(evs), keys, r.Status, r.Attempt, r.Node)
	}
	return out
}

// A cancel given on another node reaches the owner within a second: luft cancel on node
// B's state dir stops a run node A drives.
func TestNodesCancelFromAnotherNode(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	c.nodes[0].start()
	c.nodes[1].start()
	ids := c.startRuns(0, 1)
	out, errOut, code := c.nodes[1].luft("cancel", ids[0])
	asked := time.Now()
	if code != 0 {
		t.Fatalf("luft cancel on node B: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "the owner to end the run cancelled", func() bool {
		return c.run(ids[0]).Status == storage.StatusCancelled
	})
	took := time.Since(asked)
	t.Logf("cancel from another node took effect after %v", took)
	if took > time.Second {
		t.Errorf("the cancel reached the owner after %v, want within 1 s", took)
	}
	if r := c.run(ids[0]); r.Node != c.id(0) || r.Attempt != 1 {
		t.Errorf("run after the cancel: node %s attempt %d; the owner should have ended it itself", r.Node, r.Attempt)
	}
}

// On SQLite, a daemon that is up takes over a run whose CLI process died (LUFT_DAEMON=off:
// the run is driven by that process), without being restarted, and completes it with no
// finished call run again.
func TestDaemonTakesOverARunWhoseProcessDied(t *testing.T) {
	t.Run("api", func(t *testing.T) { testDaemonTakesOverARunWhoseProcessDied(t, longSteps, "") })
	// A run whose agents used local tools on a node that names no workspace needs that
	// node's own: the daemon of the same state dir is that node.
	t.Run("tools", func(t *testing.T) { testDaemonTakesOverARunWhoseProcessDied(t, toolSteps, "node:") })
}

func testDaemonTakesOverARunWhoseProcessDied(t *testing.T, workflow, workspace string) {
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=50")
	writeFiles(t, dt.dir, map[string]string{"wf.lua": workflow,
		"luft.toml": "[node]\nlease = \"3s\"\nheartbeat = \"200ms\"\n"})
	info := dt.start()
	cmd := exec.Command(luftBinary(t), "--state-dir", dt.state, "run", "--no-tui", "-w", "wf.lua")
	cmd.Dir = dt.dir
	cmd.Env = testEnv(nil, append(dt.env, "LUFT_DAEMON=off")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := storage.Open(t.Context(), dt.state)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := &nodeCluster{t: t, st: st}
	var id string
	waitFor(t, 30*time.Second, "the CLI's run to finish 3 calls", func() bool {
		runs, _ := st.ListRuns(context.Background(), storage.ListOptions{Limit: 1})
		if len(runs) == 1 {
			id = runs[0].ID
		}
		return id != "" && len(c.finished(id)) >= 3
	})
	if r := c.run(id); r.PID != cmd.Process.Pid || !r.LeaseUntil.IsZero() {
		t.Fatalf("the CLI's run: pid %d lease %v, want pid %d and no lease", r.PID, r.LeaseUntil, cmd.Process.Pid)
	}
	if workspace != "" {
		nid, err := node.ID(dt.state)
		if err != nil {
			t.Fatal(err)
		}
		workspace += nid
	}
	if r := c.run(id); r.Workspace != workspace {
		t.Fatalf("the CLI's run needs workspace %q, want %q", r.Workspace, workspace)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	killed := time.Now()
	kept := map[string]map[string]int64{id: c.finished(id)}
	waitFor(t, 5*time.Second, "the daemon to take the run over", func() bool {
		r := c.run(id)
		return r.PID == info.PID && r.Attempt == 2
	})
	t.Logf("the daemon took the dead CLI's run over after %v", time.Since(killed))
	c.checkDone([]string{id}, kept)
}
