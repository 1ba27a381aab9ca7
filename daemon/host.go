package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/lua/luaval"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// StartRequest is the body of POST /api/runs (door.StartRequest, shared with the doors
// that start runs here).
type StartRequest = door.StartRequest

// errStopping refuses new runs once the daemon shuts down.
var errStopping = errors.New("the daemon is shutting down and admits no new runs; start it again (luft daemon start)")

// Start runs a request in this daemon, as POST /api/runs does: the run is hosted here
// (it outlives the caller, is suspended on shutdown and resumed on the next start) and
// req.Caller is its fair-share caller. Doors mounted on the daemon start runs with it.
func (d *Daemon) Start(ctx context.Context, req StartRequest) (*runtime.Run, error) {
	return d.start(ctx, req)
}

// Token is the bearer token of the daemon's HTTP listener ("" without one), for a door
// that must never pass it on (the proxy forwards its clients' Authorization upstream).
// It is set before Options.Mounts is called.
func (d *Daemon) Token() string { return d.token }

// start runs a request in this daemon.
func (d *Daemon) start(ctx context.Context, req StartRequest) (*runtime.Run, error) {
	if d.stopping.Load() {
		return nil, errStopping
	}
	if req.Class != "" && req.Class != string(agent.ClassInteractive) && req.Class != string(agent.ClassBatch) {
		return nil, &inputError{fmt.Sprintf("invalid class %q: use interactive or batch", req.Class)}
	}
	if req.Script == "" && req.Path == "" {
		return nil, &inputError{"give the workflow as script (its source) or path (a file the daemon can read)"}
	}
	if luaval.Deeper(req.Args, luaval.DefaultMaxDepth) {
		return nil, &inputError{fmt.Sprintf("args nest objects and arrays deeper than the limit of %d levels", luaval.DefaultMaxDepth)}
	}
	if req.Script == "" {
		if err := checkWorkflowFile(req.Path); err != nil {
			return nil, err
		}
	}
	spec, err := d.opts.NewSpec(req)
	if err != nil {
		return nil, err
	}
	run, err := d.opts.Service.Start(context.WithoutCancel(ctx), spec)
	if err != nil {
		d.noteStorage("", err)
		return nil, err
	}
	d.track(run, req.Caller)
	return run, nil
}

// maxScript is the largest workflow the daemon takes, as a body or as a file.
const maxScript = 8 << 20

// checkWorkflowFile refuses a path that is not a regular file of at most maxScript bytes
// before it is read: a device such as /dev/zero or a FIFO would be read without end.
func checkWorkflowFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return &inputError{fmt.Sprintf("read workflow %s: %v", path, err)}
	}
	if !fi.Mode().IsRegular() {
		return &inputError{fmt.Sprintf("read workflow %s: not a regular file (%s): give the path of a .lua file", path, fi.Mode().Type())}
	}
	if fi.Size() > maxScript {
		return &inputError{fmt.Sprintf("read workflow %s: %d bytes, more than the %d a workflow may have", path, fi.Size(), maxScript)}
	}
	return nil
}

// track counts a hosted run and, when it ends suspended with a resume time, wakes it then
// (unless the state dir could not be written: see noteStorage).
func (d *Daemon) track(run *runtime.Run, caller string) {
	d.mu.Lock()
	d.hosted++
	d.wg.Add(1)
	d.mu.Unlock()
	if caller == "" {
		caller = "api"
	}
	d.log.Printf("run %s: attempt %d hosted (caller %s)", run.ID, run.Attempt, caller)
	go func() {
		defer d.wg.Done()
		res := run.Wait()
		d.log.Printf("run %s: attempt %d ended %s", run.ID, run.Attempt, res.Status)
		// A run the state dir could not record waits for space to be freed and a resume:
		// woken at once (its resume time), it would fail again on the full disk, and again.
		if res.Status == runtime.StatusSuspended && !res.ResumeAfter.IsZero() && !d.stopping.Load() &&
			!errors.Is(res.Err, storage.ErrUnwritable) {
			d.wake(run.ID, res.ResumeAfter)
		}
		d.noteStorage(run.ID, res.Err)
	}()
}

// noteStorage records a failure to write the state dir for the daemon's status (the
// daemon itself stays up: it still answers, and reads work), or clears the one recorded
// when a run's attempt ended without one.
func (d *Daemon) noteStorage(runID string, err error) {
	if !errors.Is(err, storage.ErrUnwritable) {
		if runID != "" {
			d.storageProblem.Store(nil)
		}
		return
	}
	msg := err.Error()
	if runID != "" {
		msg = fmt.Sprintf("run %s suspended (luft run --resume %s once there is space): %s", runID, runID, msg)
	} else {
		msg = "a run could not start: " + msg
	}
	d.storageProblem.Store(&msg)
	d.log.Printf("state dir: %s", msg)
}

