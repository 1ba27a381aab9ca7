package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// wsEnv is node id serving workspaces, on the state dir dir.
func wsEnv(t *testing.T, dir string, b adapters.Backend, id string, workspaces []string) (*Service, *storage.SQLite) {
	t.Helper()
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b),
		Scheduler: scheduler.NewGate(8), Backoff: func(int) time.Duration { return 0 },
		CancelPoll: 10 * time.Millisecond, Node: id, Lease: &fakeLease{}, Workspaces: workspaces})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

// A run that only calls APIs records no workspace; it records the node's first one
// before its first call given tools, and keeps it.
func TestRunRecordsItsWorkspaceAtItsFirstToolCall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	b, entered, goOn := gatedEcho()
	svc, st := wsEnv(t, dir, b, "host-a", []string{"repo", "repo-old"})
	path := writeScript(t, t.TempDir(), "flow.lua", `function main()
  local a = agent{prompt="block"}
  local b = agent{prompt="edit", tools={"read_file", "write_file"}}
  local c = agent{prompt="after"}
  report(a.output .. "|" .. b.output .. "|" .. c.output)
end`)
	r, err := svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if row, _ := st.GetRun(t.Context(), r.ID); row.Workspace != "" {
		t.Fatalf("before any call with tools the run needs workspace %q; it only called an API", row.Workspace)
	}
	close(goOn)
	if res := waitRun(t, r); res.Status != StatusCompleted {
		t.Fatalf("run ended %s: %v", res.Status, res.Err)
	}
	if row, _ := st.GetRun(t.Context(), r.ID); row.Workspace != "repo" {
		t.Fatalf("after a call with tools the run needs workspace %q, want repo (the node's first)", row.Workspace)
	}

	api := writeScript(t, t.TempDir(), "api.lua", `function main() report(agent{prompt="x"}.output) end`)
	r2, err := svc.Start(t.Context(), Spec{Path: api})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, r2)
	if row, _ := st.GetRun(t.Context(), r2.ID); row.Workspace != "" {
		t.Fatalf("a run that only called an API needs workspace %q", row.Workspace)
	}
}

// codingAgent is a backend whose agent works in the local workspace, as an ACP agent's.
type codingAgent struct{ *scripted }

func (codingAgent) UsesWorkspace() bool { return true }

// A node that names no workspace records its own: a call to a coding agent, with no
// tools, needs it too.
func TestRunOfACodingAgentNeedsItsNodesOwnWorkspace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	svc, st := wsEnv(t, dir, codingAgent{&scripted{reply: echo}}, "host-a", nil)
	r, err := svc.Start(t.Context(), Spec{Path: writeScript(t, t.TempDir(), "flow.lua", `function main() report(agent{prompt="fix it"}.output) end`)})
	if err != nil {
		t.Fatal(err)
	}
	waitRun(t, r)
	if row, _ := st.GetRun(t.Context(), r.ID); row.Workspace != NodeWorkspace("host-a") || row.Workspace != "node:host-a" {
		t.Fatalf("workspace %q, want node:host-a", row.Workspace)
	}
}

