package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// On PostgreSQL `luft mcp serve --standalone` is a node of its own, "<state dir's
// node>.mcp", holding the runs it hosts under a lease: SIGKILLed mid-run, its run is taken
// over by a daemon of the database once the lease lapses, and completes with the report
// an undisturbed run gives, no finished call run again.
func TestMCPStandaloneOnPostgresIsTakenOverByADaemon(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	d := c.nodes[0].start()
	mcpNode := c.id(1) + mcpNodeSuffix
	cl, proc, err := c.nodes[1].startMCPServeCmd("--standalone")
	if err != nil {
		t.Fatal(err)
	}
	var ex mcpRun
	mcpCall(t, cl, "workflow_execute", map[string]any{"script": longSteps}, &ex)
	id := ex.RunID
	waitFor(t, 30*time.Second, "the MCP server's run to finish 3 calls", func() bool { return len(c.finished(id)) >= 3 })
	before := c.run(id)
	if before.Node != mcpNode || before.LeaseUntil.IsZero() || before.PID != proc.Process.Pid {
		t.Fatalf("an MCP server's run on PostgreSQL: node %q lease %v pid %d, want node %s under a lease, pid %d",
			before.Node, before.LeaseUntil, before.PID, mcpNode, proc.Process.Pid)
	}
	if out, _, _ := c.nodes[0].luft("status", id); !strings.Contains(out, mcpNode) {
		t.Errorf("luft status does not name the run's node %s:\n%s", mcpNode, out)
	}
	if err := proc.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = proc.Wait()
	kept := map[string]map[string]int64{id: c.finished(id)}
	took := c.waitClaimed([]string{id}, map[string]int{id: before.Attempt}, c.id(0), killed, nodeLease+2*time.Second)
	t.Logf("the killed MCP server's run %s, after %d calls, taken over by the daemon after %v", id, len(kept[id]), took[0])
	c.checkDone([]string{id}, kept)
	if r := c.run(id); r.PID != d.PID {
		t.Errorf("run %s completed by pid %d, want the daemon %d", id, r.PID, d.PID)
	}
}

// On PostgreSQL `luft proxy serve` is a node of its own, "<state dir's node>.proxy",
// renewing the lease of its runs while it lives. SIGKILLed, its runs cannot be resumed
// (their loop lived in the client): a daemon of the database ends them once the lease
// lapses, with an error saying the proxy that hosted them died, instead of leaving them
// running.
func TestProxyOnPostgresRunsAreEndedByADaemon(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	c.nodes[0].start()
	up := okUpstream(t)
	dt := c.nodes[1]
	toml := filepath.Join(dt.dir, "luft.toml")
	b, err := os.ReadFile(toml)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dt.dir, map[string]string{"luft.toml": string(b) +
		"[backends.local]\ntype = \"openai\"\nbase_url = \"" + up.URL + "/v1\"\nmodel = \"m1\"\n"})
	p := startLuftIn(t, dt.dir, dt.env, "--state-dir", dt.state, "proxy", "serve", "--listen", "127.0.0.1:0")
	line := p.waitStdout("luft proxy listening on ")
	url := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "luft proxy listening on "))[0], "/v1")
	if code, body := proxyTurn(t, url, "conv-1", false); code != 200 {
		t.Fatalf("a turn through the proxy: %d %s", code, body)
	}
	proxyNode := c.id(1) + proxyNodeSuffix
	var id string
	waitFor(t, 10*time.Second, "the proxy's run to be recorded", func() bool {
		runs, _ := c.st.ListRuns(context.Background(), storage.ListOptions{Limit: 20})
		for _, r := range runs {
			if strings.HasPrefix(r.Workflow, "proxy:") {
				id = r.ID
			}
		}
		return id != ""
	})
	first := c.run(id)
	if first.Node != proxyNode || first.LeaseUntil.IsZero() || first.PID != p.cmd.Process.Pid || first.Status != storage.StatusRunning {
		t.Fatalf("a proxy run on PostgreSQL: node %q lease %v pid %d status %s, want node %s under a lease, pid %d, running",
			first.Node, first.LeaseUntil, first.PID, first.Status, proxyNode, p.cmd.Process.Pid)
	}
	// Renewed while the proxy lives: still its own, running, past its first lease's end.
	waitFor(t, nodeLease+5*time.Second, "the proxy's run's lease to be renewed past its first end", func() bool {
		return c.run(id).LeaseUntil.After(first.LeaseUntil.Add(time.Second))
	})
	if r := c.run(id); r.Status != storage.StatusRunning || r.Node != proxyNode {
		t.Fatalf("the live proxy's run: status %s node %s, want running on %s", r.Status, r.Node, proxyNode)
	}
	p.signal(syscall.SIGKILL)
	killed := time.Now()
	<-p.done
	waitFor(t, nodeLease+3*time.Second, "the daemon to end the dead proxy's run", func() bool {
		return c.run(id).Status != storage.StatusRunning
	})
	t.Logf("the killed proxy's run ended by the daemon after %v", time.Since(killed))
	r := c.run(id)
	if r.Status != storage.StatusCompleted || !strings.Contains(r.Error, "the proxy that hosted it died") ||
		!strings.Contains(r.Error, proxyNode) || r.Node != c.id(0) || r.Attempt != first.Attempt+1 {
		t.Errorf("the dead proxy's run: status %s error %q node %s attempt %d, want completed saying the proxy %s died, by %s at attempt %d",
			r.Status, r.Error, r.Node, r.Attempt, proxyNode, c.id(0), first.Attempt+1)
	}
	if out, _, _ := c.nodes[0].luft("status", id); !strings.Contains(out, "the proxy that hosted it died") {
		t.Errorf("luft status does not say why the run ended:\n%s", out)
	}
	if !runtime.IsExternal(r) {
		t.Errorf("the proxy's run is not marked external: spec %s", r.Spec)
	}
}
