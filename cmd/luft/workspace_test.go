package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/storage"
)

// toolSteps is longSteps with agents given a local tool: a run of it needs its
// workspace. Its report holds every agent's output, so a run taken over must give the
// bytes an undisturbed run gives.
const toolSteps = `function main()
  local outs = {}
  for i = 1, 40 do
    local r = agent{prompt = "step " .. i, tools = {"read_file"}}
    if r.ok then outs[#outs + 1] = r.output end
  end
  report({steps = #outs, outputs = table.concat(outs, "|")})
end`

// Three daemons on one PostgreSQL: A and C serve workspace "repo", B serves none. A starts
// a run whose agents use a local tool and one that only calls the API, and is SIGKILLed.
// B takes the API run over and leaves the tool run, whose status on B says it waits for a
// node that serves "repo"; C, once started, takes it over and it completes with the report
// an undisturbed run gives, no finished call run again.
func TestWorkspaceRunWaitsForANodeThatServesIt(t *testing.T) {
	const beat = 200 * time.Millisecond
	c := newNodeCluster(t, 3, nodeLease)
	for i, ws := range []string{`["repo"]`, `[]`, `["other", "repo"]`} {
		writeFiles(t, c.nodes[i].dir, map[string]string{"tools.lua": toolSteps,
			"luft.toml": fmt.Sprintf("[node]\nlease = %q\nheartbeat = %q\nworkspaces = %s\n", nodeLease, beat, ws)})
	}
	a, b, cn := c.nodes[0], c.nodes[1], c.nodes[2]
	pa := a.start().PID
	b.start()
	start := func(dt *daemonTest, wf string) string {
		out, errOut, code := dt.luft("run", "--detach", "-w", wf)
		id := strings.TrimSpace(out)
		if code != 0 || len(id) != 36 {
			t.Fatalf("run --detach -w %s: exit %d %q\n%s", wf, code, out, errOut)
		}
		return id
	}
	tool, api := start(a, "tools.lua"), start(a, "wf.lua")
	for _, id := range []string{tool, api} {
		waitFor(t, 30*time.Second, "run "+id+" to finish 3 calls", func() bool { return len(c.finished(id)) >= 3 })
	}
	if r := c.run(tool); r.Workspace != "repo" || r.Node != c.id(0) {
		t.Fatalf("the tool run: workspace %q node %s, want repo on %s", r.Workspace, r.Node, c.id(0))
	}
	if r := c.run(api); r.Workspace != "" {
		t.Fatalf("the API-only run needs workspace %q", r.Workspace)
	}
	a.kill(pa)
	killed := time.Now()
	kept := map[string]map[string]int64{tool: c.finished(tool), api: c.finished(api)}

	// The API-only run moves to B.
	moved := c.waitClaimed([]string{api}, map[string]int{api: 1}, c.id(1), killed, nodeLease+5*time.Second)
	// B has looked for runs to take over many times since the tool run's lease lapsed:
	// its heartbeats (each beside a pass of its claim loop) go on well past it.
	lapsed := c.run(tool).LeaseUntil
	waitFor(t, 10*time.Second, "node B to beat 5 times after the tool run's lease lapsed", func() bool {
		nodes, err := c.st.Nodes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			if n.ID == c.id(1) {
				return n.HeartbeatAt.After(lapsed.Add(5 * beat))
			}
		}
		return false
	})
	if r := c.run(tool); r.Attempt != 1 || r.Node != c.id(0) {
		t.Fatalf("node B (no workspace) took the tool run: attempt %d node %s", r.Attempt, r.Node)
	}
	want := "waiting for a node that serves workspace repo (the lease of node " + c.id(0) + " lapsed "
	out, errOut, code := b.luft("status", tool)
	if code != 0 || !strings.Contains(out, "interrupted: "+want) || !strings.Contains(out, "workspace  repo") {
		t.Errorf("luft status on B: exit %d, want %q\n%s%s", code, want, out, errOut)
	}
	var st door.Run
	out, _, _ = b.luft("status", "--json", tool)
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Workspace != "repo" || !strings.HasPrefix(st.Waiting, want) {
		t.Errorf("luft status --json on B: workspace %q waiting %q, %v\n%s", st.Workspace, st.Waiting, err, out)
	}
	var list []door.Run
	out, _, _ = b.luft("list", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	for _, r := range list {
		if r.RunID == tool && !strings.HasPrefix(r.Waiting, want) || r.RunID == api && r.Waiting != "" {
			t.Errorf("list --json: run %s waiting %q", r.RunID, r.Waiting)
		}
	}
	cl, err := daemon.Dial(t.Context(), b.state)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.HTTP().Get("http://luft/api/runs/" + tool)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var apiRun door.Run
	if err := json.Unmarshal(body, &apiRun); err != nil || !strings.HasPrefix(apiRun.Waiting, want) || apiRun.Workspace != "repo" {
		t.Errorf("GET /api/runs/%s on B: HTTP %d, waiting %q, %v\n%s", tool, resp.StatusCode, apiRun.Waiting, err, body)
	}

	// C serves "repo": it takes the tool run over.
	up := time.Now()
	cn.start()
	taken := c.waitClaimed([]string{tool}, map[string]int{tool: 1}, c.id(2), up, nodeLease+10*time.Second)
	t.Logf("lease %s: the API run moved to B %v after the kill; the tool run was taken by C %v after `luft daemon start` on C began",
		nodeLease, moved[0].Round(time.Millisecond), taken[0].Round(time.Millisecond))
	c.checkDoneAs(tool, kept[tool], `"steps":40`)
	c.checkDoneAs(api, kept[api], `"steps":40`)
	if r := c.run(api); r.Node != c.id(1) {
		t.Errorf("the API run ended on %s, want B", r.Node)
	}
	// The same workflow undisturbed, on C, gives the same report.
	calm := start(cn, "tools.lua")
	waitFor(t, 60*time.Second, "the undisturbed run to complete", func() bool {
		return c.run(calm).Status == storage.StatusCompleted
	})
	if got, want := string(c.run(tool).Report), string(c.run(calm).Report); got != want {
		t.Errorf("the taken-over run's report differs from an undisturbed run's:\n%s\n%s", got, want)
	}
	if out, _, _ := b.luft("status", "--json", tool); strings.Contains(out, `"waiting"`) {
		t.Errorf("a completed run still says it waits:\n%s", out)
	}
}

// checkDoneAs waits for run id to complete with a report holding want, and checks that no
// call finished before (kept) ran again.
func (c *nodeCluster) checkDoneAs(id string, kept map[string]int64, want string) {
	c.t.Helper()
	waitFor(c.t, 60*time.Second, "run "+id+" to complete", func() bool {
		return c.run(id).Status == storage.StatusCompleted
	})
	if r := c.run(id); !strings.Contains(string(r.Report), want) {
		c.t.Errorf("run %s report %s, want %s", id, r.Report, want)
	}
	now := c.finished(id)
	for key, seq := range kept {
		if now[key] != seq {
			c.t.Errorf("run %s: call %s finished before the kill (completion %d) ran again (completion %d)", id, key, seq, now[key])
		}
	}
}