// The claim loop of a node takes runs that need no workspace, one of its own, or its
// own node's; it leaves the others, and a resume by hand of one is refused with the fix.
func TestClaimableLeavesRunsOfAWorkspaceThisNodeLacks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	svc, st := wsEnv(t, dir, &scripted{reply: echo}, "host-b", []string{"repo", "docs"})
	lapsed := time.Now().Add(-time.Minute)
	for id, ws := range map[string]string{"api": "", "repo": "repo", "docs": "docs", "other": "other",
		"mine": "node:host-b", "theirs": "node:host-a"} {
		if err := st.CreateRun(t.Context(), storage.Run{ID: id, Node: "host-a", LeaseUntil: lapsed, Workspace: ws,
			Spec: []byte(`{"path":"flow.lua"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := svc.Claimable(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.ID)
	}
	slices.Sort(got)
	if want := []string{"api", "docs", "mine", "repo"}; !slices.Equal(got, want) {
		t.Fatalf("claimable %v, want %v", got, want)
	}
	_, err = svc.Resume(t.Context(), ResumeSpec{Run: "other"})
	if !errors.Is(err, ErrWorkspaceNotServed) || !strings.Contains(err.Error(), `workspace "other"`) ||
		!strings.Contains(err.Error(), `add "other" to [node] workspaces`) {
		t.Fatalf("resume of a run of another workspace: %v", err)
	}
	_, err = svc.Resume(t.Context(), ResumeSpec{Run: "theirs"})
	if !errors.Is(err, ErrWorkspaceNotServed) || !strings.Contains(err.Error(), "node host-a") {
		t.Fatalf("resume of a run bound to another node: %v", err)
	}
	if row, _ := st.GetRun(t.Context(), "other"); row.Attempt != 1 || row.Node != "host-a" {
		t.Fatalf("a refused resume claimed the run: attempt %d, node %s", row.Attempt, row.Node)
	}
}

// A run taken over by a node that serves its workspace keeps it: the new attempt's
// calls with tools do not record it again, and replayed calls do not either.
func TestTakenOverRunKeepsItsWorkspace(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	b, entered, _ := gatedEcho()
	a, st := wsEnv(t, dir, b, "host-a", []string{"repo"})
	path := writeScript(t, t.TempDir(), "flow.lua", `function main()
  local a = agent{prompt="edit", tools={"read_file"}}
  local b = agent{prompt="block"}
  local d = agent{prompt="more", tools={"write_file"}}
  report(a.output .. "|" .. b.output .. "|" .. d.output)
end`)
	r, err := a.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	r.cancel(errors.New("the test stops node a")) // as a node dies: the row stays running
	waitRun(t, r)
	running, lapsed := storage.StatusRunning, time.Now().Add(-time.Second) // its lease lapsed
	if err := st.UpdateRun(t.Context(), r.ID, storage.RunUpdate{Status: &running, LeaseUntil: &lapsed}); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", &scripted{reply: echo}),
		Scheduler: scheduler.NewGate(8), Backoff: func(int) time.Duration { return 0 },
		CancelPoll: 10 * time.Millisecond, Node: "host-c", Lease: &fakeLease{}, Workspaces: []string{"other", "repo"}})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Resume(t.Context(), ResumeSpec{Run: r.ID})
	if err != nil {
		t.Fatal(err)
	}
	if res := waitRun(t, r2); res.Status != StatusCompleted {
		t.Fatalf("taken over run ended %s: %v", res.Status, res.Err)
	}
	if row, _ := st.GetRun(t.Context(), r.ID); row.Workspace != "repo" || row.Node != "host-c" {
		t.Fatalf("after the takeover: workspace %q, node %s; want repo on host-c", row.Workspace, row.Node)
	}
}

// Waiting says why a run of a workspace has not been taken over; nothing for a run
// that needs none, one still under its lease, or one not yet due.
func TestWaiting(t *testing.T) {
	now := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		r    storage.Run
		want string
	}{
		{storage.Run{Status: storage.StatusInterrupted, Node: "a", LeaseUntil: now.Add(-12 * time.Second), Workspace: "repo"},
			"waiting for a node that serves workspace repo (the lease of node a lapsed 12s ago)"},
		{storage.Run{Status: storage.StatusRunning, Node: "a", LeaseUntil: now.Add(-3 * time.Second), Workspace: "node:a"},
			"waiting for node a, whose local tools it used (the lease of node a lapsed 3s ago)"},
		{storage.Run{Status: storage.StatusSuspended, ResumeAfter: now.Add(-time.Minute), Workspace: "repo"},
			"waiting for a node that serves workspace repo (its resume time passed 1m0s ago)"},
		{storage.Run{Status: storage.StatusRunning, Node: "a", LeaseUntil: now.Add(time.Second), Workspace: "repo"}, ""},
		{storage.Run{Status: storage.StatusSuspended, ResumeAfter: now.Add(time.Minute), Workspace: "repo"}, ""},
		{storage.Run{Status: storage.StatusInterrupted, Node: "a", LeaseUntil: now.Add(-time.Minute)}, ""},
		{storage.Run{Status: storage.StatusCompleted, Node: "a", LeaseUntil: now.Add(-time.Minute), Workspace: "repo"}, ""},
	} {
		if got := Waiting(c.r, now); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

// bindingOwner is a store on which the run's old owner records a workspace just before a
// claim's compare-and-set lands, as an owner paused between its self-fence and that write.
type bindingOwner struct {
	storage.Store
	ws string
}

func (b bindingOwner) UpdateRun(ctx context.Context, id string, u storage.RunUpdate) error {
	if u.Attempt != nil {
		if err := b.Store.UpdateRun(ctx, id, storage.RunUpdate{Workspace: &b.ws}); err != nil {
			return err
		}
	}
	return b.Store.UpdateRun(ctx, id, u)
}

// A claim decided on a run that needed no workspace does not take it once its owner has
// recorded one in the meantime: the compare-and-set is on the workspace too.
func TestClaimLosesToAWorkspaceRecordedMeanwhile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	path := writeScript(t, t.TempDir(), "flow.lua", `function main() report(agent{prompt="x"}.output) end`)
	svc, err := New(Options{Store: bindingOwner{st, "repo"}, StateDir: dir, Backends: adapters.NewRegistry("fake", &scripted{reply: echo}),
		Scheduler: scheduler.NewGate(8), Node: "host-b", Lease: &fakeLease{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(t.Context(), storage.Run{ID: "r", Node: "host-a", LeaseUntil: time.Now().Add(-time.Second),
		Spec: []byte(`{"path":` + strconv.Quote(path) + `}`)}); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Resume(t.Context(), ResumeSpec{Run: "r"})
	if !errors.Is(err, ErrStillRunning) || !strings.Contains(err.Error(), `needs workspace "repo"`) {
		t.Fatalf("claim after the owner recorded a workspace: %v", err)
	}
	if row, _ := st.GetRun(t.Context(), "r"); row.Attempt != 1 || row.Node != "host-a" || row.Workspace != "repo" {
		t.Fatalf("row after the lost claim: attempt %d node %s workspace %q", row.Attempt, row.Node, row.Workspace)
	}
}
