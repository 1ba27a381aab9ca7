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

	"github.com/luft-run/luft/event"
)

// hammer writes n events and n journal entries (keys prefixed with who) to run from
// workers goroutines, and returns the stamped seqs and completed_seqs.
func hammer(ctx context.Context, s *SQLite, run, who string, workers, n int) (seqs, done []int64, err error) {
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
func checkComplete(t *testing.T, s *SQLite, run string, n int) {
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
func readWhile(s *SQLite, run string, stop <-chan struct{}) error {
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

func TestTwoStoresOnOneDir(t *testing.T) {
	dir := t.TempDir()
	a := openTest(t, dir, config{})
	b := openTest(t, dir, config{})
	mustCreate(t, a, Run{ID: "r"})
	const per = 150
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readErrs := make([]error, 2)
	for i, s := range []*SQLite{a, b} {
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

// TestHelperProcess is the child of TestTwoProcesses: it opens the state dir named in
// LUFT_STORAGE_HELPER ("dir|run|n"), says "ready", then writes.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("the child process of TestTwoProcesses")
	}
	parts := strings.Split(spec, "|")
	n, _ := strconv.Atoi(parts[2])
	s, err := Open(context.Background(), parts[0])
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fmt.Println("ready")
	if _, _, err := hammer(context.Background(), s, parts[1], "child", 4, n); err != nil {
		t.Fatal(err)
	}
}

func TestTwoProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	s := openTest(t, dir, config{})
	mustCreate(t, s, Run{ID: "r"})
	const per = 150

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|r|%d", helperEnv, dir, per))
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

func TestConcurrentOpenOfAFreshDir(t *testing.T) {
	dir := t.TempDir()
	const n = 4
	stores := make([]*SQLite, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), dir) })
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
	if ms, _ := migrations(); rows != len(ms) {
		t.Fatalf("%d migration rows, want %d", rows, len(ms))
	}
}
