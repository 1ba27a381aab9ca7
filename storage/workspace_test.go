package storage

import (
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/luft-run/luft/internal/pgtest"
)

// A run's workspace is stored with it, set and cleared by UpdateRun, and comes back from
// every read: GetRun, ListRuns and Claimable (the claim loop decides on it).
func testRunWorkspace(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	now := t0.Add(time.Hour)
	mustCreate(t, s, Run{ID: "tools", Node: "a", LeaseUntil: now.Add(-time.Second), Workspace: "repo"})
	mustCreate(t, s, Run{ID: "api", Node: "a", LeaseUntil: now.Add(-time.Second)})
	if r, err := s.GetRun(ctx, "tools"); err != nil || r.Workspace != "repo" {
		t.Fatalf("GetRun: workspace %q, %v", r.Workspace, err)
	}
	if r, _ := s.GetRun(ctx, "api"); r.Workspace != "" {
		t.Fatalf("a run created without one has workspace %q", r.Workspace)
	}
	ws := "node:host-a-1"
	if err := s.UpdateRun(ctx, "api", RunUpdate{Workspace: &ws}); err != nil {
		t.Fatal(err)
	}
	runs, err := s.Claimable(ctx, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range runs {
		got[r.ID] = r.Workspace
	}
	if len(got) != 2 || got["tools"] != "repo" || got["api"] != ws {
		t.Fatalf("claimable runs' workspaces %v", got)
	}
	empty := ""
	if err := s.UpdateRun(ctx, "tools", RunUpdate{Workspace: &empty}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListRuns(ctx, ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if want := map[string]string{"tools": "", "api": ws}[r.ID]; r.Workspace != want {
			t.Fatalf("listed %s with workspace %q, want %q", r.ID, r.Workspace, want)
		}
	}
	if k.name == "postgres" {
		bad := "re\x00po"
		if err := s.UpdateRun(ctx, "tools", RunUpdate{Workspace: &bad}); err == nil {
			t.Fatal("a workspace with a NUL byte was taken by PostgreSQL's text column")
		}
		if err := s.CreateRun(ctx, Run{ID: "bad", Workspace: "\xff"}); err == nil {
			t.Fatal("a run with an invalid UTF-8 workspace was created")
		}
	}
	// A claim decided on the workspace it read fails once the owner recorded another.
	stale := "other"
	if err := s.UpdateRun(ctx, "api", RunUpdate{IfAttempt: ptr(1), IfWorkspace: &stale, Attempt: ptr(2)}); !errors.Is(err, ErrRunChanged) {
		t.Fatalf("a claim on a stale workspace: %v, want ErrRunChanged", err)
	}
	if err := s.UpdateRun(ctx, "api", RunUpdate{IfAttempt: ptr(1), IfWorkspace: &ws, Attempt: ptr(2)}); err != nil {
		t.Fatalf("a claim on the run's workspace: %v", err)
	}
	// The fence covers it as every other write of an attempt.
	if err := s.UpdateRun(WithFence(ctx, "api", 7), "api", RunUpdate{Workspace: &empty}); !errors.Is(err, ErrOwnershipLost) {
		t.Fatalf("a stale attempt's workspace write: %v, want ErrOwnershipLost", err)
	}
}

// SQLite's migrations run 1, 2, 3, ... with no gap; PostgreSQL's need only be distinct,
// since they are applied by the versions the database lists.
func TestReadMigrationsGaps(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0001_a.sql": {Data: []byte("SELECT 1")},
		"m/0002_b.sql": {Data: []byte("SELECT 1")},
		"m/0004_d.sql": {Data: []byte("SELECT 1")},
	}
	if _, err := readMigrations(fsys, "m", false); err == nil {
		t.Fatal("a gap was taken where versions must run without one")
	}
	ms, err := readMigrations(fsys, "m", true)
	if err != nil || len(ms) != 3 || ms[2].version != 4 {
		t.Fatalf("with gaps: %+v, %v", ms, err)
	}
	fsys["m/0004_e.sql"] = &fstest.MapFile{Data: []byte("SELECT 1")}
	if _, err := readMigrations(fsys, "m", true); err == nil {
		t.Fatal("two migrations numbered 4 were taken")
	}
	if _, err := readMigrations(fstest.MapFS{"m/0000_z.sql": {Data: []byte("SELECT 1")}}, "m", true); err == nil {
		t.Fatal("a migration numbered 0 was taken")
	}
}

// A PostgreSQL database migrated by a luft that lacked a lower-numbered migration (one
// written on another branch at the same time) gets it from a luft that has it, and a
// luft that lacks a version the database lists refuses it as newer.
func TestPostgresMigrationsApplyAcrossAGap(t *testing.T) {
	url := pgtest.URL(t)
	base, err := readMigrations(pgMigrationFS, "migrations_pg", true)
	if err != nil {
		t.Fatal(err)
	}
	top := base[len(base)-1].version
	low := migration{version: top + 1, name: "low", sql: `CREATE TABLE gap_low (x int)`}
	high := migration{version: top + 2, name: "high", sql: `CREATE TABLE gap_high (x int)`}
	open := func(ms []migration) (*sqlStore, error) {
		return openPG(t.Context(), url, "", config{pgMigrations: ms})
	}
	s, err := open(append(base[:len(base):len(base)], high))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = open(append(base[:len(base):len(base)], low, high))
	if err != nil {
		t.Fatalf("open with the migration below the newest applied: %v", err)
	}
	defer s.Close()
	var rows, tables int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM information_schema.tables WHERE table_name IN ('gap_low', 'gap_high')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if rows != len(base)+2 || tables != 2 {
		t.Fatalf("%d migration rows (want %d), %d of the two tables", rows, len(base)+2, tables)
	}
	if _, err := open(base); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("a luft that lacks versions the database lists: %v, want ErrSchemaTooNew", err)
	}
	if _, err := open(append(base[:len(base):len(base)], high)); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("a luft that lacks a version below its newest: %v, want ErrSchemaTooNew", err)
	}
}
