package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/cmd/luft/internal/tui"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/node"
	"github.com/luft-run/luft/planner"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// localRun is a `luft run` hosted in this process: the host serving it (its backends,
// scheduler and Service), the store under them, the --log file, and the planner of a
// task in words or --auto-fix.
type localRun struct {
	h       *host.Host
	store   storage.DB
	logFile *os.File
	// askable: a destructive tool under [tools] approval = "ask" waits for an answer only
	// where one can be given: the live board with keys asks y/n. Elsewhere its agent call
	// fails with a message naming the setting, so a run never waits silently.
	askable bool
	pl      *planner.Planner
	plan    *planner.Plan // the plan of a task in words; nil for a workflow file
	// nd is this process as a node of a PostgreSQL store, holding its run under a lease
	// (nil on SQLite, where the run is held by this process); stopLease stops its renewal.
	nd        *daemonNode
	stopLease func()
}

// serveLocalRun is the second step of the run's host: the --log file, the store and the
// Service over them (package host).
func serveLocalRun(ctx context.Context, e *env, g *globalFlags, f *runFlags, h *host.Host) (*localRun, error) {
	logFile, err := openLog(f)
	if err != nil {
		return nil, err
	}
	lr := &localRun{h: h, logFile: logFile, askable: approvable(e, f)}
	if lr.store, err = openStore(ctx, e, g, f.resume); err != nil {
		lr.close()
		return nil, err
	}
	o := host.ServeOptions{Slots: f.maxConcurrency, SlotsGiven: f.slotsFromFlag,
		Now: e.now, Caller: "cli", AskApprovals: lr.askable}
	// On PostgreSQL this process is a node of its own, "<state dir's node>.cli" (hostNode):
	// any daemon of the database, on any host, takes the run over once this process dies
	// or stops renewing, and this process then stops it at once. On SQLite the run's owner
	// is this state dir's node with this pid: a daemon of this state dir takes it over once
	// this process is gone (an unreadable node.id leaves it held by pid alone).
	logf := func(format string, args ...any) {
		if !f.quiet { // --quiet: only the run's end is reported (lostMessage, if lost)
			fmt.Fprintf(e.stderr, "luft: "+format+"\n", args...)
		}
	}
	if lr.nd, err = hostNode(ctx, e, g, cliNodeSuffix, logf); err != nil {
		lr.close()
		return nil, err
	}
	if lr.nd != nil {
		lr.nd.serveOptions(&o, h.Config())
	} else {
		o.Node, _ = node.ID(stateDir(e, g))
	}
	if err := h.Serve(lr.store, o); err != nil {
		lr.close()
		return nil, err
	}
	lr.stopLease = lr.nd.hold(h.Service)
	return lr, nil
}

// close stops the lease's renewal (the run's end is stored by then) and closes the
// stores, then the --log file (which the mirror closes once the run ends; this covers an
// early return).
func (lr *localRun) close() {
	if lr.stopLease != nil {
		lr.stopLease() // closes the node's store too
	} else if lr.nd != nil {
		lr.nd.Close()
	}
	if lr.store != nil {
		lr.store.Close()
	}
	if lr.logFile != nil {
		lr.logFile.Close()
	}
}

// start resumes the run, or starts it from the workflow file or from the plan of a task
// in words.
func (lr *localRun) start(ctx context.Context, e *env, g *globalFlags, f *runFlags, args any, resumeRef string, sig *runSignals) (*runtime.Run, error) {
	svc := lr.h.Service
	if f.task != "" || f.autoFix {
		pl, err := newPlanner(svc, lr.h.Registry, lr.h.Config(), f)
		if err != nil {
			return nil, err
		}
		lr.pl = pl
	}
	if f.resume {
		return resumeRun(ctx, svc, f, resumeRef)
	}
	if f.task != "" {
		runsOn, _ := lr.h.Registry.Get(f.backend) // checked by openRunBackends
		pctx, planned := sig.whilePlanning(ctx)
		plan, err := planTask(pctx, e, f, lr.pl, runsOn.ID())
		interrupted := pctx.Err() != nil && ctx.Err() == nil
		planned()
		if err != nil && interrupted {
			// Nothing ran and nothing was recorded: there is no run to resume.
			return nil, &exitError{code: exitResumable, err: errors.New("interrupted while planning: no run was started or recorded (run the task again)")}
		}
		if err != nil {
			return nil, failedPlan(ctx, e, g, f, svc, lr.pl, err)
		}
		if f.confirm {
			if err := confirmScript(e, f, "planned workflow", plan.Script); err != nil {
				return nil, err
			}
		}
		lr.plan = plan
	}
	return lr.startNew(ctx, f, args)
}

