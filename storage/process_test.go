package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

// hammer writes n events and n journal entries (keys prefixed with who) to run from
// workers goroutines, and returns the stamped seqs and completed_seqs.
func hammer(ctx context.Context, s Store, run, who string, workers, n int) (seqs, done []int64, err error) {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				evs, err1 := s.Append(ctx, run, event.New(event.Log, map[string]any{"who": who, "i": i}))
				seq, err2 := s.JournalFinish(ctx, finishEntry(run, fmt.Sprintf("%s/%d", who, i)))
				mu.Lock()
				if err := errors.Join(err1, err2); err != nil {
					errs = append(errs, err)
				} else {
					seqs = append(seqs, evs[0].Seq)
					done = append(done, seq)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return seqs, done, errors.Join(errs...)
}

// checkComplete says whether the run's events and journal are numbered 1..n without gaps
// or duplicates.
func checkComplete(t *testing.T, s Store, run string, n int) {
	t.Helper()
	ctx := t.Context()
	evs, err := s.Events(ctx, run, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	j, err := s.Journal(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	var done []int64
	for _, e := range j {
		done = append(done, e.CompletedSeq)
	}
	slices.Sort(done)
	for i, d := range done {
		if d != int64(i+1) {
			t.Fatalf("completed_seq %d at %d", d, i)
		}
	}
	if len(evs) != n || len(j) != n {
		t.Fatalf("%d events and %d journal entries, want %d", len(evs), len(j), n)
	}
}

// readWhile reads the run's events and list from s until stop is closed.
func readWhile(s Store, run string, stop <-chan struct{}) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := s.Events(context.Background(), run, 0, 0); err != nil {
			return err
		}
		if _, err := s.ListRuns(context.Background(), ListOptions{Limit: 5}); err != nil {
			return err
		}
		if _, err := s.Journal(context.Background(), run); err != nil {
			return err
		}
	}
}

func testTwoStoresOnOnePlace(t *testing.T, k kind) {
	dir := k.place(t)
	a := k.open(t, dir, config{})
	b := k.open(t, dir, config{})
	mustCreate(t, a, Run{ID: "r"})
	const per = 150
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readErrs := make([]error, 2)
	for i, s := range []*sqlStore{a, b} {
		readers.Go(func() { readErrs[i] = readWhile(s, "r", stop) })
	}
	var wg sync.WaitGroup
	var errA, errB error
	wg.Go(func() { _, _, errA = hammer(t.Context(), a, "r", "a", 8, per) })
	wg.Go(func() { _, _, errB = hammer(t.Context(), b, "r", "b", 8, per) })
	wg.Wait()
	close(stop)
	readers.Wait()
	if err := errors.Join(errA, errB, readErrs[0], readErrs[1]); err != nil {
		t.Fatal(err)
	}
	checkComplete(t, a, "r", 2*per)
	t.Logf("a: %+v, b: %+v", a.Stats(), b.Stats())
}

const helperEnv = "LUFT_STORAGE_HELPER"

// TestHelperProcess is the child of TwoProcesses and ProcessesMigrateAFreshPlaceOnce: it
// opens the store named in LUFT_STORAGE_HELPER ("kind|place|run|n"), says "ready", then
// writes n events and entries to run (none when run is "").
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("the child process of TestStore/*/TwoProcesses")
	}
	parts := strings.Split(spec, "|")
	n, _ := strconv.Atoi(parts[3])
	s, err := kindNamed(parts[0]).openErr(context.Background(), parts[1], config{now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fmt.Println("ready")
	if parts[2] == "" {
		return
	}
	if _, _, err := hammer(context.Background(), s, parts[2], "child", 4, n); err != nil {
		t.Fatal(err)
	}
}

// helper returns the command of a child process that opens place (see TestHelperProcess).
func helper(t *testing.T, k kind, place, run string, n int) *exec.Cmd {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s|%d", helperEnv, k.name, place, run, n))
	return cmd
}

func testTwoProcesses(t *testing.T, k kind) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the child")
	}
	dir := k.place(t)
	s := k.open(t, dir, config{})
	mustCreate(t, s, Run{ID: "r"})
	const per = 150

	cmd := helper(t, k, dir, "r", per)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	var output strings.Builder
	var scanned sync.WaitGroup
	scanned.Go(func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			output.WriteString(sc.Text() + "\n")
			if sc.Text() == "ready" && !signalled {
				signalled = true
				close(ready)
			}
		}
		if !signalled {
			close(ready)
		}
	})
	<-ready // the child has its connections open; now both write at once

	stop := make(chan struct{})
	var readErr error
	var readers sync.WaitGroup
	readers.Go(func() { readErr = readWhile(s, "r", stop) })
	_, _, err = hammer(t.Context(), s, "r", "parent", 4, per)
	scanned.Wait()
	waitErr := cmd.Wait()
	close(stop)
	readers.Wait()
	if err := errors.Join(err, readErr); err != nil {
		t.Fatal(err)
	}
	if waitErr != nil {
		t.Fatalf("child: %v\n%s%s", waitErr, output.String(), stderr.String())
	}
	checkComplete(t, s, "r", 2*per)
	j, _ := s.Journal(t.Context(), "r")
	var child int
	for _, e := range j {
		if strings.HasPrefix(e.CallKey, "child/") {
			child++
		}
	}
	if child != per {
		t.Fatalf("the child wrote %d entries, want %d", child, per)
	}
}

func testConcurrentOpenOfAFreshPlace(t *testing.T, k kind) {
	dir := k.place(t)
	const n = 4
	stores := make([]*sqlStore, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = k.openErr(t.Context(), dir, config{now: time.Now}) })
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			defer s.Close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := stores[0].r.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if ms := k.migrations(t); rows != len(ms) {
		t.Fatalf("%d migration rows, want %d", rows, len(ms))
	}
}

// migrations are the kind's embedded migrations.
func (k kind) migrations(t *testing.T) []migration {
	ms, err := migrations()
	if k.name == "postgres" {
		ms, err = readMigrations(pgMigrationFS, "migrations_pg", true)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// Several processes opening one fresh place at once apply its migrations once: luft
// daemons on several nodes start together against a new database.
func testProcessesMigrateAFreshPlaceOnce(t *testing.T, k kind) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the child")
	}
	place := k.place(t)
	const n = 3
	cmds := make([]*exec.Cmd, n)
	outs := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		cmds[i] = helper(t, k, place, "", 0)
		wg.Go(func() { outs[i], errs[i] = cmds[i].CombinedOutput() })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	s := k.open(t, place, config{})
	var rows int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if ms := k.migrations(t); rows != len(ms) {
		t.Fatalf("%d migration rows, want %d", rows, len(ms))
	}
}
