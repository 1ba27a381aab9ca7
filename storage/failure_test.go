package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/luft-run/luft/event"
)

func TestUnwritableNamesTheDiskFailure(t *testing.T) {
	dir := t.TempDir()
	pathErr := func(errno syscall.Errno) error {
		return &fs.PathError{Op: "write", Path: filepath.Join(dir, "runs", "x"), Err: errno}
	}
	corrupt := &CorruptError{Dir: dir, File: filepath.Join(dir, DBFile), Err: errors.New("bad")}
	plain := errors.New("no such run")
	tests := []struct {
		name   string
		err    error
		reason string // "" = returned unchanged
	}{
		{"no space", pathErr(syscall.ENOSPC), "the disk is full"},
		{"quota", pathErr(syscall.EDQUOT), "quota"},
		{"file size limit", pathErr(syscall.EFBIG), "size limit (ulimit -f)"},
		{"read-only", pathErr(syscall.EROFS), "read-only"},
		{"I/O error", fmt.Errorf("pin: %w", pathErr(syscall.EIO)), "failing"},
		{"not a disk failure", plain, ""},
		{"already corrupt", corrupt, ""},
		{"nil", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Unwritable(dir, "pin flow.lua", tc.err)
			if tc.reason == "" {
				if got != tc.err {
					t.Fatalf("Unwritable(%v) = %v, want it unchanged", tc.err, got)
				}
				return
			}
			var ue *UnwritableError
			if !errors.As(got, &ue) || !errors.Is(got, ErrUnwritable) || !errors.Is(got, tc.err) || !Broken(got) {
				t.Fatalf("Unwritable(%v) = %#v, want an *UnwritableError wrapping it", tc.err, got)
			}
			for _, want := range []string{dir, tc.reason, "pin flow.lua", "free space on the disk that holds " + dir} {
				if !strings.Contains(got.Error(), want) {
					t.Errorf("%q does not mention %q", got, want)
				}
			}
			if again := Unwritable(dir, "other", got); again != got {
				t.Errorf("wrapped twice: %v", again)
			}
		})
	}
}

// A database that reaches SQLite's page limit fails its writes with SQLITE_FULL, as a full
// disk does: the store reports ErrUnwritable naming the state dir, keeps what it had, and
// writes again once there is room.
func TestFullDatabaseIsUnwritableAndRecovers(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, config{})
	ctx := t.Context()
	mustCreate(t, s, Run{ID: "r1", Workflow: "w.lua"})
	var pages int
	if err := s.w.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2)); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = s.Append(ctx, "r1", event.New(event.Log, map[string]any{"msg": big}))
	}
	var ue *UnwritableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnwritable) {
		t.Fatalf("append to a full database: %v, want ErrUnwritable", err)
	}
	for _, want := range []string{dir, "the disk is full", "free space"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
	// The other writes fail the same way; reads go on.
	if _, err := s.JournalFinish(ctx, Entry{RunID: "r1", CallKey: "main/1", Kind: "agent", Status: EntryCompleted,
		Result: []byte(`"` + big + `"`)}); !errors.Is(err, ErrUnwritable) {
		t.Fatalf("journal finish on a full database: %v", err)
	}
	if _, err := s.GetRun(ctx, "r1"); err != nil {
		t.Fatalf("read from a full database: %v", err)
	}
	// Room again: the same store writes.
	if _, err := s.w.ExecContext(ctx, `PRAGMA max_page_count = 1000000`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "r1", event.New(event.Log, map[string]any{"msg": big})); err != nil {
		t.Fatalf("append once there is room: %v", err)
	}
}

func TestOpenRefusesAnEmptiedDatabase(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		msg     string // "" = opens as a new database
	}{
		{name: "empty file alone (a first open cut short)", prepare: func(*testing.T, string) {}},
		{name: "empty file beside runs", msg: "holds 1 runs", prepare: func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "runs", "01a2"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "empty file beside a -wal with data", msg: "-wal holds 5 bytes", prepare: func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, DBFile+"-wal"), []byte("frame"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "empty runs folder", prepare: func(t *testing.T, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, DBFile)
			if err := os.WriteFile(db, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, dir)
			s, err := Open(t.Context(), dir)
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("open of an emptied luft.db succeeded")
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorruptState) {
				t.Fatalf("open: %v, want a *CorruptError", err)
			}
			for _, want := range []string{db, "empty (0 bytes)", tc.msg, "move the file aside"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not mention %q", err, want)
				}
			}
			if st, err := os.Stat(db); err != nil || st.Size() != 0 {
				t.Fatalf("the emptied file was changed: %v", err)
			}
		})
	}
}

// Garbage written over a database's pages is found by whatever reads them first: the open
// (schema pages) or a later query (data pages). Every such error is the corrupt-state
// error naming the file, never SQLite's raw "database disk image is malformed".
func TestGarbagePagesAreCorruptState(t *testing.T) {
	tests := []struct {
		name     string
		fromPage int  // garbage from this page (1-based) to the end
		atOpen   bool // the open notices it; otherwise the queries do
	}{
		{name: "schema pages", fromPage: 2, atOpen: true},
		{name: "data pages", fromPage: 40},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, DBFile)
			b := damagedDB(t, dir, tc.fromPage)
			check := func(what string, err error) bool {
				t.Helper()
				if err == nil {
					return false
				}
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.File != db || !strings.Contains(err.Error(), "move the file aside") {
					t.Errorf("%s: %v, want the corrupt-state error naming %s", what, err, db)
				}
				return true
			}
			ctx := t.Context()
			s, err := Open(ctx, dir)
			if check("open", err) != tc.atOpen {
				t.Fatalf("open: %v, want an error: %v", err, tc.atOpen)
			}
			if err == nil {
				defer s.Close()
				found := false
				for i := range 20 {
					_, err := s.Events(ctx, fmt.Sprintf("run-%02d", i), 0, 0)
					found = check("events", err) || found
				}
				_, err = s.Journal(ctx, "run-07")
				check("journal", err)
				_, err = s.ListRuns(ctx, ListOptions{})
				check("list runs", err)
				if !found {
					t.Fatal("no query noticed the garbage")
				}
			}
			after, _ := os.ReadFile(db)
			if !bytes.Equal(after, b) {
				t.Error("the damaged database was changed")
			}
		})
	}
}

// damagedDB fills dir with 20 runs of 40 events each, then overwrites the database from
// page fromPage on with random bytes, and returns its content.
func damagedDB(t *testing.T, dir string, fromPage int) []byte {
	t.Helper()
	s, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		id := fmt.Sprintf("run-%02d", i)
		mustCreate(t, s, Run{ID: id, Workflow: "w.lua"})
		for range 40 {
			if _, err := s.Append(t.Context(), id, event.New(event.Log, map[string]any{"msg": strings.Repeat("y", 500)})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, DBFile)
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	from := (fromPage - 1) * 4096
	if len(b) < from+16<<10 {
		t.Fatalf("database of %d bytes: too small to damage from page %d", len(b), fromPage)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := from; i < len(b); i++ {
		b[i] = byte(rng.UintN(256))
	}
	if err := os.WriteFile(db, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}
