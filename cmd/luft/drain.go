package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
)

// The view never holds up the process's exit (SPEC §1, §3). The run records its events
// whatever the view does (the view reads them from the log at its own pace), so a view
// that falls behind — a script that floods phases or logs — only delays what is shown.
// When the run was stopped (Ctrl-C, SIGTERM, --timeout, luft cancel) the view gets
// drainBound to show the rest, and is then abandoned; a run that ended on its own is
// shown to the end unless a signal arrives meanwhile. A view blocked writing (a
// terminal or pipe nobody reads) is left behind after stuckBound.
const (
	drainBound = 2 * time.Second
	stuckBound = time.Second
	// hardExitGrace is how long a second Ctrl-C waits for the live board to restore
	// the terminal before the process exits anyway.
	hardExitGrace = 500 * time.Millisecond
)

// view shows the run's events until they end or the view is abandoned. It returns the
// view's own failure, and stuck is true when the view did not return after it was abandoned (it
// is still blocked writing, and must be left alone).
func (r *renderer) view(ctx context.Context, run *runtime.Run) (stuck bool, err error) {
	vctx, abandon := context.WithCancel(ctx)
	defer abandon()
	go r.bound(vctx, run, func() {
		r.abandoned.Store(true)
		abandon()
	})
	shown := make(chan error, 1)
	var events <-chan event.Event
	if r.mode != modeQuiet {
		events = run.SubscribeAttempt(vctx)
	}
	go func() { shown <- r.show(vctx, run.Cancel, run.Done(), events) }()
	select {
	case err := <-shown:
		return false, err
	case <-vctx.Done():
	}
	t := time.NewTimer(stuckBound)
	defer t.Stop()
	select {
	case err := <-shown:
		return false, err
	case <-t.C:
		r.abandoned.Store(true)
		return true, nil
	}
}

// bound abandons the view drainBound after a stopped run ended (see above).
func (r *renderer) bound(ctx context.Context, run *runtime.Run, abandon func()) {
	select {
	case <-run.Done():
	case <-ctx.Done():
		return
	}
	if res := run.Wait(); res.Status != runtime.StatusCancelled && !errors.Is(res.Err, runtime.ErrTimeout) {
		select {
		case <-r.signalled:
		case <-ctx.Done():
			return
		}
	}
	t := time.NewTimer(drainBound)
	defer t.Stop()
	select {
	case <-t.C:
		abandon()
	case <-ctx.Done():
	}
}

// endAbandoned finishes the output of a view stopped before the end of the run's events:
// a --json stream still ends with the run's run_done, and stderr says where the rest is.
func (r *renderer) endAbandoned(res runtime.Result) {
	// The view may have shown the end just as it was abandoned.
	if !r.stuck && (r.wroteEnd || r.state != nil && r.state.Done()) {
		return
	}
	if r.mode == modeJSON && !r.stuck {
		ev, ok := event.Event{}, false
		if r.runDone != nil {
			ev, ok = r.runDone(r.lastSeq)
		}
		if !ok {
			ev = runDoneEvent(res, r.e.now())
		}
		if b, err := json.Marshal(ev); err == nil {
			fmt.Fprintf(r.e.stdout, "%s\n", b)
		}
	}
	fmt.Fprintf(r.e.stderr, "luft: run %s ended before its events were all shown; they are all stored: luft logs %s\n", res.RunID, res.RunID)
}

// finishWithin is finish for a view left stuck writing: the same output, given at most
// drainBound, since stdout or stderr may be a pipe nobody reads. The exit code is the
// run's either way.
func (r *renderer) finishWithin(res runtime.Result) error {
	r.stuck = true
	done := make(chan error, 1)
	go func() { done <- r.finish(res) }()
	t := time.NewTimer(drainBound)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errorExit(res)
	}
}

// storedRunDone reads the run's last run_done after seq from the log, within a short bound.
func storedRunDone(svc *runtime.Service, runID string) func(since int64) (event.Event, bool) {
	return func(since int64) (event.Event, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), stuckBound)
		defer cancel()
		evs, errc, err := svc.Events(ctx, runID, runtime.EventsOptions{Since: since, Types: []string{event.RunDone}})
		if err != nil {
			return event.Event{}, false
		}
		var last event.Event
		found := false
		for ev := range evs {
			last, found = ev, true
		}
		if err := <-errc; err != nil {
			return event.Event{}, false
		}
		return last, found
	}
}
