package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/storage"
)

// manySteps calls 400 agents one after another (~50 ms each under the mock's latency):
// it is still going many seconds after a node was stopped past its lease.
const manySteps = `function main()
  local n = 0
  for i = 1, 400 do if agent{prompt = "step " .. i}.ok then n = n + 1 end end
  report({steps = n})
end`

// A run on node A waits for two approvals; luft approve given through node B's state dir
// allows the first and denies the second, and each answer reaches A within a second:
// the allowed write_file runs, the denied one is declined to the model.
func TestNodesApprovalFromAnotherNode(t *testing.T) {
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "first note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"first.txt","content":"1"}`}}, Reply: "first done"},
		{Match: "second note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"second.txt","content":"2"}`}}, Reply: "second done"},
	}})
	c := newNodeCluster(t, 2, nodeLease)
	ws := filepath.Join(t.TempDir(), "ws")
	for _, dt := range c.nodes {
		dt.env = append(dt.env, "OPENAI_API_KEY=k")
		writeFiles(t, dt.dir, map[string]string{
			"ws/.keep":  "",
			"luft.toml": localBackend(url, "fake-1", fmt.Sprintf("[tools]\nworkspace = %q\n[node]\nlease = %q\nheartbeat = \"200ms\"\n", ws, nodeLease)),
			"notes.lua": `function main()
  local a = agent{name = "first", prompt = "first note", tools = {"write_file"}}
  local b = agent{name = "second", prompt = "second note", tools = {"write_file"}}
  report(a.text .. " / " .. b.text)
end`,
		})
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	c.nodes[0].start()
	c.nodes[1].start()
	out, errOut, code := c.nodes[0].luft("run", "--detach", "-w", "notes.lua")
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 36 {
		t.Fatalf("run --detach on node A: exit %d %q\n%s", code, out, errOut)
	}
	for i, allow := range []bool{true, false} {
		var pending storage.Approval
		waitFor(t, 30*time.Second, fmt.Sprintf("approval %d to be asked", i+1), func() bool {
			as, err := c.st.Approvals(context.Background(), storage.ApprovalFilter{RunID: id, Pending: true})
			if err != nil || len(as) == 0 {
				return false
			}
			pending = as[0]
			return true
		})
		flag := map[bool]string{true: "--allow", false: "--deny"}[allow]
		out, errOut, code := c.nodes[1].luft("approve", id, flag)
		answered := time.Now()
		if code != 0 {
			t.Fatalf("luft approve %s on node B: exit %d\n%s%s", flag, code, out, errOut)
		}
		decided := c.waitEvent(id, event.ApprovalDecided, pending.ID, 5*time.Second)
		took := time.Since(answered)
		t.Logf("approval %s (%s) given on node B reached node A after %v", pending.ID, flag, took)
		if took > time.Second {
			t.Errorf("approval %s: the answer reached the owner after %v, want within 1 s", flag, took)
		}
		if decided.Data["allow"] != allow {
			t.Errorf("approval_decided %v, want allow %v", decided.Data, allow)
		}
	}
	waitFor(t, 30*time.Second, "the run to complete", func() bool { return c.run(id).Status == storage.StatusCompleted })
	if r := c.run(id); r.Node != c.id(0) || r.Attempt != 1 || string(r.Report) != `"first done / second done"` {
		t.Errorf("run: node %s attempt %d report %s; want node A's first attempt to complete it", r.Node, r.Attempt, r.Report)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "first.txt")); err != nil || string(b) != "1" {
		t.Errorf("first.txt (allowed): %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "second.txt")); !os.IsNotExist(err) {
		t.Error("second.txt was written though the call was denied")
	}
	declined := 0
	for _, req := range engine.Log() {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" && string(last.Content) == tools.DeclinedText {
			declined++
		}
	}
	if declined != 1 {
		t.Errorf("the model was told of %d declined calls, want 1", declined)
	}
}

// waitEvent waits for the run's event of type typ (whose approval_id is approvalID, when
// not empty) and returns it.
func (c *nodeCluster) waitEvent(id, typ, approvalID string, within time.Duration) event.Event {
	c.t.Helper()
	var got event.Event
	waitFor(c.t, within, "event "+typ+" of run "+id, func() bool {
		evs, err := c.st.Events(context.Background(), id, 0, 0)
		if err != nil {
			c.t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == typ && (approvalID == "" || ev.Data["approval_id"] == approvalID) {
				got = ev
				return true
			}
		}
		return false
	})
	return got
}

