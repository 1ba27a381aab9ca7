package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// fakeLease is a node's lease whose validity the test sets.
type fakeLease struct{ lapsed atomic.Bool }

func (l *fakeLease) Until() time.Time { return time.Now().Add(time.Minute) }
func (l *fakeLease) Valid() bool      { return !l.lapsed.Load() }

// leaseEnv is a node: a Service with a node id and a lease over the state dir dir.
func leaseEnv(t *testing.T, dir string, b adapters.Backend, lease Lease) (*Service, *storage.SQLite) {
	t.Helper()
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b),
		Scheduler: scheduler.NewGate(8), Backoff: func(int) time.Duration { return 0 },
		CancelPoll: 10 * time.Millisecond, Node: "host-a", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

// gatedEcho echoes every prompt; the prompt "block" waits until go is closed (or its call
// ends), announcing on entered that it was asked.
func gatedEcho() (*scripted, chan struct{}, chan struct{}) {
	entered, goOn := make(chan struct{}), make(chan struct{})
	b := &scripted{}
	b.reply = func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		if req.Prompt == "block" {
			close(entered)
			select {
			case <-goOn:
			case <-ctx.Done():
				return agent.Result{Status: agent.StatusCancelled}, context.Cause(ctx)
			}
		}
		return echo(ctx, req, n)
	}
	return b, entered, goOn
}

type runRecord struct {
	events  int
	journal []storage.Entry
	row     storage.Run
}

func record(t *testing.T, st storage.Store, id string) runRecord {
	t.Helper()
	evs, err := st.Events(t.Context(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	j, err := st.Journal(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	row, err := st.GetRun(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return runRecord{len(evs), j, row}
}

// A node whose run another node claimed (its attempt bumped) writes nothing more for it:
// the call that finishes afterwards is not journaled, no event and no end is stored, and
// the run stops at once with ErrOwnershipLost.
func TestRunLostToAClaimWritesNothingMore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	b, entered, goOn := gatedEcho()
	svc, st := leaseEnv(t, dir, b, &fakeLease{})
	path := writeScript(t, t.TempDir(), "flow.lua", oneThenBlock)
	r, err := svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	if row, _ := st.GetRun(t.Context(), r.ID); row.Node != "host-a" || row.LeaseUntil.IsZero() {
		t.Fatalf("run row: node %q, lease until %v; want host-a under a lease", row.Node, row.LeaseUntil)
	}
	// Another node claims the run: the compare-and-set on its attempt.
	other, until := "host-b", time.Now().Add(time.Minute)
	if err := st.UpdateRun(t.Context(), r.ID, storage.RunUpdate{IfAttempt: ptrTo(1), Attempt: ptrTo(2),
		Node: &other, LeaseUntil: &until}); err != nil {
		t.Fatal(err)
	}
	before := record(t, st, r.ID)
	close(goOn) // the call in flight on the old owner finishes
	res := waitRun(t, r)
	if res.Status != StatusInterrupted || !errors.Is(res.Err, storage.ErrOwnershipLost) {
		t.Fatalf("old owner's run ended %s %v, want interrupted with ErrOwnershipLost", res.Status, res.Err)
	}
	after := record(t, st, r.ID)
	if after.events != before.events || len(after.journal) != len(before.journal) {
		t.Fatalf("the old owner wrote after losing the run: events %d → %d, journal %d → %d entries",
			before.events, after.events, len(before.journal), len(after.journal))
	}
	for i, e := range after.journal {
		if e.Status != before.journal[i].Status || e.CompletedSeq != before.journal[i].CompletedSeq {
			t.Fatalf("journal %s changed after the loss: %s → %s", e.CallKey, before.journal[i].Status, e.Status)
		}
	}
	if after.row.Node != other || after.row.Attempt != 2 || after.row.Status != storage.StatusRunning || !after.row.FinishedAt.IsZero() {
		t.Fatalf("run row after the loss: node %q attempt %d status %s finished %v; the claimer's must stand",
			after.row.Node, after.row.Attempt, after.row.Status, after.row.FinishedAt)
	}
}

// A renewal that finds the run claimed stops it at once through Lost, before any write.
func TestLostStopsTheRunAtOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	b, entered, _ := gatedEcho()
	svc, st := leaseEnv(t, dir, b, &fakeLease{})
	path := writeScript(t, t.TempDir(), "flow.lua", oneThenBlock)
	r, err := svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	held := svc.Held()
	if len(held) != 1 || held[0] != (storage.Lease{RunID: r.ID, Attempt: 1}) {
		t.Fatalf("held %v", held)
	}
	if err := st.UpdateRun(t.Context(), r.ID, storage.RunUpdate{IfAttempt: ptrTo(1), Attempt: ptrTo(2)}); err != nil {
		t.Fatal(err)
	}
	before := record(t, st, r.ID)
	svc.Lost(held)
	res := waitRun(t, r)
	if res.Status != StatusInterrupted || !errors.Is(res.Err, storage.ErrOwnershipLost) {
		t.Fatalf("run ended %s %v, want interrupted with ErrOwnershipLost", res.Status, res.Err)
	}
	if after := record(t, st, r.ID); after.events != before.events || len(after.journal) != len(before.journal) {
		t.Fatalf("writes after the loss: events %d → %d, journal %d → %d", before.events, after.events, len(before.journal), len(after.journal))
	}
	if len(svc.Held()) != 0 {
		t.Fatalf("still held after the loss: %v", svc.Held())
	}
}

// The self-fence: once the node's lease may have lapsed, no call starts (the backend is
// not asked) and the run stops, leaving its row running for a claim.
func TestLapsedLeaseStartsNoCall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	b, _, _ := gatedEcho()
	lease := &fakeLease{}
	lease.lapsed.Store(true)
	svc, st := leaseEnv(t, dir, b, lease)
	path := writeScript(t, t.TempDir(), "flow.lua", oneThenBlock)
	r, err := svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	res := waitRun(t, r)
	if res.Status != StatusInterrupted || !errors.Is(res.Err, ErrLeaseLapsed) {
		t.Fatalf("run ended %s %v, want interrupted with ErrLeaseLapsed", res.Status, res.Err)
	}
	if n := total(b); n != 0 {
		t.Fatalf("the backend was asked %d times under a lapsed lease", n)
	}
	rec := record(t, st, r.ID)
	if len(rec.journal) != 0 || rec.row.Status != storage.StatusRunning {
		t.Fatalf("journal %v, row %s; want no entry and the row left running", rec.journal, rec.row.Status)
	}
}

func ptrTo[T any](v T) *T { return &v }
