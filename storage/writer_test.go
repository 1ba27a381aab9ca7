package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/luft-run/luft/event"
)

// gate holds the writer goroutine once it has taken the first op of a batch, so a test can
// fill the queue and know exactly what the next batches carry. It does nothing until armed,
// so the test's setup writes pass.
type gate struct {
	armed   atomic.Bool
	holding chan struct{}
	release chan struct{}
}

func newGate() *gate {
	return &gate{holding: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gate) hold() {
	if !g.armed.Load() {
		return
	}
	select {
	case g.holding <- struct{}{}:
	default:
	}
	<-g.release
}

// waitQueued waits until n ops wait in the writer's queue.
func waitQueued(t *testing.T, s *sqlStore, n int) {
	t.Helper()
	for len(s.queue) < n {
		if t.Context().Err() != nil {
			t.Fatalf("%d ops queued, want %d", len(s.queue), n)
		}
		runtime.Gosched()
	}
}

func finishEntry(run, key string) Entry {
	return Entry{RunID: run, CallKey: key, Kind: "agent", Status: EntryCompleted, Result: json.RawMessage(`{"text":"ok"}`)}
}

func testGroupCommitBatchesQueuedWrites(t *testing.T, k kind) {
	ctx := t.Context()
	g := newGate()
	s := k.open(t, k.place(t), config{hold: g.hold})
	mustCreate(t, s, Run{ID: "r"})
	before := s.Stats()
	g.armed.Store(true)

	const n = 1000
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = s.JournalFinish(ctx, finishEntry("r", "main/0")) })
	<-g.holding // the writer holds op 0; everything else queues behind it
	for i := 1; i < n; i++ {
		wg.Go(func() {
			if i%2 == 0 {
				_, errs[i] = s.JournalFinish(ctx, finishEntry("r", fmt.Sprintf("main/%d", i)))
			} else {
				_, errs[i] = s.Append(ctx, "r", event.New(event.Log, map[string]any{"i": i}))
			}
		})
	}
	waitQueued(t, s, n-1)
	close(g.release)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	txs, ops := st.Transactions-before.Transactions, st.Ops-before.Ops
	// 1000 ops in batches of at most 256: 4 transactions.
	if ops != n || txs != (n+maxBatch-1)/maxBatch || st.MaxBatch != maxBatch {
		t.Fatalf("%d writes took %d transactions (max batch %d); want %d", ops, txs, st.MaxBatch, (n+maxBatch-1)/maxBatch)
	}
	j, _ := s.Journal(ctx, "r")
	evs, _ := s.Events(ctx, "r", 0, 0)
	if len(j) != n/2 || len(evs) != n/2 {
		t.Fatalf("committed %d entries and %d events", len(j), len(evs))
	}
}

