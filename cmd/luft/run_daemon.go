package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/luft-run/luft/daemon"
)

// daemonRun hosts `luft run` in the state dir's daemon when one runs (routed is false
// otherwise, and the run is hosted here). --detach prints the run's id and returns; an
// attached run shows the live view and ends as a local run would, Ctrl-C cancelling it.
//
// release is called once the daemon answers: from then on the attached view handles the
// signals itself.
func daemonRun(ctx context.Context, e *env, g *globalFlags, f *runFlags, args any, resumeRef string, release func()) (routed bool, err error) {
	// Planning, the planner's fixes, scripted mock replies and the event log file belong
	// to the calling process: such runs stay here.
	if f.task != "" || f.autoFix || f.mockFile != "" || f.logFile != "" || strings.EqualFold(e.getenv("LUFT_DAEMON"), "off") {
		if f.detach {
			return true, usageErr("--detach cannot be used with a task in words, --auto-fix, --mock-file or --log, or with LUFT_DAEMON=off (they run in this process)")
		}
		return false, nil
	}
	c, err := daemon.Dial(ctx, stateDir(e, g))
	if err != nil {
		if f.detach || !errors.Is(err, daemon.ErrNotRunning) {
			return true, &exitError{code: exitFailed, err: fmt.Errorf("run: %w", err)}
		}
		return false, nil
	}
	defer c.Close()
	release()
	var id string
	if f.resume {
		id, err = c.Resume(ctx, resumeRef, daemon.ResumeRequest{AllowChangedScript: f.allowChanged,
			RerunFromDivergence: f.rerunDiverged, Caller: cliCaller(e), Repeated: f.repeated})
	} else {
		var path string
		var src []byte
		if path, err = filepath.Abs(f.workflow); err == nil {
			if src, err = os.ReadFile(path); err != nil {
				return true, usageErr("read workflow %s: %v", f.workflow, err)
			}
		}
		if err == nil {
			id, err = c.Start(ctx, daemon.StartRequest{Script: string(src), Path: path, Args: args, Backend: f.backend, Model: f.model,
				Class: f.class, Concurrency: f.maxConcurrency, MaxAgentCalls: f.maxAgentCalls, Timeout: f.timeout,
				Caller: cliCaller(e), Unattended: !f.detach && !approvable(e, f)})
		}
	}
	if err != nil {
		var ae *daemon.APIError
		if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
			if ae.Status == http.StatusNotFound {
				return true, usageErr("%v (luft list shows your runs)", err)
			}
			return true, usageErr("%v", err) // the request was wrong: a script error, a run that cannot resume
		}
		return true, &exitError{code: exitFailed, err: err}
	}
	if f.detach {
		fmt.Fprintln(e.stdout, id)
		return true, nil
	}
	return true, attach(ctx, e, g, f, id, c, false)
}
