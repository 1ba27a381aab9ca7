package storage

import (
	"database/sql"
	"time"
)

// The writer's connection does not checkpoint (wal_autocheckpoint(0)): SQLite would do
// it inside the commit that takes the WAL past 1,000 pages, copying them into luft.db
// and syncing both files while every waiter of that batch waits, so one commit in a
// few hundred took tens of milliseconds. A goroutine of the store's own does it instead,
// on a connection of its own, while the writer goes on: a PASSIVE checkpoint waits for
// no reader or writer and blocks none. Durability is unchanged: a write is durable once
// it is in the WAL, checkpointed or not.

// checkpointEvery is the least time between two checkpoints while writes go on, so a
// busy store syncs its files a few times a second rather than after every commit.
const checkpointEvery = 200 * time.Millisecond

// checkpointer is the store's checkpoint goroutine: its connection, and how the writer
// tells it that commits happened.
type checkpointer struct {
	db   *sql.DB
	wake chan struct{} // a commit happened; capacity 1
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the goroutine has returned
}

func newCheckpointer(db *sql.DB) *checkpointer {
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	c := &checkpointer{db: db, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

// committed tells the checkpointer that a transaction committed; it never blocks.
func (c *checkpointer) committed() {
	if c == nil {
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop() {
	defer close(c.done)
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-c.wake:
		case <-c.stop:
			return
		}
		// A failed checkpoint loses nothing (the pages stay in the WAL): the next one
		// copies them.
		_, _ = c.db.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
		t.Reset(checkpointEvery)
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			return
		}
	}
}

// close stops the goroutine and closes its connection.
func (c *checkpointer) close() error {
	if c == nil {
		return nil
	}
	close(c.stop)
	<-c.done
	return c.db.Close()
}
