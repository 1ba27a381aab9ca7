package storage

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/luft-run/luft/internal/pgtest"
)

// noticeWait bounds how long a test waits for a notice or the listener's state.
const noticeWait = 10 * time.Second

func nextNotice(t *testing.T, ch <-chan Notice, skipResync bool) Notice {
	t.Helper()
	deadline := time.After(noticeWait)
	for {
		select {
		case n := <-ch:
			if skipResync && n.Kind == NoticeResync {
				continue
			}
			return n
		case <-deadline:
			t.Fatalf("no notice within %s", noticeWait)
			return Notice{}
		}
	}
}

// A cancel requested and an approval answered through one store reach the listener of
// another store on the same database once they commit; a write that fails sends nothing;
// a listener whose backend is terminated reconnects, says so with a NoticeResync, and
// delivers again.
func TestPostgresNotices(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	owner, err := OpenPostgres(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	other, err := OpenPostgres(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if owner.Listening() {
		t.Fatal("Listening before anyone subscribed")
	}
	ch := make(chan Notice, 16)
	stop := owner.Notices(func(n Notice) { ch <- n })
	defer stop()
	if n := nextNotice(t, ch, false); n.Kind != NoticeResync || !owner.Listening() {
		t.Fatalf("first notice %+v (listening %v), want a resync while listening", n, owner.Listening())
	}

	mustCreate(t, other, Run{ID: "r1"})
	if err := other.RequestCancel(ctx, "missing"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("cancel of a missing run: %v", err)
	}
	if err := other.RequestCancel(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	// The failed write's notice was never sent: the first one is r1's.
	if n := nextNotice(t, ch, false); n != (Notice{Kind: NoticeCancel, RunID: "r1"}) {
		t.Fatalf("got %+v, want the cancel of r1", n)
	}
	if err := other.JournalScheduled(ctx, Entry{RunID: "r1", CallKey: "main/1", Kind: "agent", InputHash: "h"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.AskApproval(ctx, Approval{RunID: "r1", ID: "ap1", CallKey: "main/1", Conversation: "c", Turn: 1,
		ToolCallID: "t1", Tool: "write_file"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.DecideApproval(ctx, "r1", "ap1", false); err != nil {
		t.Fatal(err)
	}
	if n := nextNotice(t, ch, false); n != (Notice{Kind: NoticeApproval, RunID: "r1", ApprovalID: "ap1"}) {
		t.Fatalf("got %+v, want the answer of ap1", n)
	}
	if _, err := other.DecideApproval(ctx, "r1", "ap1", true); !errors.Is(err, ErrApprovalDecided) {
		t.Fatalf("second answer: %v", err)
	}

	// Kill the listening backend: the listener comes back by itself.
	db := sql.OpenDB(stdlib.GetConnector(*mustParse(t, url)))
	defer db.Close()
	var killed int
	if err := db.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, listenerName).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the listener's backend: %d terminated, %v", killed, err)
	}
	if n := nextNotice(t, ch, false); n.Kind != NoticeResync {
		t.Fatalf("after the listener's backend was terminated: %+v, want a resync", n)
	}
	if err := other.RequestCancel(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if n := nextNotice(t, ch, true); n != (Notice{Kind: NoticeCancel, RunID: "r1"}) {
		t.Fatalf("after the reconnect: %+v, want the cancel of r1", n)
	}

	// After stop, nothing more is delivered to that subscriber; Close ends the listener.
	stop()
	if err := other.RequestCancel(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-ch:
		t.Fatalf("a notice after stop: %+v", n)
	default:
	}
	if owner.Listening() {
		t.Fatal("still listening after Close")
	}
}

func TestParseNoticeIgnoresStrangers(t *testing.T) {
	for _, p := range []string{"", "cancel", "cancel a b", "approval r", "approval r a b", "resync r", "x r1", "\x00 \xff"} {
		if n, ok := parseNotice(p); ok {
			t.Errorf("parseNotice(%q) = %+v, want ignored", p, n)
		}
	}
	for _, n := range []Notice{{Kind: NoticeCancel, RunID: "r1"}, {Kind: NoticeApproval, RunID: "r1", ApprovalID: "ap-1"}} {
		if got, ok := parseNotice(formatNotice(n)); !ok || got != n {
			t.Errorf("round trip of %+v: %+v %v", n, got, ok)
		}
	}
}

func mustParse(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}
