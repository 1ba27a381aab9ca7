package main

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// cliRun is a `luft run` process that hosts its run itself (LUFT_DAEMON=off) on the
// state dir of node i of c, and its output.
type cliRun struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
	code           int
}

func (c *nodeCluster) startCLI(i int) *cliRun {
	c.t.Helper()
	dt := c.nodes[i]
	p := &cliRun{done: make(chan struct{})}
	p.cmd = exec.Command(luftBinary(c.t), "--state-dir", dt.state, "run", "--no-tui", "-w", "wf.lua")
	p.cmd.Dir = dt.dir
	p.cmd.Env = testEnv(nil, append(dt.env, "LUFT_DAEMON=off")...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			p.code = ee.ExitCode()
		}
		close(p.done)
	}()
	c.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// runOf waits until the process's run exists and has finished n calls, and returns its id.
func (c *nodeCluster) runOf(p *cliRun, n int) string {
	c.t.Helper()
	var id string
	waitFor(c.t, 30*time.Second, "the CLI's run to finish some calls", func() bool {
		if id == "" {
			runs, _ := c.st.ListRuns(context.Background(), storage.ListOptions{Limit: 20})
			for _, r := range runs {
				if r.PID == p.cmd.Process.Pid {
					id = r.ID
				}
			}
		}
		return id != "" && len(c.finished(id)) >= n
	})
	return id
}