// killListeners terminates the backends of every luft listening connection on the
// cluster's database and returns how many there were.
func (c *nodeCluster) killListeners() int {
	c.t.Helper()
	db := sql.OpenDB(stdlib.GetConnector(*mustPGConfig(c.t, c.url)))
	defer db.Close()
	var n int
	if err := db.QueryRowContext(c.t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'luft notices'`).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// listeners counts the luft listening connections on the cluster's database.
func (c *nodeCluster) listeners() int {
	c.t.Helper()
	db := sql.OpenDB(stdlib.GetConnector(*mustPGConfig(c.t, c.url)))
	defer db.Close()
	var n int
	if err := db.QueryRowContext(c.t.Context(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'luft notices'`).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// A cancel given on node B while node A's listening connection has just been killed
// (pg_terminate_backend) still reaches A, by its poll or by the look at its runs it takes
// when the listener is back; the listener reconnects by itself.
func TestNodesCancelSurvivesAKilledListener(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	for _, dt := range c.nodes {
		writeFiles(t, dt.dir, map[string]string{"wf.lua": manySteps})
	}
	c.nodes[0].start()
	c.nodes[1].start()
	ids := c.startRuns(0, 1)
	// A process listens once it drives a run: node A does, node B (which drives none) not.
	waitFor(t, 10*time.Second, "node A to listen", func() bool { return c.listeners() == 1 })
	if n := c.killListeners(); n != 1 {
		t.Fatalf("terminated %d listening backends, want 1", n)
	}
	out, errOut, code := c.nodes[1].luft("cancel", ids[0])
	asked := time.Now()
	if code != 0 {
		t.Fatalf("luft cancel on node B: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "the owner to end the run cancelled", func() bool {
		return c.run(ids[0]).Status == storage.StatusCancelled
	})
	took := time.Since(asked)
	t.Logf("cancel given while the listeners were down took effect after %v", took)
	if took > 2*time.Second {
		t.Errorf("the cancel reached the owner after %v, want within the 1 s fallback poll and a margin", took)
	}
	if r := c.run(ids[0]); r.Node != c.id(0) || r.Attempt != 1 {
		t.Errorf("run after the cancel: node %s attempt %d; the owner should have ended it itself", r.Node, r.Attempt)
	}
	waitFor(t, 10*time.Second, "node A's listener to reconnect", func() bool { return c.listeners() == 1 })
}

// A cancel given while a run changes hands is not lost: node A is stopped (SIGSTOP) past
// its lease while node B is stopped too, so nobody claims the run; a plain CLI on the same
// database cancels it; B, woken, claims the run and ends it cancelled at once, running
// none of its calls; A, woken, finds the run lost and writes nothing more.
func TestNodesCancelDuringATakeover(t *testing.T) {
	c := newNodeCluster(t, 2, nodeLease)
	for _, dt := range c.nodes {
		writeFiles(t, dt.dir, map[string]string{"wf.lua": manySteps})
	}
	pa, pb := c.nodes[0].start().PID, c.nodes[1].start().PID
	ids := c.startRuns(0, 1)
	id := ids[0]
	if err := syscall.Kill(pb, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pb, syscall.SIGCONT)
	if err := syscall.Kill(pa, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pa, syscall.SIGCONT)
	waitFor(t, 2*nodeLease, "node A's lease of the run to lapse", func() bool {
		r := c.run(id)
		return r.Status == storage.StatusRunning && time.Now().After(r.LeaseUntil)
	})
	before := c.finished(id)
	cli := newDaemonTest(t, "LUFT_STORAGE_URL="+c.url, "LUFT_DAEMON=off")
	out, errOut, code := cli.luft("cancel", id)
	if code != 0 {
		t.Fatalf("luft cancel from a plain CLI: exit %d\n%s%s", code, out, errOut)
	}
	if r := c.run(id); r.Status != storage.StatusRunning || !r.CancelRequested {
		t.Fatalf("after the cancel: status %s, cancel requested %v; want a request left for the next owner", r.Status, r.CancelRequested)
	}
	if err := syscall.Kill(pb, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "node B to claim the run and end it cancelled", func() bool {
		r := c.run(id)
		return r.Status == storage.StatusCancelled && r.Attempt == 2
	})
	if r := c.run(id); r.Node != c.id(1) {
		t.Errorf("the run was ended by node %q, want node B %s", r.Node, c.id(1))
	}
	if after := c.finished(id); len(after) != len(before) {
		t.Errorf("node B ran %d calls of a run it should have cancelled at once", len(after)-len(before))
	}
	snap := c.snapshot(ids)
	if err := syscall.Kill(pa, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	logA := filepath.Join(c.nodes[0].state, daemon.LogFile)
	waitFor(t, 10*time.Second, "the woken node A to stop the run it lost", func() bool {
		b, _ := os.ReadFile(logA)
		return strings.Contains(string(b), "run "+id+": attempt 1 stopped, no longer this node's")
	})
	if after := c.snapshot(ids); after[id] != snap[id] {
		t.Errorf("writes landed from node A after it lost the run: %s → %s", snap[id], after[id])
	}
	if r := c.run(id); r.Status != storage.StatusCancelled {
		t.Errorf("the run is %s after node A woke, want cancelled", r.Status)
	}
}

// On SQLite, a cancel given by another luft process (not the daemon's API) on the same
// state dir reaches the daemon's run within a second, by the daemon's poll.
func TestDaemonCancelFromAnotherProcessOnSQLite(t *testing.T) {
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=50")
	writeFiles(t, dt.dir, map[string]string{"wf.lua": manySteps})
	dt.start()
	out, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua")
	id := strings.TrimSpace(out)
	if code != 0 || len(id) != 36 {
		t.Fatalf("run --detach: exit %d %q\n%s", code, out, errOut)
	}
	st, err := storage.Open(t.Context(), dt.state)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := &nodeCluster{t: t, st: st}
	waitFor(t, 30*time.Second, "the run to finish 3 calls", func() bool { return len(c.finished(id)) >= 3 })
	out, errOut, code = luftIn(t, dt.dir, append(dt.env, "LUFT_DAEMON=off"), "--state-dir", dt.state, "cancel", id)
	asked := time.Now()
	if code != 0 {
		t.Fatalf("luft cancel in another process: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 5*time.Second, "the daemon to end the run cancelled", func() bool {
		return c.run(id).Status == storage.StatusCancelled
	})
	took := time.Since(asked)
	t.Logf("cancel from another process on SQLite took effect after %v", took)
	if took > time.Second {
		t.Errorf("the cancel reached the daemon's run after %v, want within 1 s", took)
	}
	if r := c.run(id); r.Attempt != 1 {
		t.Errorf("run after the cancel: attempt %d; the daemon should have ended it itself", r.Attempt)
	}
}

func mustPGConfig(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}
