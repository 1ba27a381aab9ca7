package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/storage"
)

// hostileIDs is a store whose finished runs include ids a damaged database could hold.
type hostileIDs struct {
	storage.Store
	ids []string
}

func (h hostileIDs) DeleteFinished(context.Context, time.Time) ([]string, error) { return h.ids, nil }

// Deleting finished runs removes their folders, and never a folder outside runs/ named by
// an id that is not one luft makes: "../victim" from a damaged database stays a warning.
func TestDeleteFinishedStaysInRunsFolder(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	st, err := storage.Open(t.Context(), state)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	good := uuid.Must(uuid.NewV7()).String()
	victim := filepath.Join(state, "victim")
	for _, d := range []string{filepath.Join(state, "runs", good), victim} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := New(Options{Store: hostileIDs{st, []string{good, "../victim", "../../" + filepath.Base(dir)}},
		Backends: adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{})), StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	ids, warn, err := svc.DeleteFinished(t.Context(), time.Now())
	if err != nil || len(ids) != 3 {
		t.Fatalf("ids %v, err %v", ids, err)
	}
	if warn == nil || !strings.Contains(warn.Error(), `"../victim": not a run id`) {
		t.Fatalf("warning %v, want the bad id named", warn)
	}
	if _, err := os.Stat(filepath.Join(state, "runs", good)); !os.IsNotExist(err) {
		t.Fatalf("the run's folder is still there: %v", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("a folder outside runs/ was removed: %v", err)
	}
}
