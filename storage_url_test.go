package luft_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/internal/pgtest"
)

// Options.StorageURL keeps the runs in PostgreSQL: an Engine on another state dir with the
// same URL sees them, and no luft.db is made.
func TestStorageURLSharesRuns(t *testing.T) {
	url := pgtest.URL(t)
	a := newEngine(t, luft.Options{StorageURL: url})
	res, err := a.Run(t.Context(), luft.Script{Source: `function main() report({n = agent{prompt = "x"}.ok}) end`})
	if err != nil || res.Status != luft.StatusCompleted {
		t.Fatalf("run: %+v %v", res, err)
	}
	// The config's [storage] url is taken when the option is empty.
	b := newEngine(t, luft.Options{Config: &config.Config{Storage: config.Storage{URL: url}}})
	st, err := b.Status(t.Context(), res.RunID)
	if err != nil || st.Status != luft.StatusCompleted {
		t.Fatalf("status from another Engine on the same database: %+v %v", st, err)
	}
	for _, e := range []*luft.Engine{a, b} {
		if _, err := os.Stat(filepath.Join(e.StateDir(), "luft.db")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a luft.db on PostgreSQL (%v)", e.StateDir(), err)
		}
	}
}

func TestStorageURLRefusesOtherSchemes(t *testing.T) {
	for _, u := range []string{"mysql://u:pw@h/db", "luft.db", "postgres://u:pw@h/d b"} {
		_, err := luft.New(luft.Options{StateDir: t.TempDir(), StorageURL: u, Getenv: func(string) string { return "" }})
		if err == nil || !strings.Contains(err.Error(), "luft.New: Options.StorageURL: ") || strings.Contains(err.Error(), "pw") {
			t.Errorf("%q: %v", u, err)
		}
	}
}
