package storage

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
)

const (
	// maxBatch bounds the operations one transaction carries, so one commit never holds
	// the database lock for long.
	maxBatch = 256
	// queueSize bounds the operations waiting for the writer; senders block beyond it.
	queueSize = 4096
)

// op is one write. fn runs on the writer goroutine inside the batch's transaction; it must
// leave its results in variables it captured and may run more than once (after a retry),
// so it must assign them, not accumulate into them.
type op struct {
	ctx  context.Context
	fn   func(tx *wtx) error
	done chan error
}

// wtx is the batch's transaction as ops see it. Statements are prepared once on the writer
// connection and reused, which saves most of a small write's cost. A statement seen for the
// first time runs unprepared and is prepared after the transaction ends: the writer pool
// has one connection, which the open transaction holds.
type wtx struct {
	s  *sqlStore
	tx *sql.Tx
	// The runs' event and journal counters (event_seq, journal_seq) as this transaction
	// took them (takeSeq). The transaction holds the run's row lock (SQLite: the database's
	// write lock), so no other process changes them; an op rolled back to its savepoint
	// clears them.
	eventSeq, doneSeq map[string]int64
	// dirty are the counters taken from the cache, to write back (flush).
	dirty map[seqKey]bool
	// fenced are the runs whose attempt this transaction checked (checkFence), by run.
	fenced map[string]int
}

// forget drops the cached seqs (and counters not flushed: call it only after a rollback,
// or after flush).
func (w *wtx) forget() {
	clear(w.eventSeq)
	clear(w.doneSeq)
	clear(w.dirty)
	clear(w.fenced)
}

// maxStmts bounds the statement cache; statements beyond it (rare UPDATE shapes) stay
// unprepared.
const maxStmts = 64

func (w *wtx) stmt(q string) *sql.Stmt {
	if st, ok := w.s.stmts[q]; ok {
		return w.tx.Stmt(st)
	}
	if len(w.s.stmts)+len(w.s.toPrepare) < maxStmts && !slices.Contains(w.s.toPrepare, q) {
		w.s.toPrepare = append(w.s.toPrepare, q)
	}
	return nil
}

// prepare prepares the statements the last transaction met for the first time.
func (s *sqlStore) prepare() {
	for _, q := range s.toPrepare {
		if st, err := s.w.Prepare(q); err == nil {
			s.stmts[q] = st
		}
	}
	s.toPrepare = s.toPrepare[:0]
}

func (w *wtx) Exec(q string, args ...any) (sql.Result, error) {
	q = w.s.q(q)
	if st := w.stmt(q); st != nil {
		return st.Exec(args...)
	}
	return w.tx.Exec(q, args...)
}

func (w *wtx) QueryRow(q string, args ...any) *sql.Row {
	q = w.s.q(q)
	if st := w.stmt(q); st != nil {
		return st.QueryRow(args...)
	}
	return w.tx.QueryRow(q, args...)
}

// Query runs a query that returns rows; it is not prepared.
func (w *wtx) Query(q string, args ...any) (*sql.Rows, error) {
	return w.tx.Query(w.s.q(q), args...)
}

// write queues fn and waits until the transaction that ran it has committed. The result is
// fn's own error, or the commit's. ctx only stops the wait to be queued and an op that has
// not started yet: once a write runs, the call waits for its outcome, so a caller never
// walks away from a write that then commits.
func (s *sqlStore) write(ctx context.Context, fn func(tx *wtx) error) error {
	o, err := s.submit(ctx, fn)
	if err != nil {
		return err
	}
	return s.typed(<-o.done)
}