// noteUnrecorded records, for the daemon's status, a failure of the state dir to record
// a run a door drives without a VM (a proxy conversation): its turns are refused until
// the state dir can be written. nil clears it once such a run is recorded again (and
// leaves a problem noted by noteStorage, whose run still waits for a resume).
func (d *Daemon) noteUnrecorded(err error) {
	if err == nil {
		if p := d.unrecorded.Swap(nil); p != nil {
			d.storageProblem.CompareAndSwap(p, nil)
		}
		return
	}
	msg := "the proxy's turns are refused, since their runs cannot be recorded: " + err.Error()
	d.unrecorded.Store(&msg)
	d.storageProblem.Store(&msg)
	d.log.Printf("state dir: %s", msg)
}

// wake resumes a suspended run at its resume time.
func (d *Daemon) wake(id string, at time.Time) {
	wait := max(at.Sub(d.opts.Now()), 0)
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.timers[id]; t != nil {
		t.Stop()
	}
	d.log.Printf("run %s: suspended; wakes at %s", id, at.UTC().Format(time.RFC3339))
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		d.resume(id, "woken at its resume time")
		// The entry stays while the resume runs, and when it returned is kept: the
		// claim loop may have listed the run as suspended before either, and must not
		// resume it a second time.
		now := time.Now()
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.timers[id] == t {
			delete(d.timers, id)
		}
		for k, at := range d.woke {
			if now.Sub(at) > time.Minute {
				delete(d.woke, k)
			}
		}
		d.woke[id] = now
	})
	d.timers[id] = t
}

// resume resumes a stopped run here.
func (d *Daemon) resume(id, why string) {
	if d.stopping.Load() {
		return
	}
	run, err := d.opts.Service.Resume(context.Background(), runtime.ResumeSpec{Run: id})
	if err != nil {
		d.log.Printf("run %s: not resumed (%s): %v", id, why, err)
		return
	}
	if run.AlreadyCompleted() {
		return
	}
	d.log.Printf("run %s: resumed (%s)", id, why)
	d.track(run, "daemon")
}

// recover resumes every run left running by a process that is gone and schedules the
// wake-up of every suspended run that has a resume time.
func (d *Daemon) recover(ctx context.Context) {
	runs, err := d.opts.Service.List(ctx, storage.ListOptions{Status: storage.StatusInterrupted})
	if err != nil {
		d.log.Printf("recover: list interrupted runs: %v", err)
	}
	for _, r := range runs {
		d.resume(r.ID, "left running by a process that is gone")
	}
	suspended, err := d.opts.Store.ListRuns(ctx, storage.ListOptions{Status: storage.StatusSuspended})
	if err != nil {
		d.log.Printf("recover: list suspended runs: %v", err)
	}
	for _, r := range suspended {
		if !r.ResumeAfter.IsZero() {
			d.wake(r.ID, r.ResumeAfter)
		}
	}
}

// drain stops admitting runs (and, with a Gate, turns), gives what is in flight the grace
// period to finish, suspends the runs still going and waits until each has stored its
// end.
func (d *Daemon) drain() {
	d.stopping.Store(true)
	d.mu.Lock()
	for id, t := range d.timers {
		t.Stop()
		delete(d.timers, id)
	}
	d.mu.Unlock()
	if d.opts.Gate != nil {
		// Nothing new once shutdown is asked: no turn is admitted, not even one that
		// was queued, and a run that reaches a new phase is suspended there.
		d.opts.Service.Quiesce()
		d.opts.Gate.Close()
	}
	if live := d.opts.Service.Live(); len(live) > 0 {
		d.log.Printf("shutdown: %d runs hosted; grace %s", len(live), d.grace())
		d.settle(live)
	}
	for _, r := range d.opts.Service.Live() {
		r.Suspend()
	}
	for _, r := range d.opts.Service.Live() {
		<-r.Done()
	}
	d.wg.Wait()
}

// settle waits, at most the grace period, until the runs have ended or (behind a Gate)
// no admitted turn is still running.
func (d *Daemon) settle(live []*runtime.Run) {
	grace := time.NewTimer(d.grace())
	defer grace.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for _, r := range live {
		for {
			select {
			case <-r.Done():
			case <-grace.C:
				return
			case <-tick.C:
				if d.opts.Gate != nil && d.turnsRunning() == 0 {
					return
				}
				continue
			}
			break
		}
	}
}

// turnsRunning is how many admitted turns have not finished.
func (d *Daemon) turnsRunning() int {
	st, ok := d.opts.Service.SchedulerStats()
	if !ok {
		return 0
	}
	return st.Running
}

// inputError is a request the caller got wrong (HTTP 400).
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }
