package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// noteScript asks for a write_file, destructive under approval = "ask": the run waits for
// an answer, and reports what became of it.
const noteScript = `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}}
  report({ok = r.ok, output = r.output})
end`

// doneScript completes at once on the mock.
const doneScript = `function main()
  local r = agent{backend = "mock", prompt = "one"}
  report({markdown = "# Done\n\n" .. r.output})
end`

// What legitimately differs between the answers of two nodes about the same runs, and
// is taken out before they are compared:
//   - lease_until (the JSON of a live run): the owner renews it every heartbeat, so two
//     reads a moment apart differ whichever node answers;
//   - the elapsed time of a live run in luft status's board, which moves with the clock,
//     and with it the board's padding and where a line too long for the width is cut
//     ("running 9.8s" and "running 10.2s" cut the same header one character apart);
//   - hosted (the daemon API only): whether the daemon that answers is the one that
//     drives the run, which is what it says (checked to be true on the owner alone).
var (
	reLeaseUntil = regexp.MustCompile(`(?m)^ *"lease_until": "[^"]*",\n`)
	reElapsed    = regexp.MustCompile(`\b(\d+(\.\d+)?(ms|h|m|s))+\b`) // 850ms, 12.5s, 1m10s, 2h3m
	reCut        = regexp.MustCompile(`(?m) · [^·\n]*…$`)             // the last field of a line cut at the width
)

func sameAnswers(text string) string {
	text = reElapsed.ReplaceAllString(reLeaseUntil.ReplaceAllString(text, ""), "D")
	return reCut.ReplaceAllString(reSpaces.ReplaceAllString(text, " "), " · …")
}

// TestNodesGiveTheSameAnswers: three real daemons on one PostgreSQL, each owning runs
// (completed ones, and live ones waiting for an approval). luft list, status, logs (plain
// and --json) give the same answers on each node's state dir and on a state dir with no
// daemon at all; so does each daemon's API (list, run, events). A cancel or an approval
// given on a node that does not own the run (with luft cancel and approve, and through
// that node's API) answers the same on every node and takes the same effect: the owner
// ends the run cancelled, or runs the approved call and completes.
func TestNodesGiveTheSameAnswers(t *testing.T) {
	_, _, engineURL := startEngine(t, testkit.Config{ToolRules: []testkit.ToolRule{
		{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}}, Reply: "noted"},
	}})
	const n = 3
	c := newNodeCluster(t, n+1, nodeLease) // the last state dir has no daemon: the plain CLI
	for _, dt := range c.nodes {
		dt.env = append(dt.env, "OPENAI_API_KEY=k")
		ws := filepath.Join(dt.dir, "ws")
		writeFiles(t, dt.dir, map[string]string{"ws/.keep": "", "note.lua": noteScript, "done.lua": doneScript,
			"luft.toml": localBackend(engineURL, "fake-1", fmt.Sprintf("[tools]\nworkspace = %q\napproval = \"ask\"\n[node]\nlease = %q\nheartbeat = \"200ms\"\n", ws, nodeLease))})
	}
	for i := range n {
		c.nodes[i].start()
	}
	detach := func(i int, wf string) string {
		t.Helper()
		out, errOut, code := c.nodes[i].luft("run", "--detach", "-w", wf)
		id := strings.TrimSpace(out)
		if code != 0 || len(id) != 36 {
			t.Fatalf("run --detach -w %s on node %d: exit %d %q\n%s", wf, i, code, out, errOut)
		}
		return id
	}
	// Each node owns a completed run and two runs waiting for an approval (one to be
	// approved, one to be cancelled, each from another node).
	var all []string
	done, toApprove, toCancel := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		done[i], toApprove[i], toCancel[i] = detach(i, "done.lua"), detach(i, "note.lua"), detach(i, "note.lua")
		all = append(all, done[i], toApprove[i], toCancel[i])
	}
	// And two more of node 0's, to cancel and approve through the API of other nodes.
	apiCancel, apiApprove := detach(0, "note.lua"), detach(0, "note.lua")
	all = append(all, apiCancel, apiApprove)
	for _, id := range []string{apiCancel, apiApprove} {
		waitFor(t, 30*time.Second, "run "+id+" to wait for its approval", func() bool {
			ap, _ := c.st.Approvals(context.Background(), storage.ApprovalFilter{RunID: id})
			return len(ap) == 1
		})
	}
	for i := range n {
		waitFor(t, 30*time.Second, "run "+done[i]+" to complete", func() bool { return c.run(done[i]).Status == storage.StatusCompleted })
		for _, id := range []string{toApprove[i], toCancel[i]} {
			waitFor(t, 30*time.Second, "run "+id+" to wait for its approval", func() bool {
				ap, _ := c.st.Approvals(context.Background(), storage.ApprovalFilter{RunID: id})
				return len(ap) == 1
			})
			if r := c.run(id); r.Node != c.id(i) {
				t.Fatalf("run %s: owner %s, want node %d's %s", id, r.Node, i, c.id(i))
			}
		}
	}

	// The CLI on each node's state dir, and on one with no daemon (LUFT_HOME, so a resume
	// hint carries no --state-dir).
	cli := func(j int, args ...string) string {
		t.Helper()
		out, errOut, code := luftIn(t, c.nodes[j].dir, append(c.nodes[j].env, "LUFT_HOME="+c.nodes[j].state), args...)
		return fmt.Sprintf("$ luft %s\n%s%s[exit %d]\n", strings.Join(args, " "), out, errOut, code)
	}
	views := []string{"node 0", "node 1", "node 2", "no daemon"}
	commands := [][]string{{"list"}, {"list", "--json"}, {"list", "--status", "awaiting_approval"}}
	for _, id := range all {
		commands = append(commands, []string{"status", id}, []string{"status", "--json", id[:13]}, []string{"logs", id}, []string{"logs", "--json", id})
	}
	for _, args := range commands {
		var first string
		for j := range views {
			got := sameAnswers(cli(j, args...))
			if j == 0 {
				first = got
				if !strings.Contains(got, "[exit 0]") {
					t.Errorf("on %s:\n%s", views[j], got)
				}
				continue
			}
			if got != first {
				t.Errorf("luft %s answers differently on %s than on %s:\n%s", strings.Join(args, " "), views[j], views[0], labelledDiff(views[0], views[j], first, got))
			}
		}
	}
	// The owner is named the same everywhere: in list, and in status while it runs.
	if out := cli(3, "status", toApprove[1]); !regexp.MustCompile(`(?m)^node +` + regexp.QuoteMeta(c.id(1)) + `$`).MatchString(out) {
		t.Errorf("status does not name the owner %s:\n%s", c.id(1), out)
	}
	if out := cli(3, "list"); !strings.Contains(out, "NODE") || strings.Count(out, c.id(2)) != 3 {
		t.Errorf("list does not name each run's owner:\n%s", out)
	}

	// Each daemon's API: the same list, runs and events.
	clients := make([]*daemon.Client, n)
	for j := range n {
		cl, err := daemon.Dial(t.Context(), c.nodes[j].state)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients[j] = cl
	}
	paths := []string{"/api/runs?limit=100"}
	for _, id := range all {
		paths = append(paths, "/api/runs/"+id, "/api/runs/"+id+"/events")
	}
	for _, path := range paths {
		var first string
		for j := range n {
			got := apiAnswer(t, clients[j], path, c.id(j))
			if j == 0 {
				first = got
				continue
			}
			if got != first {
				t.Errorf("GET %s answers differently on node %d than on node 0:\n%s", path, j, labelledDiff("node 0", fmt.Sprintf("node %d", j), first, got))
			}
		}
	}

	// Cancels and approvals, each given on the next node: the same answer on each.
	answers := map[string][]string{}
	for i := range n {
		j := (i + 1) % n
		a := strings.ReplaceAll(cli(j, "cancel", toCancel[i]), toCancel[i], "RUN")
		answers["cancel"] = append(answers["cancel"], a)
		ap, err := c.st.Approvals(context.Background(), storage.ApprovalFilter{RunID: toApprove[i]})
		if err != nil || len(ap) != 1 {
			t.Fatalf("approvals of %s: %v %v", toApprove[i], ap, err)
		}
		a = strings.ReplaceAll(strings.ReplaceAll(cli(j, "approve", toApprove[i], "--allow"), toApprove[i], "RUN"), ap[0].ID, "APPROVAL")
		answers["approve"] = append(answers["approve"], a)
	}
	for what, got := range answers {
		for j := 1; j < len(got); j++ {
			if got[j] != got[0] {
				t.Errorf("luft %s answers differently from node %d than from node 1:\n%s", what, (j+1)%n, labelledDiff("node 1", fmt.Sprintf("node %d", (j+1)%n), got[0], got[j]))
			}
		}
		if !strings.Contains(got[0], "[exit 0]") {
			t.Errorf("luft %s:\n%s", what, got[0])
		}
	}
	// Through the API of nodes that do not own the runs, too.
	if err := clients[1].Cancel(t.Context(), apiCancel); err != nil {
		t.Errorf("POST /api/runs/%s/cancel on node 1: %v", apiCancel, err)
	}
	if err := clients[2].Approve(t.Context(), apiApprove, "", true); err != nil {
		t.Errorf("POST /api/runs/%s/approve on node 2: %v", apiApprove, err)
	}
	waitFor(t, 10*time.Second, "run "+apiCancel+" to end cancelled", func() bool { return c.run(apiCancel).Status == storage.StatusCancelled })
	waitFor(t, 10*time.Second, "run "+apiApprove+" to complete", func() bool { return c.run(apiApprove).Status == storage.StatusCompleted })
	for _, id := range []string{apiCancel, apiApprove} {
		if r := c.run(id); r.Node != c.id(0) || r.Attempt != 1 {
			t.Errorf("run %s ended by node %s at attempt %d, want its owner %s at attempt 1", id, r.Node, r.Attempt, c.id(0))
		}
	}
	if r := c.run(apiApprove); string(r.Report) != `{"ok":true,"output":"noted"}` {
		t.Errorf("the run approved through the API reports %s", r.Report)
	}
	// The effect is the same as on the owner: the owner itself ends each run.
	for i := range n {
		waitFor(t, 10*time.Second, "run "+toCancel[i]+" to end cancelled", func() bool { return c.run(toCancel[i]).Status == storage.StatusCancelled })
		waitFor(t, 10*time.Second, "run "+toApprove[i]+" to complete", func() bool { return c.run(toApprove[i]).Status == storage.StatusCompleted })
		for _, id := range []string{toCancel[i], toApprove[i]} {
			if r := c.run(id); r.Node != c.id(i) || r.Attempt != 1 {
				t.Errorf("run %s ended by node %s at attempt %d, want its owner %s at attempt 1", id, r.Node, r.Attempt, c.id(i))
			}
		}
		if r := c.run(toApprove[i]); string(r.Report) != `{"ok":true,"output":"noted"}` {
			t.Errorf("the approved run %s reports %s", toApprove[i], r.Report)
		}
		if b, err := os.ReadFile(filepath.Join(c.nodes[i].dir, "ws", "note.txt")); err != nil || string(b) != "hello" {
			t.Errorf("the approved write_file of node %d's run: note.txt %q %v", i, b, err)
		}
	}
	// And once it has ended, every node answers the same again.
	for _, id := range append(append([]string{}, toCancel...), toApprove...) {
		for _, args := range [][]string{{"status", "--json", id}, {"logs", id}} {
			first := cli(0, args...)
			for j := 1; j < len(views); j++ {
				if got := cli(j, args...); got != first {
					t.Errorf("luft %s answers differently on %s than on %s:\n%s", strings.Join(args, " "), views[j], views[0], labelledDiff(views[0], views[j], first, got))
				}
			}
		}
	}
}