// On PostgreSQL a run that `luft run` hosts itself is held by a node of its own,
// "<state dir's node>.cli", under a lease it renews as a daemon does: SIGKILLed mid-run,
// its run is taken over by a daemon (of another state dir: on any host it would be the
// same) once the lease lapses, and completes with the report an undisturbed run gives,
// no finished call run again. Five kills, one after another.
func TestCLIRunOnPostgresIsTakenOverByADaemon(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	cliNode := c.id(1) + cliNodeSuffix
	// Undisturbed: the report to compare with, and the run's owner while it ran.
	p := c.startCLI(1)
	first := c.runOf(p, 1)
	if r := c.run(first); r.Node != cliNode || r.LeaseUntil.IsZero() || r.PID != p.cmd.Process.Pid {
		t.Fatalf("a CLI run on PostgreSQL: node %q lease %v pid %d, want node %s under a lease, pid %d", r.Node, r.LeaseUntil, r.PID, cliNode, p.cmd.Process.Pid)
	}
	nodes, err := c.st.Nodes(context.Background())
	if err != nil || !slices.ContainsFunc(nodes, func(n storage.Node) bool { return n.ID == cliNode && n.PID == p.cmd.Process.Pid }) {
		t.Errorf("nodes of the database %+v (%v): want %s with pid %d", nodes, err, cliNode, p.cmd.Process.Pid)
	}
	<-p.done
	if p.code != 0 {
		t.Fatalf("the undisturbed CLI run: exit %d\n%s", p.code, p.stderr.String())
	}
	want := c.run(first).Report
	if !strings.Contains(string(want), `"steps":40`) {
		t.Fatalf("the undisturbed run's report %s, want 40 steps", want)
	}

	d := c.nodes[0].start()
	var ids []string
	kept := map[string]map[string]int64{}
	var took []time.Duration
	for round := range 5 {
		p := c.startCLI(1)
		id := c.runOf(p, 3)
		before := c.run(id)
		if before.Node != cliNode || before.LeaseUntil.IsZero() {
			t.Fatalf("round %d: run %s owned by %q (lease %v), want %s under a lease", round, id, before.Node, before.LeaseUntil, cliNode)
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		<-p.done
		kept[id] = c.finished(id) // the dead process wrote its last
		got := c.waitClaimed([]string{id}, map[string]int{id: before.Attempt}, c.id(0), killed, nodeLease+2*time.Second)
		t.Logf("round %d: the CLI's run %s, killed after %d calls, taken over by the daemon after %v", round, id, len(kept[id]), got[0])
		took = append(took, got...)
		ids = append(ids, id)
	}
	c.checkDone(ids, kept)
	for _, id := range ids {
		if r := c.run(id); !bytes.Equal(r.Report, want) || r.PID != d.PID {
			t.Errorf("run %s: report %s by pid %d, want %s (the undisturbed run's) by the daemon %d", id, r.Report, r.PID, want, d.PID)
		}
	}
	slices.Sort(took)
	t.Logf("takeover of a killed CLI's run, lease %s, over %d kills: median %v (%v–%v)", nodeLease, len(took), took[len(took)/2], took[0], took[len(took)-1])
}

// A CLI run on PostgreSQL stopped (SIGSTOP) past its lease is taken over by a daemon;
// woken (SIGCONT), the CLI writes nothing more for it and exits at once, 3, saying that
// it lost the run and where it goes on. The run completes on the daemon.
func TestCLIRunWokenAfterLosingItsRunStops(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	d := c.nodes[0].start()
	p := c.startCLI(1)
	id := c.runOf(p, 3)
	before := c.run(id)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	took := c.waitClaimed([]string{id}, map[string]int{id: before.Attempt}, c.id(0), stopped, nodeLease+2*time.Second)
	t.Logf("the stopped CLI's run taken over after %v", took[0])
	// Nothing else writes while the CLI wakes: the daemon is stopped too.
	if err := syscall.Kill(d.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	snap := c.snapshot([]string{id})
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woke := time.Now()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		syscall.Kill(d.PID, syscall.SIGCONT)
		t.Fatalf("the woken CLI did not stop within 20 s\n%s", p.stderr.String())
	}
	t.Logf("the woken CLI stopped after %v; it said:\n%s", time.Since(woke), p.stderr.String())
	after := c.snapshot([]string{id})
	if err := syscall.Kill(d.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if snap[id] != after[id] {
		t.Errorf("writes landed from the CLI after it lost the run: %s → %s", snap[id], after[id])
	}
	if p.code != exitResumable || !strings.Contains(p.stderr.String(), "run "+id+": ownership lost, stopped here") ||
		!strings.Contains(p.stderr.String(), "luft status "+short(id)+" names its node") {
		t.Errorf("the woken CLI: exit %d, want %d with the ownership lost; stderr:\n%s", p.code, exitResumable, p.stderr.String())
	}
	c.checkDone([]string{id}, map[string]map[string]int64{id: c.finished(id)})
	if r := c.run(id); r.PID != d.PID || r.Node != c.id(0) {
		t.Errorf("run %s completed by pid %d node %s, want the daemon %d node %s", id, r.PID, r.Node, d.PID, c.id(0))
	}
}

// A CLI run on PostgreSQL whose agents use local tools, on a node that names no
// workspace, needs its state dir's node's own workspace (not one of the .cli node's, which
// no daemon serves): the daemon of the same state dir takes it over once the process dies.
func TestCLIRunWithToolsOnPostgresIsTakenOverByItsStateDirsDaemon(t *testing.T) {
	c := newNodeCluster(t, 1, nodeLease)
	writeFiles(t, c.nodes[0].dir, map[string]string{"wf.lua": toolSteps})
	c.nodes[0].start()
	p := c.startCLI(0)
	id := c.runOf(p, 3)
	before := c.run(id)
	if before.Node != c.id(0)+cliNodeSuffix || before.Workspace != runtime.NodeWorkspace(c.id(0)) {
		t.Fatalf("the CLI's run: node %q workspace %q, want node %s and workspace %s", before.Node, before.Workspace,
			c.id(0)+cliNodeSuffix, runtime.NodeWorkspace(c.id(0)))
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-p.done
	kept := map[string]map[string]int64{id: c.finished(id)}
	took := c.waitClaimed([]string{id}, map[string]int{id: before.Attempt}, c.id(0), killed, nodeLease+2*time.Second)
	t.Logf("the killed CLI's tool run taken over by its state dir's daemon after %v", took[0])
	c.checkDone([]string{id}, kept)
}
