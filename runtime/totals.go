package runtime

import (
	"context"
	"sync"

	"github.com/luft-run/luft/storage"
)

// totals keeps a running run's row up to date with its counts, tokens and cost as each
// call finishes, so status, list, the daemon's API, MCP and the dashboard show them while
// the run goes on, in this process and in any other that reads the state dir. Writes are
// coalesced: while one is being written, later changes wait and go in the next one, so a
// burst of calls (a resume replaying its journal) costs a few writes, not one per call.
type totals struct {
	store storage.Store
	id    string
	get   func() Result // the run's totals now

	kick chan struct{} // one pending write at most
	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

func newTotals(store storage.Store, id string, get func() Result) *totals {
	t := &totals{store: store, id: id, get: get, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	t.done.Add(1)
	go t.loop()
	return t
}

// changed asks for the row to be written with the totals of now or later.
func (t *totals) changed() {
	select {
	case t.kick <- struct{}{}:
	default: // a write is pending already; it reads the totals when it runs
	}
}

func (t *totals) loop() {
	defer t.done.Done()
	for {
		select {
		case <-t.kick:
			t.write()
		case <-t.stop:
			return
		}
	}
}

func (t *totals) write() {
	res := t.get()
	u := storage.Usage(res.Usage)
	// A failed write is not the run's failure: the journal's writes report a broken
	// state dir, and the run's end writes the totals again.
	_ = t.store.UpdateRun(context.Background(), t.id, storage.RunUpdate{Usage: &u, Cost: &res.Cost, Agents: &res.Agents})
}

// close stops the writer and waits for a write in flight, so none lands after the run's
// final row.
func (t *totals) close() {
	t.once.Do(func() { close(t.stop) })
	t.done.Wait()
}