// resumeRun resumes a stopped run; what the user can fix is an input error.
func resumeRun(ctx context.Context, svc *runtime.Service, f *runFlags, ref string) (*runtime.Run, error) {
	run, err := svc.Resume(ctx, runtime.ResumeSpec{Run: ref, AllowChangedScript: f.allowChanged, RerunFromDivergence: f.rerunDiverged,
		Repeated: f.repeated})
	if err != nil {
		switch {
		case errors.Is(err, runtime.ErrSettingChanged):
			return nil, usageErr("%v", err)
		case errors.Is(err, storage.ErrRunNotFound), errors.Is(err, storage.ErrAmbiguousRun):
			return nil, runRefError(err)
		case errors.Is(err, runtime.ErrNotResumable), errors.Is(err, runtime.ErrScriptChanged), errors.Is(err, runtime.ErrStillRunning):
			return nil, usageErr("%v", err)
		}
		return nil, err // a syntax error in a changed script maps to exit 2 in exitCode
	}
	return run, nil
}

// startNew starts a new run of the workflow file, or of the plan.
func (lr *localRun) startNew(ctx context.Context, f *runFlags, args any) (*runtime.Run, error) {
	spec := runtime.Spec{
		Path: f.workflow, Args: args, Backend: f.backend, Model: f.model,
		Class: agent.Class(f.class), Concurrency: f.maxConcurrency, Timeout: f.timeout,
		Limits: host.ScriptLimits(lr.h.Config().Limits, f.maxAgentCalls),
	}
	if lr.plan != nil {
		spec.Source, spec.Plan = lr.plan.Script, planRecord(lr.plan, "")
	}
	run, err := lr.h.Service.Start(ctx, spec)
	if err != nil {
		if lua.ErrorKindOf(err) != "" || storage.Broken(err) {
			return nil, err // a script error, or the state dir failing: not a usage error
		}
		return nil, usageErr("%v", err)
	}
	return run, nil
}

// watch shows the run until it ends (continuing it with the planner's fixes under
// --auto-fix), then its summary and report, and exits as it ended.
func (lr *localRun) watch(ctx context.Context, e *env, g *globalFlags, f *runFlags, run *runtime.Run, sig *runSignals) error {
	svc := lr.h.Service
	if lr.plan != nil && !f.json {
		fmt.Fprintf(e.stderr, "luft: planned script saved to %s (edit it and rerun with luft run --workflow FILE)\n",
			filepath.Join(svc.RunDir(run.ID), "workflow.lua"))
	}
	r := lr.renderer(ctx, e, g, f, run)
	if run.AlreadyCompleted() && !f.json {
		return storedReport(ctx, e, g, f, r, run)
	}
	cur := &liveRun{r: r, run: run}
	sig.handle(e, cur)
	logDone := mirrorLog(ctx, f, lr.logFile, run)
	r.runDone = storedRunDone(svc, run.ID)
	stuck, err := r.view(ctx, run)
	if err != nil {
		run.Cancel()
		run.Wait()
		return &exitError{code: exitFailed, err: err}
	}
	res := run.Wait()
	if f.autoFix && !stuck && fixable(res) {
		fx := &fixing{r: r, run: run, res: res, logFile: lr.logFile, logDone: logDone}
		if err := fx.loop(ctx, e, g, f, svc, lr.pl, cur); err != nil {
			return err
		}
		r, res, stuck, logDone = fx.r, fx.res, fx.stuck, fx.logDone
	}
	var ferr error
	if stuck {
		ferr = r.finishWithin(res)
	} else {
		ferr = r.finish(res)
	}
	if err := logDone(); err != nil && ferr == nil {
		return &exitError{code: exitFailed, err: err}
	}
	return ferr
}

