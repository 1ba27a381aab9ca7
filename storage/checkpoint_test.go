package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

// The WAL is still checkpointed into luft.db while the store is open, though the
// writer's connection no longer does it inside a commit: the checkpointer does.
func TestCheckpointerCopiesTheWALIntoTheDatabase(t *testing.T) {
	dir := t.TempDir()
	s := kindNamed("sqlite").open(t, dir, config{})
	mustCreate(t, s, Run{ID: "r1"})
	db := filepath.Join(dir, DBFile)
	st, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	before := st.Size()
	big := strings.Repeat("x", 8<<10)
	const n = 640 // about 5 MB of events, past the 1,000 pages SQLite would checkpoint at
	for i := 0; i < n; i += 16 {
		evs := make([]event.Event, 16)
		for j := range evs {
			evs[j] = event.New(event.Log, map[string]any{"msg": big})
		}
		if _, err := s.Append(t.Context(), "r1", evs...); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := os.Stat(db)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() >= before+4<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("luft.db holds %d bytes (%d before %d events of 8 KiB): the WAL was not checkpointed", st.Size(), before, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if evs, err := s.Events(t.Context(), "r1", 0, 0); err != nil || len(evs) != n {
		t.Fatalf("%d events, %v", len(evs), err)
	}
}
