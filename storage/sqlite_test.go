package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

// clock is a fake time source: every call is one millisecond later than the last.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func openTest(t testing.TB, dir string, cfg config) *SQLite {
	t.Helper()
	if cfg.now == nil {
		cfg.now = newClock().now
	}
	s, err := open(context.Background(), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func mustCreate(t testing.TB, s Store, r Run) {
	t.Helper()
	if err := s.CreateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestOpenCreatesDirAndMigratesOnce(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "a", "b", ".luft")
	for i := range 3 { // reopening applies nothing twice
		s, err := Open(ctx, dir)
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		var n, v int
		if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		ms, _ := migrations()
		if n != len(ms) || v != len(ms) {
			t.Fatalf("open %d: %d migrations recorded, max %d; want %d", i, n, v, len(ms))
		}
		var mode string
		var busy int
		if err := s.r.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := s.r.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || busy != 5000 {
			t.Fatalf("journal_mode %q busy_timeout %d", mode, busy)
		}
		if _, err := s.r.ExecContext(ctx, `INSERT INTO runs (id, status, created_at, updated_at) VALUES ('x', 'running', '', '')`); err == nil {
			t.Fatal("the read pool must be query_only")
		}
		if i == 0 {
			mustCreate(t, s, Run{ID: "kept"})
		}
		if _, err := s.GetRun(ctx, "kept"); err != nil {
			t.Fatalf("open %d: data lost: %v", i, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, DBFile)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesBadState(t *testing.T) {
	garbage := bytes.Repeat([]byte("this is not a SQLite database, it is garbage. "), 200)
	tests := []struct {
		name    string
		prepare func(t *testing.T, dir string)
		want    error
		msg     []string
	}{
		{
			name: "garbage file",
			prepare: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, DBFile), garbage, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: ErrCorruptState,
			msg:  []string{"state dir is corrupt", DBFile, "move the file aside"},
		},
		{
			name: "table dropped by hand",
			prepare: func(t *testing.T, dir string) {
				rawExec(t, dir, `DROP TABLE journal`)
			},
			want: ErrCorruptState,
			msg:  []string{"state dir is corrupt", DBFile, "table journal is missing", "move the file aside"},
		},
		{
			name: "foreign tables without migrations",
			prepare: func(t *testing.T, dir string) {
				rawExec(t, dir, `DROP TABLE schema_migrations`)
			},
			want: ErrCorruptState,
			msg:  []string{"state dir is corrupt", "applying migration 0001_init"},
		},
		{
			name: "schema from a newer luft",
			prepare: func(t *testing.T, dir string) {
				rawExec(t, dir, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', '')`)
			},
			want: ErrSchemaTooNew,
			msg:  []string{"schema version 999", "use a newer luft"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.prepare(t, dir)
			before, _ := os.ReadFile(filepath.Join(dir, DBFile))
			s, err := Open(t.Context(), dir)
			if err == nil {
				s.Close()
				t.Fatal("open succeeded")
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
			after, err2 := os.ReadFile(filepath.Join(dir, DBFile))
			if err2 != nil || (tc.want == ErrCorruptState && !bytes.Equal(before, after)) {
				t.Fatalf("the database file was changed or removed: %v", err2)
			}
		})
	}
}

// rawExec creates a store in dir, closes it and runs q on the bare file.
func rawExec(t *testing.T, dir, q string) {
	t.Helper()
	s, err := Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", fileURI(filepath.Join(dir, DBFile)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q); err != nil {
		t.Fatal(err)
	}
}

func TestFileURIEscapes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "odd ?#% name")
	s := openTest(t, dir, config{})
	mustCreate(t, s, Run{ID: "r"})
	if _, err := os.Stat(filepath.Join(dir, DBFile)); err != nil {
		t.Fatalf("database not at its path: %v", err)
	}
}

func testRunsLifecycle(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	in := Run{
		ID: "0198a1b2-0000-7000-8000-000000000001", Workflow: "flow.lua", ScriptHash: "abc",
		Args: json.RawMessage(`{"n":3}`), PID: 42, Spec: json.RawMessage(`{"backend":"mock"}`),
	}
	mustCreate(t, s, in)
	got, err := s.GetRun(ctx, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusRunning || got.Attempt != 1 || got.CreatedAt.IsZero() || !got.UpdatedAt.Equal(got.CreatedAt) ||
		got.Workflow != "flow.lua" || string(got.Args) != `{"n":3}` || string(got.Spec) != `{"backend":"mock"}` ||
		got.PID != 42 || got.HasReport || got.Report != nil || !got.FinishedAt.IsZero() {
		t.Fatalf("created run: %+v", got)
	}
	if err := s.CreateRun(ctx, in); !errors.Is(err, ErrRunExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	for _, bad := range []Run{{}, {ID: "x", Status: "bogus"}, {ID: "y", Args: json.RawMessage(`{`)}} {
		if err := s.CreateRun(ctx, bad); err == nil {
			t.Fatalf("CreateRun(%+v) succeeded", bad)
		}
	}

	finished := time.Date(2026, 8, 2, 0, 0, 0, 123, time.UTC)
	steps := []struct {
		name  string
		u     RunUpdate
		check func(Run) bool
	}{
		{"status and error", RunUpdate{Status: ptr(StatusFailed), Error: ptr("boom")},
			func(r Run) bool { return r.Status == StatusFailed && r.Error == "boom" && r.PID == 42 }},
		{"report", RunUpdate{Report: ptr(json.RawMessage(`"done"`))},
			func(r Run) bool { return r.HasReport && string(r.Report) == `"done"` && r.Status == StatusFailed }},
		{"null report is a report", RunUpdate{Report: ptr(json.RawMessage(`null`))},
			func(r Run) bool { return r.HasReport && string(r.Report) == `null` }},
		{"clear report", RunUpdate{HasReport: ptr(false)},
			func(r Run) bool { return !r.HasReport && r.Report == nil }},
		{"usage, cost, agents", RunUpdate{Usage: &Usage{Input: 10, Output: 20, Cached: 5}, Cost: ptr(0.25),
			Agents: &AgentCounts{OK: 3, Failed: 1, Cached: 2, Cancelled: 4}},
			func(r Run) bool {
				return r.Usage == Usage{10, 20, 5} && r.Cost == 0.25 && r.Agents == AgentCounts{3, 1, 2, 4}
			}},
		{"attempt, pid, spec, hash", RunUpdate{Attempt: ptr(2), PID: ptr(7), Spec: ptr(json.RawMessage(`{}`)), ScriptHash: ptr("def")},
			func(r Run) bool {
				return r.Attempt == 2 && r.PID == 7 && string(r.Spec) == `{}` && r.ScriptHash == "def"
			}},
		{"finished and resume after", RunUpdate{FinishedAt: &finished, ResumeAfter: &finished},
			func(r Run) bool { return r.FinishedAt.Equal(finished) && r.ResumeAfter.Equal(finished) }},
		{"clear times", RunUpdate{FinishedAt: &time.Time{}, ResumeAfter: &time.Time{}},
			func(r Run) bool { return r.FinishedAt.IsZero() && r.ResumeAfter.IsZero() }},
		{"nothing set still touches updated_at", RunUpdate{},
			func(r Run) bool { return r.Attempt == 2 && r.Usage.Input == 10 }},
	}
	prev := got.UpdatedAt
	for _, st := range steps {
		if err := s.UpdateRun(ctx, in.ID, st.u); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		r, err := s.GetRun(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !st.check(r) {
			t.Fatalf("%s: %+v", st.name, r)
		}
		if !r.UpdatedAt.After(prev) || !r.CreatedAt.Equal(got.CreatedAt) {
			t.Fatalf("%s: updated_at %v (before %v), created_at %v", st.name, r.UpdatedAt, prev, r.CreatedAt)
		}
		prev = r.UpdatedAt
	}
	if err := s.UpdateRun(ctx, "nope", RunUpdate{Status: ptr(StatusFailed)}); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("update of a missing run: %v", err)
	}
	if err := s.UpdateRun(ctx, in.ID, RunUpdate{Status: ptr("bogus")}); err == nil {
		t.Fatal("unknown status accepted")
	}
	if _, err := s.GetRun(ctx, "nope"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("get of a missing run: %v", err)
	}
}

func testResolveRun(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	ids := []string{
		"0198a1b2-aaaa-7000-8000-000000000001",
		"0198a1b2-aaab-7000-8000-000000000002",
		"0198a1b2-bbbb-7000-8000-000000000003",
		"0198a1b2-bbbb-7000-8000-000000000003x", // an id that is a prefix of another
	}
	for i := 0; i < 7; i++ {
		ids = append(ids, fmt.Sprintf("0198ffff-0000-7000-8000-00000000000%d", i))
	}
	for _, id := range ids {
		mustCreate(t, s, Run{ID: id})
	}
	tests := []struct {
		in         string
		want       string
		err        error
		candidates int
		more       bool
	}{
		{in: ids[0], want: ids[0]},
		{in: "0198a1b2-aaaa", want: ids[0]},
		{in: "0198A1B2-AAAB", want: ids[1]},
		{in: ids[2], want: ids[2]}, // exact beats the longer id it prefixes
		{in: "0198a1b2-aaa", err: ErrAmbiguousRun, candidates: 2},
		{in: "0198a1b2-bbbb-7000-8000-0000000000", err: ErrAmbiguousRun, candidates: 2},
		{in: "0198ffff", err: ErrAmbiguousRun, candidates: 5, more: true},
		{in: "0198a1b3", err: ErrRunNotFound},
		{in: "", err: ErrRunNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			r, err := s.ResolveRun(ctx, tc.in)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.err == nil && r.ID != tc.want {
				t.Fatalf("got %s, want %s", r.ID, tc.want)
			}
			var amb *AmbiguousRunError
			if errors.As(err, &amb) {
				if len(amb.Candidates) != tc.candidates || amb.More != tc.more {
					t.Fatalf("candidates %v more %v", amb.Candidates, amb.More)
				}
				for _, c := range amb.Candidates {
					if !strings.Contains(err.Error(), c) {
						t.Fatalf("error %q does not list %s", err, c)
					}
				}
			}
		})
	}
}

func testListAndLatestResumable(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	if _, err := s.LatestResumable(ctx); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("empty store: %v", err)
	}
	runs := []struct{ id, status string }{
		{"r1", StatusFailed}, {"r2", StatusCompleted}, {"r3", StatusSuspended}, {"r4", StatusCompleted},
		{"r5", StatusQueued},
	}
	for _, r := range runs { // the fake clock makes each newer than the last
		mustCreate(t, s, Run{ID: r.id, Status: r.status})
	}
	latest, err := s.LatestResumable(ctx)
	if err != nil || latest.ID != "r3" || !latest.Resumable() {
		t.Fatalf("latest resumable: %+v %v", latest, err)
	}
	tests := []struct {
		opts ListOptions
		want []string
	}{
		{ListOptions{}, []string{"r5", "r4", "r3", "r2", "r1"}},
		{ListOptions{Limit: 2}, []string{"r5", "r4"}},
		{ListOptions{Status: StatusCompleted}, []string{"r4", "r2"}},
		{ListOptions{Status: StatusCompleted, Limit: 1}, []string{"r4"}},
		{ListOptions{Status: StatusCancelled}, nil},
		{ListOptions{Before: "r4", Limit: 2}, []string{"r3", "r2"}},
		{ListOptions{Before: "r5", Status: StatusCompleted}, []string{"r4", "r2"}},
		{ListOptions{Before: "r1"}, nil},
		{ListOptions{Before: "no-such-run"}, nil},
	}
	for _, tc := range tests {
		got, err := s.ListRuns(ctx, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range got {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, tc.want) {
			t.Errorf("ListRuns(%+v) = %v, want %v", tc.opts, ids, tc.want)
		}
	}
	if err := s.UpdateRun(ctx, "r3", RunUpdate{Status: ptr(StatusCompleted)}); err != nil {
		t.Fatal(err)
	}
	if latest, _ := s.LatestResumable(ctx); latest.ID != "r1" {
		t.Fatalf("after r3 completed: %s", latest.ID)
	}
}

func testEventsAppendAndRead(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r1"})
	mustCreate(t, s, Run{ID: "r2"})
	if evs, err := s.Events(ctx, "r1", 0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("no events yet: %v %v", evs, err)
	}
	ts := time.Date(2026, 8, 1, 10, 0, 0, 5, time.FixedZone("CEST", 7200))
	in := []event.Event{
		{Type: event.RunStarted, TS: ts, Data: map[string]any{"workflow": "w.lua", "args": map[string]any{"n": 1}, "resumed": false}},
		event.New(event.Log, map[string]any{"level": "info", "msg": "hi", "seq": 99}), // an envelope key in the fields is dropped
		event.New(event.AgentDone, map[string]any{"call_key": "main/1", "tokens": 12, "cost": 0.5, "usage": map[string]int{"input": 10}}),
		event.New(event.Log, nil),
	}
	got, err := s.Append(ctx, "r1", in...)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) || ev.RunID != "r1" || ev.TS.IsZero() {
			t.Fatalf("stamped %d: %+v", i, ev)
		}
	}
	if !got[0].TS.Equal(ts) {
		t.Fatalf("a given TS must be kept: %v", got[0].TS)
	}
	if in[0].Seq != 0 {
		t.Fatal("Append must not modify its arguments")
	}
	if more, _ := s.Append(ctx, "r2", event.New(event.Log, nil)); more[0].Seq != 1 {
		t.Fatalf("seqs are per run: %+v", more)
	}
	if more, _ := s.Append(ctx, "r1", event.New(event.RunDone, map[string]any{"status": "completed"})); more[0].Seq != 5 {
		t.Fatalf("next seq: %+v", more)
	}

	all, err := s.Events(ctx, "r1", 0, 0)
	if err != nil || len(all) != 5 {
		t.Fatalf("all events: %d %v", len(all), err)
	}
	for i, ev := range got { // stored events keep their JSON form
		want, _ := json.Marshal(ev)
		have, _ := json.Marshal(all[i])
		if string(want) != string(have) {
			t.Errorf("event %d:\n stored %s\n wanted %s", i+1, have, want)
		}
	}
	if all[2].Data["tokens"] != float64(12) {
		t.Errorf("numbers come back as JSON decodes them: %#v", all[2].Data["tokens"])
	}

	seqs := func(evs []event.Event) []int64 {
		var out []int64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	tests := []struct {
		name  string
		since int64
		limit int
		types []string
		want  []int64
	}{
		{"since", 2, 0, nil, []int64{3, 4, 5}},
		{"limit", 1, 2, nil, []int64{2, 3}},
		{"past the end", 5, 0, nil, nil},
		{"negative since", -3, 1, nil, []int64{1}},
		{"one type", 0, 0, []string{event.Log}, []int64{2, 4}},
		{"two types", 0, 0, []string{event.RunStarted, event.RunDone}, []int64{1, 5}},
		{"type, since and limit", 2, 1, []string{event.Log, event.RunDone}, []int64{4}},
		{"unknown type", 0, 0, []string{"nope"}, nil},
	}
	for _, tc := range tests {
		evs, err := s.EventsOfType(ctx, "r1", tc.since, tc.limit, tc.types)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(seqs(evs), tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, seqs(evs), tc.want)
		}
	}

	if _, err := s.Events(ctx, "nope", 0, 0); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("events of an unknown run: %v", err)
	}
	if _, err := s.Append(ctx, "nope", event.New(event.Log, nil)); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("append to an unknown run: %v", err)
	}
	if _, err := s.Append(ctx, "r1", event.Event{}); err == nil {
		t.Fatal("an event without a type was accepted")
	}
	if _, err := s.Append(ctx, "r1", event.New(event.Log, map[string]any{"f": func() {}})); err == nil {
		t.Fatal("an unmarshalable field was accepted")
	}
	if evs, _ := s.Events(ctx, "r1", 0, 0); len(evs) != 5 {
		t.Fatalf("failed appends must store nothing: %d events", len(evs))
	}
}