func testGroupCommitBatchesConcurrentWrites(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	before := s.Stats()
	const n = 1000
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := s.JournalFinish(ctx, finishEntry("r", fmt.Sprintf("main/%d", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	txs := st.Transactions - before.Transactions
	t.Logf("%d concurrent writes: %d transactions, largest batch %d", n, txs, st.MaxBatch)
	// Without a gate the batching depends on scheduling, but the writer commits whatever
	// queued meanwhile, so 1000 writers never need anywhere near 1000 commits.
	if txs > n/4 {
		t.Fatalf("%d concurrent writes took %d transactions", n, txs)
	}
}

func testFailingOpDoesNotFailItsBatch(t *testing.T, k kind) {
	ctx := t.Context()
	g := newGate()
	s := k.open(t, k.place(t), config{hold: g.hold})
	mustCreate(t, s, Run{ID: "r"})
	g.armed.Store(true)

	type call struct {
		name string
		fn   func() error
		bad  bool
	}
	var calls []call
	for i := range 12 {
		key := fmt.Sprintf("main/%d", i)
		calls = append(calls, call{name: key, fn: func() error { _, err := s.JournalFinish(ctx, finishEntry("r", key)); return err }})
		switch i {
		case 3:
			calls = append(calls, call{name: "append to a missing run", bad: true, fn: func() error {
				_, err := s.Append(ctx, "missing", event.New(event.Log, nil))
				return err
			}})
		case 7:
			calls = append(calls, call{name: "finish for a missing run", bad: true, fn: func() error {
				_, err := s.JournalFinish(ctx, finishEntry("missing", "main/1"))
				return err
			}})
		}
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = calls[0].fn() })
	<-g.holding
	for i := 1; i < len(calls); i++ {
		wg.Go(func() { errs[i] = calls[i].fn() })
	}
	waitQueued(t, s, len(calls)-1)
	before := s.Stats()
	close(g.release)
	wg.Wait()
	for i, c := range calls {
		if c.bad != (errs[i] != nil) {
			t.Errorf("%s: err = %v", c.name, errs[i])
		}
		if c.bad && !errors.Is(errs[i], ErrRunNotFound) {
			t.Errorf("%s: err = %v, want ErrRunNotFound", c.name, errs[i])
		}
	}
	j, _ := s.Journal(ctx, "r")
	var seqs []int64
	for _, e := range j {
		seqs = append(seqs, e.CompletedSeq)
	}
	slices.Sort(seqs)
	if len(j) != 12 || seqs[0] != 1 || seqs[11] != 12 {
		t.Fatalf("the good writes of the batch: %d entries, seqs %v", len(j), seqs)
	}
	// The batch ran optimistically, hit the bad op and ran again with savepoints.
	if st := s.Stats(); st.Transactions-before.Transactions != 2 {
		t.Fatalf("transactions %d, want 2 (try, then isolated)", st.Transactions-before.Transactions)
	}
}

func testCancelledWriteIsNotApplied(t *testing.T, k kind) {
	g := newGate()
	s := k.open(t, k.place(t), config{hold: g.hold})
	mustCreate(t, s, Run{ID: "r"})
	g.armed.Store(true)
	var wg sync.WaitGroup
	var errA, errB error
	wg.Go(func() { _, errA = s.JournalFinish(context.Background(), finishEntry("r", "a")) })
	<-g.holding
	ctx, cancel := context.WithCancel(context.Background())
	wg.Go(func() { _, errB = s.JournalFinish(ctx, finishEntry("r", "b")) })
	waitQueued(t, s, 1)
	cancel()
	close(g.release)
	wg.Wait()
	if errA != nil || !errors.Is(errB, context.Canceled) {
		t.Fatalf("a: %v, b: %v", errA, errB)
	}
	j, _ := s.Journal(t.Context(), "r")
	if len(j) != 1 || j[0].CallKey != "a" {
		t.Fatalf("journal: %+v", j)
	}
}

func testCloseCommitsQueuedWritesThenRefuses(t *testing.T, k kind) {
	dir := k.place(t)
	g := newGate()
	s, err := k.openErr(t.Context(), dir, config{hold: g.hold, now: newClock().now})
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, Run{ID: "r"})
	g.armed.Store(true)
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = s.Append(context.Background(), "r", event.New(event.Log, nil)) })
	<-g.holding
	for i := 1; i < n; i++ {
		wg.Go(func() { _, errs[i] = s.Append(context.Background(), "r", event.New(event.Log, nil)) })
	}
	waitQueued(t, s, n-1)
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	close(g.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("queued writes must commit before Close returns: %v", err)
	}

	ctx := t.Context()
	checks := map[string]error{}
	_, checks["Append"] = s.Append(ctx, "r", event.New(event.Log, nil))
	checks["CreateRun"] = s.CreateRun(ctx, Run{ID: "x"})
	_, checks["JournalFinish"] = s.JournalFinish(ctx, finishEntry("r", "k"))
	_, checks["Events"] = s.Events(ctx, "r", 0, 0)
	_, checks["GetRun"] = s.GetRun(ctx, "r")
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s2 := k.open(t, dir, config{})
	if evs, _ := s2.Events(ctx, "r", 0, 0); len(evs) != n {
		t.Fatalf("after reopen: %d events, want %d", len(evs), n)
	}
}

func testAppendAsyncKeepsCallOrderAndBatches(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "r"})
	before := s.Stats()
	const n = 400
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			// An event bus: order is decided under the lock, the commit is awaited outside it.
			mu.Lock()
			k := next
			next++
			wait := s.AppendAsync(ctx, "r", event.New(event.Log, map[string]any{"k": k}))
			mu.Unlock()
			evs, err := wait()
			if err != nil {
				t.Error(err)
				return
			}
			if again, _ := wait(); again[0].Seq != evs[0].Seq {
				t.Error("wait is not repeatable")
			}
			if evs[0].Seq != int64(k+1) {
				t.Errorf("event %d got seq %d", k, evs[0].Seq)
			}
		})
	}
	wg.Wait()
	txs := s.Stats().Transactions - before.Transactions
	t.Logf("%d ordered appends: %d transactions", n, txs)
	if txs >= n {
		t.Fatalf("%d ordered appends took %d transactions", n, txs)
	}
	if _, err := s.AppendAsync(ctx, "r", event.Event{})(); err == nil {
		t.Fatal("an event without a type was accepted")
	}
}
