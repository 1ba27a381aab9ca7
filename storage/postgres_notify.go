package storage

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// noticeChannel is the PostgreSQL channel the store NOTIFYs on and listens to.
const noticeChannel = "luft_runs"

// listenerName is the application_name of the listening connection (unless the URL sets
// one), as pg_stat_activity shows it.
const listenerName = "luft notices"

// NoticeKind says what a Notice tells.
type NoticeKind string

// The notices a Postgres store delivers.
const (
	// NoticeCancel: a cancel of the run was requested (RequestCancel committed).
	NoticeCancel NoticeKind = "cancel"
	// NoticeApproval: an approval of the run was answered (DecideApproval committed).
	NoticeApproval NoticeKind = "approval"
	// NoticeResync: the listener (re)connected. Notices sent while it was down are lost:
	// whoever acts on them looks at the store again.
	NoticeResync NoticeKind = "resync"
)

// Notice is what another process (or this one) told the listeners of the database about
// a run, once the write it is about had committed.
type Notice struct {
	Kind       NoticeKind
	RunID      string
	ApprovalID string // NoticeApproval only
}

// Listener timing: a dead connection is seen at the latest by the ping after pingEvery
// without a notice; a failed connect is tried again after a backoff doubling from
// backoffMin to backoffMax.
const (
	pingEvery  = 10 * time.Second
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// notices is the one LISTEN connection of a Postgres store and its subscribers.
type notices struct {
	cc   *pgx.ConnConfig
	once sync.Once
	stop context.CancelFunc
	done chan struct{}
	up   atomic.Bool

	mu   sync.Mutex
	next int
	subs map[int]func(Notice)
}

// Notices calls fn with every notice the database delivers from now on, on the store's
// one listening connection (its own, not the writer's nor the read pool's), until stop.
// The connection is opened with the first subscriber and reconnects with a backoff when it
// drops; each time it is (back) up, fn gets a NoticeResync. fn runs on the listener's
// goroutine: it must not block. Notices are hints, never the record: the rows are.
func (p *Postgres) Notices(fn func(Notice)) (stop func()) {
	n := p.notices
	n.mu.Lock()
	id := n.next
	n.next++
	n.subs[id] = fn
	n.mu.Unlock()
	n.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		n.stop = cancel
		go n.listen(ctx)
	})
	return func() {
		n.mu.Lock()
		delete(n.subs, id)
		n.mu.Unlock()
	}
}

// Listening reports whether the listening connection is up now: while it is not, notices
// are missed, and a subscriber relies on polling.
func (p *Postgres) Listening() bool { return p.notices.up.Load() }

// close stops the listener and waits for it.
func (n *notices) close() {
	n.once.Do(func() {}) // a listener never started is never started now
	if n.stop != nil {
		n.stop()
		<-n.done
	}
}

func (n *notices) deliver(no Notice) {
	n.mu.Lock()
	subs := make([]func(Notice), 0, len(n.subs))
	for _, fn := range n.subs {
		subs = append(subs, fn)
	}
	n.mu.Unlock()
	for _, fn := range subs {
		fn(no)
	}
}

// listen keeps one connection LISTENing until ctx ends.
func (n *notices) listen(ctx context.Context) {
	defer close(n.done)
	wait := backoffMin
	for ctx.Err() == nil {
		if n.session(ctx) {
			wait = backoffMin
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, backoffMax)
	}
}

// session connects, LISTENs and delivers notices until the connection fails or ctx ends;
// it reports whether it got as far as listening.
func (n *notices) session(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, backoffMax)
	conn, err := pgx.ConnectConfig(cctx, n.cc)
	cancel()
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+noticeChannel); err != nil {
		return false
	}
	n.up.Store(true)
	defer n.up.Store(false)
	n.deliver(Notice{Kind: NoticeResync})
	for {
		wctx, cancel := context.WithTimeout(ctx, pingEvery)
		msg, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return true
		case err == nil:
			if no, ok := parseNotice(msg.Payload); ok {
				n.deliver(no)
			}
			continue
		case !pgconn.Timeout(err):
			return true // the connection failed (a terminated backend, a restart): reconnect
		}
		// Quiet for pingEvery: make sure the connection still answers (a partition sends
		// no error until TCP gives up).
		pctx, cancel := context.WithTimeout(ctx, backoffMax)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return true
		}
	}
}

// notify queues a notice in tx: PostgreSQL sends it when tx commits, and never if it
// rolls back (also when only this op's savepoint is rolled back).
func (w *wtx) notify(no Notice) error {
	if !w.s.pg {
		return nil
	}
	_, err := w.Exec(`SELECT pg_notify(?, ?)`, noticeChannel, formatNotice(no))
	return err
}

func formatNotice(no Notice) string {
	s := string(no.Kind) + " " + no.RunID
	if no.ApprovalID != "" {
		s += " " + no.ApprovalID
	}
	return s
}

// parseNotice reads a payload formatNotice wrote; anything else is ignored.
func parseNotice(payload string) (Notice, bool) {
	f := strings.Fields(payload)
	switch {
	case len(f) == 2 && f[0] == string(NoticeCancel):
		return Notice{Kind: NoticeCancel, RunID: f[1]}, true
	case len(f) == 3 && f[0] == string(NoticeApproval):
		return Notice{Kind: NoticeApproval, RunID: f[1], ApprovalID: f[2]}, true
	}
	return Notice{}, false
}