func testAppendSeqUnderConcurrentAppenders(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	const goroutines, appends = 40, 25
	var mu sync.Mutex
	var seqs []int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range appends {
				n := 1 + (g+i)%3 // 1 to 3 events per call
				evs := make([]event.Event, n)
				for k := range evs {
					evs[k] = event.New(event.Log, map[string]any{"g": g, "i": i, "k": k})
				}
				out, err := s.Append(ctx, "r", evs...)
				if err != nil {
					t.Error(err)
					return
				}
				for k := 1; k < len(out); k++ {
					if out[k].Seq != out[k-1].Seq+1 {
						t.Errorf("one call's events are not consecutive: %d, %d", out[k-1].Seq, out[k].Seq)
					}
				}
				mu.Lock()
				for _, ev := range out {
					seqs = append(seqs, ev.Seq)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(seqs)
	for i, q := range seqs {
		if q != int64(i+1) {
			t.Fatalf("seq %d at position %d: gaps or duplicates", q, i)
		}
	}
	stored, err := s.Events(ctx, "r", 0, 0)
	if err != nil || len(stored) != len(seqs) {
		t.Fatalf("stored %d of %d: %v", len(stored), len(seqs), err)
	}
	if st := s.Stats(); st.Transactions >= st.Ops {
		t.Logf("no batching happened: %+v", st)
	}
}

func testPhasesProjection(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	phaseStarted := func(id int, label string, planned int, desc string) event.Event {
		d := map[string]any{"phase_id": id, "label": label, "planned": planned}
		if desc != "" {
			d["description"] = desc
		}
		return event.New(event.PhaseStarted, d)
	}
	phaseDone := func(id any, ok, failed int) event.Event {
		return event.New(event.PhaseDone, map[string]any{"phase_id": id, "ok": ok, "failed": failed})
	}
	steps := []struct {
		name string
		evs  []event.Event
		want []Phase
	}{
		{"started", []event.Event{phaseStarted(1, "scan", 10, "look around")},
			[]Phase{{ID: 1, Label: "scan", Planned: 10, Description: "look around", Status: PhaseRunning}}},
		{"done and next started in one append", []event.Event{phaseDone(1, 9, 1), phaseStarted(2, "fix", 0, "")},
			[]Phase{{ID: 1, Label: "scan", Planned: 10, Description: "look around", Status: PhaseDone, OK: 9, Failed: 1},
				{ID: 2, Label: "fix", Status: PhaseRunning}}},
		{"float ids from decoded JSON", []event.Event{phaseDone(float64(2), 3, 0)},
			[]Phase{{ID: 1, Label: "scan", Planned: 10, Description: "look around", Status: PhaseDone, OK: 9, Failed: 1},
				{ID: 2, Label: "fix", Status: PhaseDone, OK: 3}}},
		{"resume restarts a phase", []event.Event{phaseStarted(1, "scan", 12, "again")},
			[]Phase{{ID: 1, Label: "scan", Planned: 12, Description: "again", Status: PhaseRunning},
				{ID: 2, Label: "fix", Status: PhaseDone, OK: 3}}},
		{"done without start, and one without an id", []event.Event{phaseDone(7, 1, 1), phaseDone(nil, 1, 1)},
			[]Phase{{ID: 1, Label: "scan", Planned: 12, Description: "again", Status: PhaseRunning},
				{ID: 2, Label: "fix", Status: PhaseDone, OK: 3}, {ID: 7, Status: PhaseDone, OK: 1, Failed: 1}}},
	}
	for _, st := range steps {
		if _, err := s.Append(ctx, "r", st.evs...); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got, err := s.Phases(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i].RunID != "r" || (got[i].Status == PhaseDone) == got[i].DoneAt.IsZero() {
				t.Fatalf("%s: phase %d: %+v", st.name, i, got[i])
			}
			got[i].RunID, got[i].StartedAt, got[i].DoneAt = "", time.Time{}, time.Time{}
		}
		if !reflect.DeepEqual(got, st.want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", st.name, got, st.want)
		}
	}
	if evs, _ := s.Events(ctx, "r", 0, 0); len(evs) != 7 {
		t.Fatalf("every phase event is stored: %d", len(evs))
	}
}

func testCancelRequest(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	if c, err := s.CancelRequested(ctx, "r"); c || err != nil {
		t.Fatalf("fresh run: %v %v", c, err)
	}
	if err := s.RequestCancel(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.CancelRequested(ctx, "r"); !c || err != nil {
		t.Fatalf("after request: %v %v", c, err)
	}
	if err := s.UpdateRun(ctx, "r", RunUpdate{CancelRequested: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.CancelRequested(ctx, "r"); c {
		t.Fatal("cleared request still set")
	}
	if err := s.RequestCancel(ctx, "nope"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("cancel of a missing run: %v", err)
	}
	if _, err := s.CancelRequested(ctx, "nope"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("cancel requested of a missing run: %v", err)
	}
}

func testFiles(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	files := []struct{ path, content string }{
		{"main.lua", "function main() end"},
		{"lib/util.lua", ""},
	}
	for _, f := range files {
		sum, err := s.SaveFile(ctx, "r", f.path, []byte(f.content))
		if err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256([]byte(f.content))
		if sum != hex.EncodeToString(want[:]) {
			t.Fatalf("sha256 of %s: %s", f.path, sum)
		}
	}
	sum, err := s.SaveFile(ctx, "r", "main.lua", []byte("function main() return 1 end")) // replaces
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Files(ctx, "r")
	if err != nil || len(got) != 2 {
		t.Fatalf("files: %+v %v", got, err)
	}
	if got[0].Path != "lib/util.lua" || got[0].Content == nil || len(got[0].Content) != 0 ||
		got[1].Path != "main.lua" || string(got[1].Content) != "function main() return 1 end" || got[1].SHA256 != sum {
		t.Fatalf("files: %+v", got)
	}
	if _, err := s.SaveFile(ctx, "nope", "a.lua", nil); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("file of a missing run: %v", err)
	}
	if _, err := s.SaveFile(ctx, "r", "", nil); err == nil {
		t.Fatal("empty path accepted")
	}
}

func testJournal(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	mustCreate(t, s, Run{ID: "other"})
	sched := func(key, hash string) {
		t.Helper()
		if err := s.JournalScheduled(ctx, Entry{RunID: "r", CallKey: key, Kind: "agent", InputHash: hash, Attempts: 1, WherePos: "w.lua:3"}); err != nil {
			t.Fatal(err)
		}
	}
	finish := func(key, status string, want int64) {
		t.Helper()
		seq, err := s.JournalFinish(ctx, Entry{RunID: "r", CallKey: key, Kind: "agent", InputHash: "h-" + key, Status: status,
			Result: json.RawMessage(`{"text":"` + key + `"}`), Usage: Usage{1, 2, 3}, Cost: 0.01, Attempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		if seq != want {
			t.Fatalf("finish %s: completed_seq %d, want %d", key, seq, want)
		}
	}
	byKey := func() map[string]Entry {
		t.Helper()
		es, err := s.Journal(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(es, func(a, b Entry) int { return strings.Compare(a.CallKey, b.CallKey) }) {
			t.Fatal("journal not ordered by call key")
		}
		m := map[string]Entry{}
		for _, e := range es {
			m[e.CallKey] = e
		}
		return m
	}

	sched("main/1", "h-main/1")
	e := byKey()["main/1"]
	if e.Status != EntryScheduled || e.CompletedSeq != 0 || e.Result != nil || e.WherePos != "w.lua:3" || e.Attempts != 1 || e.CreatedAt.IsZero() {
		t.Fatalf("scheduled: %+v", e)
	}
	finish("main/1", EntryCompleted, 1)
	e = byKey()["main/1"]
	if e.Status != EntryCompleted || e.CompletedSeq != 1 || string(e.Result) != `{"text":"main/1"}` ||
		e.Usage != (Usage{1, 2, 3}) || e.Cost != 0.01 || e.Attempts != 2 || e.WherePos != "w.lua:3" {
		t.Fatalf("completed: %+v", e)
	}
	finish("main/2", EntryFailed, 2) // finishing without a scheduled row inserts it
	finish("main/3", EntryCompleted, 3)
	if _, err := s.JournalFinish(ctx, Entry{RunID: "other", CallKey: "main/1", Status: EntryCompleted}); err != nil {
		t.Fatal(err)
	}
	finish("main/4", EntryCompleted, 4) // completed_seq is per run
	sched("main/5", "h5")
	sched("main/6", "h6")

	// Rescheduling a finished entry keeps nothing stale.
	sched("main/3", "h3-new")
	e = byKey()["main/3"]
	if e.Status != EntryScheduled || e.CompletedSeq != 0 || e.Result != nil || e.Usage != (Usage{}) || e.Cost != 0 || e.InputHash != "h3-new" {
		t.Fatalf("rescheduled: %+v", e)
	}
	finish("main/3", EntryCompleted, 5) // max + 1, not its old place

	n, err := s.InvalidateFrom(ctx, "r", 4)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 { // main/4 (seq 4), main/3 (seq 5), main/5 and main/6 (scheduled)
		t.Fatalf("invalidated %d", n)
	}
	m := byKey()
	if len(m) != 2 || m["main/1"].CompletedSeq != 1 || m["main/2"].CompletedSeq != 2 || m["main/2"].Status != EntryFailed {
		t.Fatalf("after invalidation: %+v", m)
	}
	finish("main/9", EntryCompleted, 3)
	if other, _ := s.Journal(ctx, "other"); len(other) != 1 {
		t.Fatalf("another run's journal was touched: %+v", other)
	}

	bad := []Entry{
		{CallKey: "k", Status: EntryCompleted},
		{RunID: "r", Status: EntryCompleted},
		{RunID: "r", CallKey: "k", Status: EntryScheduled},
		{RunID: "r", CallKey: "k", Status: EntryCompleted, Result: json.RawMessage(`{`)},
	}
	for _, b := range bad {
		if _, err := s.JournalFinish(ctx, b); err == nil {
			t.Errorf("JournalFinish(%+v) succeeded", b)
		}
	}
	if _, err := s.JournalFinish(ctx, Entry{RunID: "nope", CallKey: "k", Status: EntryCompleted}); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("finish for a missing run: %v", err)
	}
	if err := s.JournalScheduled(ctx, Entry{RunID: "nope", CallKey: "k"}); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("schedule for a missing run: %v", err)
	}
}

func testCompletedSeqUnderConcurrentFinishes(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	const n = 500
	seqs := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("main/%d", i)
			if err := s.JournalScheduled(ctx, Entry{RunID: "r", CallKey: key}); err != nil {
				t.Error(err)
				return
			}
			seq, err := s.JournalFinish(ctx, Entry{RunID: "r", CallKey: key, Status: EntryCompleted, Result: json.RawMessage(`1`)})
			if err != nil {
				t.Error(err)
			}
			seqs[i] = seq
		})
	}
	wg.Wait()
	slices.Sort(seqs)
	for i, q := range seqs {
		if q != int64(i+1) {
			t.Fatalf("completed_seq %d at %d", q, i)
		}
	}
}

// A state dir written before migration 0005 (no per-run counters) keeps numbering each
// run's events and journal after what it holds.
func TestSeqCountersStartFromAnOlderDatabase(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", fileURI(filepath.Join(dir, DBFile)))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`}
	for _, m := range ms[:4] {
		stmts = append(stmts, m.sql, fmt.Sprintf(`INSERT INTO schema_migrations VALUES (%d, '%s', '2026-01-01T00:00:00.000000000Z')`, m.version, m.name))
	}
	const ts = `'2026-01-01T00:00:00.000000000Z'`
	stmts = append(stmts,
		`INSERT INTO runs (id, status, created_at, updated_at) VALUES ('r', 'failed', `+ts+`, `+ts+`), ('empty', 'failed', `+ts+`, `+ts+`)`,
		`INSERT INTO events (run_id, seq, ts, type) VALUES ('r', 1, `+ts+`, 'log'), ('r', 2, `+ts+`, 'log'), ('r', 7, `+ts+`, 'log')`,
		`INSERT INTO journal (run_id, call_key, status, completed_seq, created_at, updated_at) VALUES
			('r', 'main/1', 'completed', 1, `+ts+`, `+ts+`), ('r', 'main/2', 'completed', 4, `+ts+`, `+ts+`),
			('r', 'main/3', 'scheduled', NULL, `+ts+`, `+ts+`)`)
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s := openTest(t, dir, config{})
	ctx := t.Context()
	for run, want := range map[string][2]int64{"r": {8, 5}, "empty": {1, 1}} {
		evs, err := s.Append(ctx, run, event.New(event.Log, nil))
		if err != nil {
			t.Fatal(err)
		}
		seq, err := s.JournalFinish(ctx, Entry{RunID: run, CallKey: "main/9", Status: EntryCompleted})
		if err != nil {
			t.Fatal(err)
		}
		if evs[0].Seq != want[0] || seq != want[1] {
			t.Errorf("run %s: next event %d, next completed_seq %d; want %v", run, evs[0].Seq, seq, want)
		}
	}
}

// An older luft open on the state dir across the upgrade numbers by max()+1 and leaves the
// counters behind; the next number is still past what is stored.
func TestSeqCountersCatchUpWithAnOlderWriter(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, config{})
	mustCreate(t, s, Run{ID: "r"})
	if _, err := s.Append(t.Context(), "r", event.New(event.Log, nil)); err != nil {
		t.Fatal(err)
	}
	rawExec(t, dir, `INSERT INTO events (run_id, seq, ts, type) VALUES ('r', 2, '2026-01-01T00:00:00.000000000Z', 'log');
		INSERT INTO journal (run_id, call_key, status, completed_seq, created_at, updated_at) VALUES
			('r', 'old/1', 'completed', 1, '2026-01-01T00:00:00.000000000Z', '2026-01-01T00:00:00.000000000Z')`)
	evs, err := s.Append(t.Context(), "r", event.New(event.Log, nil))
	if err != nil {
		t.Fatal(err)
	}
	seq, err := s.JournalFinish(t.Context(), Entry{RunID: "r", CallKey: "new/1", Status: EntryCompleted})
	if err != nil || evs[0].Seq != 3 || seq != 2 {
		t.Fatalf("next event %d, next completed_seq %d (%v); want 3 and 2", evs[0].Seq, seq, err)
	}
}