// renderer is the run's view: the lanes of this host's scheduler, and y/n answers to its
// approvals where they can be given.
func (lr *localRun) renderer(ctx context.Context, e *env, g *globalFlags, f *runFlags, run *runtime.Run) *renderer {
	svc := lr.h.Service
	r := newRenderer(e, g, f)
	r.lanes = laneSampler(svc)
	if lr.askable {
		r.approve = func(approvalID string, allow bool) error {
			_, err := svc.Approve(context.WithoutCancel(ctx), run.ID, approvalID, allow)
			return err
		}
	}
	return r
}

// storedReport ends an idempotent resume: nothing runs; the stored report is printed as
// the run printed it (with --json the stored events of its last attempt are, in watch).
func storedReport(ctx context.Context, e *env, g *globalFlags, f *runFlags, r *renderer, run *runtime.Run) error {
	if !f.quiet {
		fmt.Fprintf(e.stderr, "luft: run %s had already completed; printing its stored report\n", run.ID)
		r.state = tui.NewState(tui.StateOptions{LogLevel: g.logLevel})
		for ev := range run.SubscribeAttempt(ctx) {
			r.state.Apply(ev) // the summary of its last attempt
		}
	}
	return r.finish(run.Wait())
}

// runSignals handle Ctrl-C during a local run. First: stop admitting, cancel in-flight
// calls, exit 3. Second: exit 130 now. They are handled from the start of runWorkflow
// (listen) until end, which runWorkflow defers first so that it runs last, while the
// report and events are still written and the store closes. A signal that comes while
// the run is still being set up (the store opening, the script pinned) waits for the
// run and stops it as soon as it exists; a second one then exits 130 at once. A signal
// while a task in words is being planned stops the planning (exit 3, no run recorded).
type runSignals struct {
	stop func()

	mu      sync.Mutex
	cur     *liveRun // nil until the run exists
	pending int      // signals that came before it did
	// planning cancels the planning of a task in words, which a first signal stops at
	// once: there is no run yet to stop.
	planning context.CancelFunc
}

// whilePlanning returns a context that the first signal cancels until planned is
// called, for planning a task in words.
func (s *runSignals) whilePlanning(ctx context.Context) (_ context.Context, planned func()) {
	pctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	if s.pending > 0 {
		cancel()
	}
	s.planning = cancel
	s.mu.Unlock()
	return pctx, func() {
		s.mu.Lock()
		s.planning = nil
		s.mu.Unlock()
		cancel()
	}
}

// listen starts taking SIGINT and SIGTERM away from their default action (which kills
// the process mid-write).
func (s *runSignals) listen(e *env) {
	sigs := make(chan os.Signal, 2)
	stop := e.notify(sigs)
	finished := make(chan struct{})
	s.stop = func() {
		close(finished)
		stop()
	}
	go func() {
		for {
			select {
			case <-sigs:
				s.signalled(e)
			case <-finished:
				return
			}
		}
	}()
}

func (s *runSignals) signalled(e *env) {
	s.mu.Lock()
	s.pending++
	n, cur, planning := s.pending, s.cur, s.planning
	s.mu.Unlock()
	switch {
	case cur != nil:
		cur.interrupt(n)
	case n >= 2:
		e.exit(exitHard)
	case planning != nil:
		planning()
	}
}

// handle hands the signals to the run cur shows, with any that came before it.
func (s *runSignals) handle(e *env, cur *liveRun) {
	if s.stop == nil {
		s.listen(e)
	}
	s.mu.Lock()
	s.cur = cur
	n := s.pending
	s.mu.Unlock()
	if n > 0 {
		cur.interrupt(1)
	}
}

// end stops handling the signals.
func (s *runSignals) end() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}