// apiAnswer is the daemon's answer to GET path with what legitimately differs taken out
// (see sameAnswers); hosted is checked to be true only on the node that drives the run.
func apiAnswer(t *testing.T, cl *daemon.Client, path, self string) string {
	t.Helper()
	resp, err := cl.HTTP().Get("http://luft" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: HTTP %d %v\n%s", path, resp.StatusCode, err, b)
	}
	if strings.HasSuffix(path, "/events") {
		return string(b)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, b)
	}
	runs := []any{v}
	if list, ok := v["runs"].([]any); ok {
		runs = list
	}
	for _, r := range runs {
		m := r.(map[string]any)
		live := runtime.Running(fmt.Sprint(m["status"]))
		// The daemon drives the live runs its node holds under a lease (on SQLite a run of
		// its state dir's node held by a CLI process is that process's).
		if hosted := m["hosted"] == true; hosted != (live && m["node"] == self && m["lease_until"] != nil) {
			t.Errorf("GET %s on node %s: run %v (%v, node %v) hosted %v", path, self, m["id"], m["status"], m["node"], m["hosted"])
		}
		delete(m, "hosted")
		delete(m, "lease_until")
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}

// On both stores every view names a run's owner node: luft status (while it runs), luft
// list's NODE column, status --json and list --json, and the daemon's API. A daemon's run
// is its node's under a lease; a run `luft run` hosts itself is its process's on SQLite
// ("node N, pid P") and the node "N.cli"'s under a lease on PostgreSQL.
func TestEveryViewNamesTheOwnerNode(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			env := []string{"LUFT_MOCK_LATENCY_MS=200"}
			if store == "postgres" {
				env = append(env, storageEnv+"="+pgtest.URL(t))
			}
			dt := newDaemonTest(t, env...)
			writeFiles(t, dt.dir, map[string]string{"wf.lua": longSteps, "luft.toml": "[node]\nlease = \"3s\"\nheartbeat = \"200ms\"\n"})
			self, err := node.ID(dt.state)
			if err != nil {
				t.Fatal(err)
			}
			dt.start()
			out, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua")
			hosted := strings.TrimSpace(out)
			if code != 0 || len(hosted) != 36 {
				t.Fatalf("run --detach: exit %d %q\n%s", code, out, errOut)
			}
			// A run this state dir's CLI hosts itself, beside the daemon's.
			cmd := exec.Command(luftBinary(t), "--state-dir", dt.state, "run", "--no-tui", "-w", "wf.lua")
			cmd.Dir, cmd.Env = dt.dir, testEnv(nil, append(dt.env, "LUFT_DAEMON=off")...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			var local string
			waitFor(t, 20*time.Second, "the CLI's run to start", func() bool {
				out, _, _ := dt.luft("list", "--json")
				var runs []struct {
					ID  string `json:"run_id"`
					PID int    `json:"pid"`
				}
				_ = json.Unmarshal([]byte(out), &runs)
				for _, r := range runs {
					if r.PID == cmd.Process.Pid {
						local = r.ID
					}
				}
				return local != ""
			})
			owners := map[string]string{hosted: self, local: self + ", pid " + fmt.Sprint(cmd.Process.Pid)}
			nodes := map[string]string{hosted: self, local: self}
			if store == "postgres" {
				owners[local], nodes[local] = self+cliNodeSuffix, self+cliNodeSuffix
			}
			cl, err := daemon.Dial(t.Context(), dt.state)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			list, _, _ := dt.luft("list")
			for _, id := range []string{hosted, local} {
				out, _, _ := dt.luft("status", id)
				if !regexp.MustCompile(`(?m)^node +` + regexp.QuoteMeta(owners[id]) + `$`).MatchString(out) {
					t.Errorf("luft status %s does not name its owner %q:\n%s", id, owners[id], out)
				}
				if !regexp.MustCompile(`(?m)^` + id + ` +running .* ` + regexp.QuoteMeta(nodes[id]) + ` +\S*wf\.lua$`).MatchString(list) {
					t.Errorf("luft list does not name the node %s of run %s:\n%s", nodes[id], id, list)
				}
				out, _, _ = dt.luft("status", "--json", id)
				if !strings.Contains(out, `"node": "`+nodes[id]+`"`) {
					t.Errorf("luft status --json %s has no node %s:\n%s", id, nodes[id], out)
				}
				if api := apiAnswer(t, cl, "/api/runs/"+id, self); !strings.Contains(api, `"node": "`+nodes[id]+`"`) {
					t.Errorf("GET /api/runs/%s has no node %s:\n%s", id, nodes[id], api)
				}
			}
			out, _, _ = dt.luft("list", "--json")
			if strings.Count(out, `"node": "`+self) != 2 {
				t.Errorf("luft list --json does not name both runs' nodes:\n%s", out)
			}
		})
	}
}
