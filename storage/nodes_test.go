package storage

import (
	"database/sql"
	"errors"

	"github.com/luft-run/luft/event"
	"testing"
	"time"
)

var t0 = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

// A heartbeat registers its node and renews the leases the node still holds; a run
// another node claimed (its attempt moved on) is reported lost, and keeps the new lease.
func testHeartbeatRenewsHeldLeases(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	a := Node{ID: "host-a-1", Address: "10.0.0.1:7878", PID: 11, StartedAt: t0}
	mustCreate(t, s, Run{ID: "r1", Node: a.ID, LeaseUntil: t0.Add(10 * time.Second)})
	mustCreate(t, s, Run{ID: "r2", Node: a.ID, LeaseUntil: t0.Add(10 * time.Second)})
	lost, err := s.Heartbeat(ctx, a, t0.Add(20*time.Second), []Lease{{"r1", 1}, {"r2", 1}})
	if err != nil || len(lost) != 0 {
		t.Fatalf("heartbeat: lost %v, %v", lost, err)
	}
	if r, _ := s.GetRun(ctx, "r1"); !r.LeaseUntil.Equal(t0.Add(20*time.Second)) || r.Node != a.ID {
		t.Fatalf("r1 after a renewal: node %q, lease until %v", r.Node, r.LeaseUntil)
	}
	// Node b claims r2: the compare-and-set on the attempt, with its own lease.
	b := "host-b-1"
	bl := t0.Add(30 * time.Second)
	if err := s.UpdateRun(ctx, "r2", RunUpdate{IfAttempt: ptr(1), Attempt: ptr(2), Node: &b, LeaseUntil: &bl}); err != nil {
		t.Fatal(err)
	}
	lost, err = s.Heartbeat(ctx, a, t0.Add(40*time.Second), []Lease{{"r1", 1}, {"r2", 1}, {"gone", 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(lost) != 2 || lost[0] != (Lease{"gone", 1}) || lost[1] != (Lease{"r2", 1}) { // by run id
		t.Fatalf("lost %v, want r2 and gone", lost)
	}
	if r, _ := s.GetRun(ctx, "r2"); r.Node != b || !r.LeaseUntil.Equal(bl) || r.Attempt != 2 {
		t.Fatalf("r2 after a's renewal: node %q, lease %v, attempt %d; a must not renew a run it lost", r.Node, r.LeaseUntil, r.Attempt)
	}
	nodes, err := s.Nodes(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes %+v, %v", nodes, err)
	}
	if n := nodes[0]; n.ID != a.ID || n.Address != a.Address || n.PID != 11 || !n.StartedAt.Equal(t0) || n.HeartbeatAt.IsZero() || n.Runs != 1 {
		t.Fatalf("node %+v", n)
	}
	if _, err := s.Heartbeat(ctx, Node{}, t0, nil); err == nil {
		t.Fatal("a heartbeat with no node id was taken")
	}
}

// Claimable lists the runs whose lease lapsed (the longest lapsed first), then running
// runs held by a process, then suspended runs that are due; live leases, finished runs
// and suspended runs not yet due are not listed.
func testClaimableOrder(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	now := t0.Add(time.Hour)
	mustCreate(t, s, Run{ID: "due", Status: StatusSuspended, ResumeAfter: now.Add(-time.Second)})
	mustCreate(t, s, Run{ID: "later", Status: StatusSuspended, ResumeAfter: now.Add(time.Second)})
	mustCreate(t, s, Run{ID: "cli", PID: 42})
	mustCreate(t, s, Run{ID: "lapsed-late", Node: "n", LeaseUntil: now.Add(-time.Second)})
	mustCreate(t, s, Run{ID: "lapsed-early", Node: "n", LeaseUntil: now.Add(-time.Minute)})
	mustCreate(t, s, Run{ID: "held", Node: "n", LeaseUntil: now.Add(time.Second)})
	mustCreate(t, s, Run{ID: "done", Status: StatusCompleted, Node: "n", LeaseUntil: now.Add(-time.Minute)})
	runs, err := s.Claimable(ctx, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range runs {
		got = append(got, r.ID)
	}
	want := []string{"lapsed-early", "lapsed-late", "cli", "due"}
	if len(got) != len(want) {
		t.Fatalf("claimable %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("claimable %v, want %v", got, want)
		}
	}
	if runs, _ := s.Claimable(ctx, now, 2); len(runs) != 2 || runs[0].ID != "lapsed-early" {
		t.Fatalf("claimable with limit 2: %d runs", len(runs))
	}
}

// Two nodes claiming one lapsed run: only one compare-and-set on its attempt wins, and the
// loser's fenced writes are refused.
func testClaimOfALapsedLease(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r", Node: "a", LeaseUntil: t0})
	until := t0.Add(time.Minute)
	wins := 0
	for _, n := range []string{"b", "c"} {
		err := s.UpdateRun(ctx, "r", RunUpdate{IfAttempt: ptr(1), Attempt: ptr(2), Node: &n, LeaseUntil: &until})
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, ErrRunChanged):
			t.Fatalf("claim by %s: %v", n, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d claims won, want 1", wins)
	}
	if r, _ := s.GetRun(ctx, "r"); r.Node != "b" || r.Attempt != 2 {
		t.Fatalf("owner %q at attempt %d, want b at 2", r.Node, r.Attempt)
	}
	if _, err := s.Append(WithFence(ctx, "r", 1), "r", event.New(event.Log, map[string]any{"message": "stale"})); !errors.Is(err, ErrOwnershipLost) {
		t.Fatalf("a's write after the claim: %v, want ErrOwnershipLost", err)
	}
	zero := time.Time{}
	if err := s.UpdateRun(ctx, "r", RunUpdate{LeaseUntil: &zero}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetRun(ctx, "r"); !r.LeaseUntil.IsZero() {
		t.Fatalf("lease not cleared: %v", r.LeaseUntil)
	}
}

// On PostgreSQL a renewal skips a run's row that another transaction holds (most often
// the node's own writer, fencing a write), then renews it on its own, waiting for it up to
// a tenth of the lease: a busy run must not miss renewal after renewal until its lease
// lapses under a live node. A row held past that wait is left to the next renewal, and
// is not lost.
func TestPostgresRenewalWaitsForARowItSkipped(t *testing.T) {
	k := kindNamed("postgres")
	place := k.place(t)
	s := k.open(t, place, config{})
	writer := k.open(t, place, config{}) // the node's writer, holding the row
	ctx := t.Context()
	a := Node{ID: "host-a-1"}
	mustCreate(t, s, Run{ID: "r1", Node: a.ID, LeaseUntil: t0.Add(time.Second)})
	hold := func() *sql.Tx {
		tx, err := writer.w.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`SELECT id FROM runs WHERE id = 'r1' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	lease := func() time.Time {
		r, err := s.GetRun(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		return r.LeaseUntil
	}

	// Held until the renewal waits for it: renewed once the holder commits.
	tx := hold()
	until := s.now().Add(10 * time.Second) // a budget of 1 s
	released := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			var waiting int
			err := writer.r.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
			if err != nil || waiting > 0 || time.Now().After(deadline) {
				released <- errors.Join(err, tx.Commit())
				return
			}
			time.Sleep(time.Millisecond) // polling another session's state
		}
	}()
	lost, err := s.Heartbeat(ctx, a, until, []Lease{{"r1", 1}})
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if err != nil || len(lost) != 0 || !lease().Equal(until) {
		t.Fatalf("a renewal of a row held until it waited: lost %v, %v, lease until %v, want %v", lost, err, lease(), until)
	}

	// Held past the wait: not renewed this time, and not lost.
	tx = hold()
	defer tx.Rollback()
	before := lease()
	lost, err = s.Heartbeat(ctx, a, s.now().Add(200*time.Millisecond), []Lease{{"r1", 1}}) // a budget of 20 ms
	if err != nil || len(lost) != 0 {
		t.Fatalf("a renewal of a row held past its wait: lost %v, %v", lost, err)
	}
	if got := lease(); !got.Equal(before) {
		t.Fatalf("the row held past the wait was renewed anyway: lease until %v, was %v", got, before)
	}
}
