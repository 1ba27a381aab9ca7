package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// claimBatch is the most runs one pass of the claim loop takes over.
const claimBatch = 32

// claimParallel is how many runs the claim loop takes over at once.
const claimParallel = 8

// runNode renews the node's lease once, starts its renewal and the claim loop (with a
// Keeper) and returns what stops them: the claim loop at once, the renewal once the
// drain has stored every hosted run's end.
func (d *Daemon) runNode() (stop func()) {
	k := d.opts.Keeper
	if k == nil {
		return func() {}
	}
	k.SetAddress(d.info.Addr)
	kctx, stopKeeper := context.WithCancel(context.Background())
	// One renewal before anything is claimed or resumed: the keeper's clock counts from
	// its creation, which on a slow start may be most of a lease ago.
	_ = k.Renew(kctx)
	cctx, stopClaims := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); k.Run(kctx) }()
	go func() { defer wg.Done(); d.claimLoop(cctx) }()
	d.log.Printf("node %s: lease %s, renewed every %s", k.ID(), k.Length(), k.Every())
	return func() {
		stopClaims()
		stopKeeper()
		wg.Wait()
	}
}

// claimLoop takes over, every ClaimEvery until ctx ends or the daemon stops, the runs no
// live node drives: runs whose lease lapsed first, then runs whose process is gone, then
// suspended runs whose resume time has come. Each is claimed by the compare-and-set on
// its attempt (Resume), so of two nodes only one gets a run.
func (d *Daemon) claimLoop(ctx context.Context) {
	every := d.opts.ClaimEvery
	if every <= 0 {
		every = d.opts.Keeper.Every()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if d.stopping.Load() || !d.opts.Keeper.Valid() {
			continue // a node that may have lost its lease claims nothing
		}
		listed := time.Now()
		runs, err := d.opts.Service.Claimable(ctx, claimBatch)
		if err != nil {
			d.log.Printf("claim: list claimable runs: %v", err)
			continue
		}
		// Claimed side by side: a resume loads the run's journal and script before its
		// claim, and one slow load must not hold back the takeover of the others.
		var wg sync.WaitGroup
		sem := make(chan struct{}, claimParallel)
		for _, r := range runs {
			if ctx.Err() != nil || d.stopping.Load() {
				break
			}
			if r.Status == storage.StatusSuspended && d.wakesItself(r.ID, listed) {
				continue // its own timer resumes it here; a second resume would only lose the claim
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if runtime.IsExternal(r) {
					d.endExternal(ctx, r)
					return
				}
				d.resume(r.ID, claimReason(r, d.opts.Now()))
			}()
		}
		wg.Wait()
	}
}

// endExternal ends external run r (a proxy's: its loop lived in the client) left by a
// node that died or stopped renewing: no node can resume it.
func (d *Daemon) endExternal(ctx context.Context, r storage.Run) {
	reason := externalEnd(r, d.opts.Now())
	if err := d.opts.Service.EndTakenOver(ctx, r, reason); err != nil {
		d.log.Printf("run %s: not ended (%s): %v", r.ID, reason, err)
		return
	}
	d.log.Printf("run %s: %s", r.ID, reason)
}

// externalEnd is the reason an external run taken over is ended with: its error in list
// and status.
func externalEnd(r storage.Run, now time.Time) string {
	why := fmt.Sprintf("its process %d is gone", r.PID)
	if !r.LeaseUntil.IsZero() {
		why = fmt.Sprintf("the lease of node %s lapsed %s ago", r.Node, now.Sub(r.LeaseUntil).Round(time.Millisecond))
	}
	return "ended: the proxy that hosted it died (" + why + "); its client's loop cannot be resumed here"
}

// wakesItself reports whether this daemon holds a wake-up timer for run id, or its timer
// resumed the run since (a list of claimable runs made then may be stale).
func (d *Daemon) wakesItself(id string, since time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.timers[id] != nil || !d.woke[id].Before(since)
}

// claimReason says why a run is taken over, for the log, and the workspace it needs.
func claimReason(r storage.Run, now time.Time) string {
	why := claimCause(r, now)
	if r.Workspace != "" {
		why += fmt.Sprintf(" (it needs workspace %s, which this node serves)", r.Workspace)
	}
	return why
}

func claimCause(r storage.Run, now time.Time) string {
	switch {
	case r.Status == storage.StatusSuspended:
		return "woken at its resume time"
	case !r.LeaseUntil.IsZero():
		return fmt.Sprintf("taken over: the lease of node %s lapsed %s ago", r.Node, now.Sub(r.LeaseUntil).Round(time.Millisecond))
	}
	return fmt.Sprintf("taken over: its process %d is gone", r.PID)
}
