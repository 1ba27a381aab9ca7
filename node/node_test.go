package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/storage"
)

// A state dir's node id is stable, another state dir is another node, and a broken id
// file is refused naming the fix.
func TestIDIsStablePerStateDir(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	id1, err := ID(a)
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := ID(a)
	other, _ := ID(b)
	if id1 != id2 || id1 == other || !SameHost(id1) || !SameHost(other) {
		t.Fatalf("ids %q %q %q", id1, id2, other)
	}
	if SameHost("elsewhere.example-0011aabb") {
		t.Fatal("another host's node counted as this host's")
	}
	if err := os.WriteFile(filepath.Join(b, IDFile), []byte("../../etc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ID(b); err == nil || !strings.Contains(err.Error(), "remove the file") {
		t.Fatalf("broken id file: %v", err)
	}
}

// The self-fence closes once no renewal has succeeded for the lease minus the margin, and
// opens again with the next renewal; a renewal reports the runs the node lost.
func TestKeeperSelfFenceAndLoss(t *testing.T) {
	st, err := storage.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateRun(t.Context(), storage.Run{ID: "r", Node: "n-1", LeaseUntil: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var lost []storage.Lease
	k, err := NewKeeper(Options{Store: st, Node: storage.Node{ID: "n-1"}, Lease: 300 * time.Millisecond, Every: 50 * time.Millisecond,
		Held: func() []storage.Lease { return []storage.Lease{{RunID: "r", Attempt: 1}} },
		Lost: func(l []storage.Lease) { lost = append(lost, l...) }})
	if err != nil {
		t.Fatal(err)
	}
	if !k.Valid() {
		t.Fatal("a fresh keeper's lease is not valid")
	}
	for deadline := time.Now().Add(5 * time.Second); k.Valid(); {
		if time.Now().After(deadline) {
			t.Fatal("the lease stayed valid with no renewal")
		}
		time.Sleep(10 * time.Millisecond) // polling the monotonic clock's verdict
	}
	if err := k.Renew(t.Context()); err != nil || !k.Valid() || len(lost) != 0 {
		t.Fatalf("after a renewal: %v, valid %v, lost %v", err, k.Valid(), lost)
	}
	if err := st.UpdateRun(t.Context(), "r", storage.RunUpdate{Attempt: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	if err := k.Renew(t.Context()); err != nil || len(lost) != 1 || lost[0].RunID != "r" {
		t.Fatalf("after a claim by another node: %v, lost %v", err, lost)
	}
	if _, err := NewKeeper(Options{Store: st, Node: storage.Node{ID: "n"}, Lease: time.Second, Margin: 2 * time.Second}); err == nil {
		t.Fatal("a margin longer than the lease was taken")
	}
	// [node] lease = "1ns": the renewal interval would be 0, which panicked the daemon's
	// ticker. It is refused with the fix named instead.
	for _, lease := range []time.Duration{1, time.Microsecond, 2 * time.Millisecond} {
		if _, err := NewKeeper(Options{Store: st, Node: storage.Node{ID: "n"}, Lease: lease}); err == nil || !strings.Contains(err.Error(), "set [node] lease to at least") {
			t.Errorf("lease %s: %v, want a refusal naming the fix", lease, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// A renewal cut short because the keeper is being stopped (its context ended) is not a
// failure to renew: nothing is logged, and the self-fence keeps its last renewal.
func TestKeeperStoppedMidRenewalLogsNothing(t *testing.T) {
	st, err := storage.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var logged []string
	k, err := NewKeeper(Options{Store: st, Node: storage.Node{ID: "n-1"}, Lease: time.Minute,
		Logf: func(format string, args ...any) { logged = append(logged, format) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := k.Renew(ctx); err == nil {
		t.Fatal("a renewal with its context ended succeeded")
	}
	if len(logged) != 0 || !k.Valid() {
		t.Fatalf("after a renewal cut by the keeper's stop: logged %q, valid %v", logged, k.Valid())
	}
	// A renewal that fails on its own is logged, once.
	st.Close()
	_ = k.Renew(t.Context())
	_ = k.Renew(t.Context())
	if len(logged) != 1 || !strings.Contains(logged[0], "renewing the lease failed") {
		t.Fatalf("renewals failing on a closed store logged %q, want one failure", logged)
	}
}