// submit queues fn and returns without waiting. Ops run in the order they were queued.
func (s *sqlStore) submit(ctx context.Context, fn func(tx *wtx) error) (*op, error) {
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	select {
	case s.queue <- o:
		return o, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// writeLoop is the only user of the writer connection. It takes whatever is queued (up to
// maxBatch), runs it in one transaction, commits, then releases every waiter. After Close
// it drains the queue and returns.
func (s *sqlStore) writeLoop() {
	defer close(s.done)
	defer func() {
		for _, st := range s.stmts {
			st.Close()
		}
	}()
	batch := make([]*op, 0, maxBatch)
	for {
		first, ok := <-s.queue
		if !ok {
			return
		}
		if s.hold != nil {
			s.hold()
		}
		batch = s.drain(append(batch[:0], first))
		w, err := s.begin()
		if err != nil {
			s.count(len(batch))
			release(batch, err)
			clear(batch)
			continue
		}
		// Waiting for the lock (another process writing) gave more ops time to queue: they
		// join this transaction.
		batch = s.drain(batch)
		live := batch[:0:0]
		for _, o := range batch {
			if err := o.ctx.Err(); err != nil {
				o.done <- err
				continue
			}
			live = append(live, o)
		}
		if len(live) == 0 {
			w.tx.Rollback()
		} else if !s.tryBatch(w, live) {
			s.isolated(live)
		}
		s.prepare()
		clear(batch)
	}
}

// drain adds the ops queued right now to batch, up to maxBatch.
func (s *sqlStore) drain(batch []*op) []*op {
	for len(batch) < maxBatch {
		select {
		case o, ok := <-s.queue:
			if !ok {
				return batch // closed and empty: writeLoop's receive returns next time
			}
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

func (s *sqlStore) count(n int) {
	s.txs.Add(1)
	s.ops.Add(int64(n))
	if int64(n) > s.maxBatch.Load() {
		s.maxBatch.Store(int64(n)) // only the writer goroutine stores
	}
}

// beginAttempts is how often begin waits out busy_timeout (5 s each) before giving up:
// another process may hold the write lock through a long checkpoint.
const beginAttempts = 3

func (s *sqlStore) begin() (*wtx, error) {
	var tx *sql.Tx
	var err error
	for range beginAttempts {
		// The batch serves many callers, so none of their contexts may cancel it.
		if tx, err = s.w.BeginTx(context.Background(), nil); !isBusy(err) {
			break
		}
	}
	if err != nil {
		return nil, s.classify("begin write", err)
	}
	return &wtx{s: s, tx: tx, eventSeq: map[string]int64{}, doneSeq: map[string]int64{}, dirty: map[seqKey]bool{}, fenced: map[string]int{}}, nil
}

func release(ops []*op, err error) {
	for _, o := range ops {
		o.done <- err
	}
}

// tryBatch runs ops one after another in w and commits. It returns false, having rolled
// back and released nobody, when an op of several failed: the batch must then be run again
// with isolated ops.
func (s *sqlStore) tryBatch(w *wtx, ops []*op) bool {
	s.count(len(ops))
	for _, o := range ops {
		if err := o.fn(w); err != nil {
			w.tx.Rollback()
			if len(ops) == 1 && !retryable(err) {
				o.done <- err
				return true
			}
			return false
		}
	}
	if err := w.flush(); err != nil {
		w.tx.Rollback()
		if retryable(err) {
			return false
		}
		release(ops, s.classify("write sequence counters", err))
		return true
	}
	if err := w.tx.Commit(); err != nil {
		w.tx.Rollback()
		release(ops, s.classify("commit", err))
	} else {
		s.ckpt.committed()
		release(ops, nil)
	}
	return true
}

// isolated runs ops in one transaction, each inside a savepoint, so a failing op is rolled
// back alone and the others commit. If an op's failure takes the whole transaction with it
// (SQLite rolls back on some I/O and memory errors), that op gets its error and the rest
// run again in a fresh transaction.
func (s *sqlStore) isolated(ops []*op) {
	for tries := 1; len(ops) > 0; tries++ {
		ops = s.isolatedOnce(ops, tries < retries)
	}
}

// retries bounds how often a batch runs again after losing its transaction to another
// process's (a PostgreSQL deadlock between two nodes' batches).
const retries = 5

// isolatedOnce returns the ops that must run again.
// With retry, an op that lost the whole transaction to another process's (retryable) makes
// every op run again.
func (s *sqlStore) isolatedOnce(ops []*op, retry bool) []*op {
	s.count(len(ops))
	w, err := s.begin()
	if err != nil {
		release(ops, err)
		return nil
	}
	fail := func(err error) []*op {
		w.tx.Rollback()
		release(ops, err)
		return nil
	}
	errs := make([]error, len(ops))
	for i, o := range ops {
		if _, err := w.Exec("SAVEPOINT op"); err != nil {
			return fail(s.classify("savepoint", err))
		}
		if errs[i] = o.fn(w); errs[i] == nil {
			errs[i] = w.flush()
		}
		if errs[i] != nil {
			w.forget()
			if retry && retryable(errs[i]) {
				w.tx.Rollback()
				return ops
			}
			if _, err := w.Exec("ROLLBACK TO op"); err != nil {
				w.tx.Rollback()
				o.done <- errs[i]
				return append(ops[:i:i], ops[i+1:]...)
			}
		}
		if _, err := w.Exec("RELEASE op"); err != nil {
			if errs[i] != nil {
				w.tx.Rollback()
				o.done <- errs[i]
				return append(ops[:i:i], ops[i+1:]...)
			}
			return fail(s.classify("release savepoint", err))
		}
	}
	if err := w.tx.Commit(); err != nil {
		return fail(s.classify("commit", err))
	}
	s.ckpt.committed()
	for i, o := range ops {
		o.done <- errs[i]
	}
	return nil
}

// errf names a write operation and its subject (nil stays nil).
func errf(what, subject string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("storage: %s %s: %w", what, subject, err)
}
