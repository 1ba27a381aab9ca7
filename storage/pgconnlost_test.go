package storage

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/luft-run/luft/internal/pgtest"
)

// A writer session the server ends in the middle of a transaction (an administrator's
// pg_terminate_backend; a process stopped past idle_in_transaction_session_timeout)
// committed nothing: the batch runs again on a new session, and its write succeeds
// instead of failing with the lost connection.
func TestPostgresWriterSessionEndedMidTransaction(t *testing.T) {
	url := pgtest.URL(t)
	p, err := OpenPostgres(t.Context(), url, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	admin, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	for _, tc := range []struct {
		name string
		end  func(pid int) error // ends the writer's session pid, inside its transaction
	}{
		{"terminated", func(pid int) error {
			if _, err := admin.Exec(`SELECT pg_terminate_backend($1)`, pid); err != nil {
				return err
			}
			return waitGone(admin, pid)
		}},
		{"idle past the timeout", func(pid int) error {
			// What a stopped process meets: idle in its transaction past the store's
			// 2 s idle_in_transaction_session_timeout, the server ends the session;
			// waitGone polls until it has (within 10 s).
			return waitGone(admin, pid)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pids []int
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			err := p.write(ctx, func(w *wtx) error {
				var pid int
				if err := w.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					return err
				}
				pids = append(pids, pid)
				if len(pids) > 1 {
					return nil // the batch again, on a new session
				}
				if err := tc.end(pid); err != nil {
					return err
				}
				_, err := w.Exec(`SELECT 1`)
				return err
			})
			if err != nil {
				t.Fatalf("a write whose session the server ended mid-transaction failed: %v", err)
			}
			if len(pids) != 2 || pids[0] == pids[1] {
				t.Fatalf("sessions of the batch's runs: %v, want the batch run again on a new one", pids)
			}
			now := time.Now().UTC()
			id := "run-" + now.Format("150405.000000000")
			mustCreate(t, p, Run{ID: id, Status: StatusRunning, Workflow: "wf.lua", CreatedAt: now, UpdatedAt: now})
			if _, err := p.GetRun(t.Context(), id); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitGone waits until server process pid has ended.
func waitGone(db *sql.DB, pid int) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
	return fmt.Errorf("server process %d did not end within 10 s", pid)
}
