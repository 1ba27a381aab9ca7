package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/cmd/luft/internal/tui"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/lua/luaval"
	"github.com/luft-run/luft/planner"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
)

type runFlags struct {
	slotsFromFlag  bool // --max-concurrency was given (it beats the config file)
	resume         bool
	allowChanged   bool
	rerunDiverged  bool
	repeated       map[string]string // start flags given again with --resume, by name (runtime.ResumeSpec.Repeated)
	workflow       string
	args           string
	output         string
	backend        string
	model          string
	mockFile       string
	maxConcurrency int
	maxAgentCalls  int
	class          string
	json           bool
	quiet          bool
	noTUI          bool
	timeout        time.Duration
	detach         bool // start the run in the daemon, print its id, return
	// Luft's flags
	confirm      bool
	yes          bool
	logFile      string
	logFormat    string
	logFormatSet bool
	plannerModel string
	task         string // luft run "TASK": plan the workflow from these words
	autoFix      bool
}

// resumeChecked are the start flags a resume accepts only with the run's own value.
var resumeChecked = []string{"workflow", "args", "backend", "model", "class", "timeout", "max-agent-calls"}

func newRunCmd(e *env, g *globalFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run --workflow FILE [ARGS_JSON] [flags] | run \"TASK\" [flags]",
		Short: "Run a workflow file, or plan one from a task in words and run it",
		Long: `Run a workflow file. Progress goes to stderr, the report to stdout (a string or an
object's markdown field raw, anything else as JSON) and to -o FILE. With --json, stdout
carries one JSON event per line instead, ending with run_done.

Exit codes: 0 completed, 1 failed, 2 invalid input (reported before any agent runs),
3 cancelled or suspended (also when the state dir's disk is full: free space, then
resume), 130 a second Ctrl-C. Resuming a run that already completed prints its report
and exits 0.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.slotsFromFlag = cmd.Flags().Changed("max-concurrency")
			f.logFormatSet = cmd.Flags().Changed("log-format")
			if err := checkLogFlags(f); err != nil {
				return err
			}
			if f.resume {
				// A resume runs the run as it was started: settings that would change
				// what its calls compute or how the run is limited are refused, not
				// silently ignored. Given again with the run's own value, they change
				// nothing and are accepted (the resume checks them against the run).
				f.repeated = nil
				for _, name := range resumeChecked {
					if fl := cmd.Flags().Lookup(name); fl.Changed {
						if f.repeated == nil {
							f.repeated = map[string]string{}
						}
						f.repeated[name] = fl.Value.String()
					}
				}
				if _, ok := f.repeated["args"]; ok {
					if _, err := parseArgs(f.args); err != nil {
						return err
					}
					if strings.TrimSpace(f.args) == "" {
						f.repeated["args"] = "{}" // what a run started without --args has
					}
				}
				if w := f.repeated["workflow"]; w != "" {
					// The daemon, when it hosts the resume, reads paths from its own folder.
					if abs, err := filepath.Abs(w); err == nil {
						f.repeated["workflow"] = abs
					}
				}
				f.workflow, f.args = "", ""
				if len(args) > 1 {
					return usageErr("--resume takes one run id (or none for the newest unfinished run)")
				}
				ref := ""
				if len(args) == 1 {
					ref = args[0]
				}
				return runWorkflow(cmd.Context(), e, g, f, ref)
			}
			if f.allowChanged || f.rerunDiverged {
				return usageErr("--allow-changed-script and --rerun-from-divergence only apply with --resume")
			}
			if ok, err := positionalArgs(f, args); ok || err != nil {
				if err != nil {
					return err
				}
				args = nil
			}
			if len(args) > 0 {
				if f.workflow != "" {
					return usageErr("give either --workflow FILE or a task in words, not both")
				}
				if err := bareWorkflowFile(args); err != nil {
					return err
				}
				f.task = strings.Join(args, " ")
				return runWorkflow(cmd.Context(), e, g, f, "")
			}
			if f.workflow == "" {
				return usageErr("missing --workflow FILE (see examples/hello.lua)")
			}
			return runWorkflow(cmd.Context(), e, g, f, "")
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.workflow, "workflow", "w", "", "workflow file to run")
	fl.BoolVar(&f.resume, "resume", false, "resume a stopped run: luft run --resume [RUN] (id, id prefix, or none for the newest unfinished run)")
	fl.BoolVar(&f.allowChanged, "allow-changed-script", false, "with --resume: run the script even though it changed since the run started")
	fl.BoolVar(&f.rerunDiverged, "rerun-from-divergence", false, "with --resume: forget the journal from the first call whose inputs changed and run from there")
	fl.StringVar(&f.args, "args", "", "arguments for the script as a JSON object (the script's `args`)")
	fl.StringVarP(&f.output, "output", "o", "", "also write the report to this file")
	fl.StringVarP(&f.backend, "backend", "b", "", "backend for agent calls that name none: mock, mockfile, openai (with OPENAI_BASE_URL/OPENAI_API_KEY) or a [backends.NAME] of the config file")
	fl.StringVar(&f.model, "model", "", "model for agent calls that name none")
	fl.StringVar(&f.mockFile, "mock-file", "", "scripted replies for the mockfile backend (JSON)")
	fl.IntVar(&f.maxConcurrency, "max-concurrency", 8, "model turns running at once per backend/model (the scheduler's slots), and the default pipeline max_inflight")
	fl.IntVar(&f.maxAgentCalls, "max-agent-calls", 10000, "agent calls allowed per run")
	fl.StringVar(&f.class, "class", "interactive", "scheduling class of the run's calls: interactive or batch")
	fl.BoolVar(&f.json, "json", false, "write events as JSON lines on stdout instead of the report")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing but the report and errors")
	fl.BoolVar(&f.noTUI, "no-tui", false, "plain progress lines even on a terminal (also with CI set or TERM=dumb)")
	fl.BoolVar(&f.detach, "detach", false, "start the run in the daemon (luft daemon start), print its id and return; luft attach RUN shows it")
	fl.DurationVar(&f.timeout, "timeout", 0, "stop the run after this long (e.g. 90s, 10m); 0 = no limit")
	fl.BoolVarP(&f.confirm, "confirm", "c", false, "print the script and ask before running it (needs a terminal, or --yes)")
	fl.BoolVar(&f.yes, "yes", false, "with --confirm: answer yes without asking")
	fl.StringVar(&f.logFile, "log", "", "also write every event of the run to this file")
	fl.StringVar(&f.logFormat, "log-format", "jsonl", "format of --log FILE: jsonl (one JSON event per line) or pretty (the lines of luft logs)")
	fl.StringVar(&f.plannerModel, "planner-model", "", "model that plans a workflow from a task in words and repairs it for --auto-fix (MODEL or BACKEND/MODEL); default planner_model of the config, else the run's backend and model (the mock plans offline)")
	fl.BoolVar(&f.autoFix, "auto-fix", false, "when the script fails with a script error, ask the planner for a fix and continue the same run with it (finished calls replay from the journal)")
	return cmd
}

// parseArgs decodes --args; scripts get an empty table without it.
func parseArgs(s string) (any, error) {
	if strings.TrimSpace(s) == "" {
		return map[string]any{}, nil
	}
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, usageErr("invalid --args: not valid JSON: %v (example: --args '{\"topic\": \"rust\"}')", err)
	}
	switch v.(type) {
	case map[string]any, []any:
		// Scripts get args as Lua tables, converted under the JSON depth limit: refuse
		// here what the conversion would refuse.
		if luaval.Deeper(v, luaval.DefaultMaxDepth) {
			return nil, usageErr("invalid --args: nested deeper than the limit of %d levels of objects and arrays", luaval.DefaultMaxDepth)
		}
		return v, nil
	}
	return nil, usageErr("invalid --args: must be a JSON object or array, got %s", s)
}

func runWorkflow(ctx context.Context, e *env, g *globalFlags, f *runFlags, resumeRef string) error {
	// Signals stay handled until the very end, after the store is closed: a second
	// Ctrl-C while it closes still exits 130 rather than killing the process.
	var endSignals func()
	defer func() {
		if endSignals != nil {
			endSignals()
		}
	}()
	if ctx == nil {
		ctx = context.Background()
	}
	args, err := parseArgs(f.args)
	if err != nil {
		return err
	}
	if f.class != string(agent.ClassInteractive) && f.class != string(agent.ClassBatch) {
		return usageErr("invalid --class %q: use interactive or batch", f.class)
	}
	for _, c := range []struct {
		flag string
		err  error
	}{
		{"--max-concurrency", config.CheckRange(f.maxConcurrency, 1, config.MaxSlots)},
		{"--max-agent-calls", config.CheckRange(f.maxAgentCalls, 1, config.MaxAgentCalls)},
		{"--timeout", config.CheckRange(f.timeout, 0, time.Duration(math.MaxInt64))},
	} {
		if c.err != nil {
			return usageErr("invalid %s: %v", c.flag, c.err)
		}
	}
	if f.mockFile != "" && f.backend == "" {
		f.backend = "mockfile"
	}
	cfg, err := loadConfig(e, g)
	if err != nil {
		return err
	}
	h, err := openBackends(e, g, cfg, f.mockFile)
	if err != nil {
		return err
	}
	defer h.Close()
	reg, bset := h.Registry, h.Backends
	// A task planned offline says so in the planner's one line, which covers this notice.
	offlineTask := f.task != "" && len(bset.Unchosen) < 2
	if bset.Auto && f.backend == "" && !f.resume && !f.quiet && !f.json && !offlineTask {
		fmt.Fprintln(e.stderr, defaultNotice(bset.Unchosen))
	}
	if _, err := reg.Get(f.backend); err != nil {
		return usageErr("--backend: %v", err)
	}
	if err := checkLevel(g.logLevel); err != nil {
		return err
	}
	if f.confirm && !f.resume && f.task == "" {
		if err := confirm(e, f); err != nil {
			return err
		}
	}
	if f.output != "" {
		// Refuse a report path that cannot be written before any agent runs.
		if st, err := os.Stat(filepath.Dir(f.output)); err != nil || !st.IsDir() {
			return usageErr("-o %s: the folder %s does not exist", f.output, filepath.Dir(f.output))
		}
	}
	// While a daemon runs for the state dir, the run is hosted there: one scheduler for
	// every run on the machine.
	if routed, err := daemonRun(ctx, e, g, f, args, resumeRef); routed {
		return err
	}
	logFile, err := openLog(f)
	if err != nil {
		return err
	}
	if logFile != nil {
		defer logFile.Close() // closed by the mirror once the run ends; this covers an early return
	}
	st, err := openStore(ctx, e, g, f.resume)
	if err != nil {
		return err
	}
	defer st.Close()
	// A destructive tool under [tools] approval = "ask" waits for an answer only where
	// one can be given: the live board with keys asks y/n. Elsewhere its agent call fails
	// with a message naming the setting, so a run never waits silently.
	askable := approvable(e, f)
	if err := h.Serve(st, host.ServeOptions{Slots: f.maxConcurrency, SlotsGiven: f.slotsFromFlag,
		Now: e.now, Caller: "cli", AskApprovals: askable}); err != nil {
		return err
	}
	svc := h.Service
	var (
		run  *runtime.Run
		pl   *planner.Planner
		plan *planner.Plan
	)
	if f.task != "" || f.autoFix {
		if pl, err = newPlanner(svc, reg, cfg, f); err != nil {
			return err
		}
	}
	if f.task != "" && !f.resume {
		runsOn, _ := reg.Get(f.backend) // checked above
		if plan, err = planTask(ctx, e, f, pl, runsOn.ID()); err != nil {
			return failedPlan(ctx, e, g, f, svc, pl, err)
		}
		if f.confirm {
			if err := confirmScript(e, f, "planned workflow", plan.Script); err != nil {
				return err
			}
		}
	}
	if f.resume {
		run, err = svc.Resume(ctx, runtime.ResumeSpec{Run: resumeRef, AllowChangedScript: f.allowChanged, RerunFromDivergence: f.rerunDiverged,
			Repeated: f.repeated})
		if err != nil {
			switch {
			case errors.Is(err, runtime.ErrSettingChanged):
				return usageErr("%v", err)
			case errors.Is(err, storage.ErrRunNotFound), errors.Is(err, storage.ErrAmbiguousRun):
				return runRefError(err)
			case errors.Is(err, runtime.ErrNotResumable), errors.Is(err, runtime.ErrScriptChanged), errors.Is(err, runtime.ErrStillRunning):
				return usageErr("%v", err)
			}
			return err // a syntax error in a changed script maps to exit 2 in exitCode
		}
	} else {
		spec := runtime.Spec{
			Path: f.workflow, Args: args, Backend: f.backend, Model: f.model,
			Class: agent.Class(f.class), Concurrency: f.maxConcurrency, Timeout: f.timeout,
			Limits: host.ScriptLimits(cfg.Limits, f.maxAgentCalls),
		}
		if plan != nil {
			spec.Source, spec.Plan = plan.Script, planRecord(plan, "")
		}
		run, err = svc.Start(ctx, spec)
		if err != nil {
			if lua.ErrorKindOf(err) != "" || storage.Broken(err) {
				return err // a script error, or the state dir failing: not a usage error
			}
			return usageErr("%v", err)
		}
	}

	if plan != nil && !f.json {
		fmt.Fprintf(e.stderr, "luft: planned script saved to %s (edit it and rerun with luft run --workflow FILE)\n",
			filepath.Join(svc.RunDir(run.ID), "workflow.lua"))
	}
	r := newRenderer(e, g, f)
	r.lanes = laneSampler(svc)
	if askable {
		r.approve = func(approvalID string, allow bool) error {
			_, err := svc.Approve(context.WithoutCancel(ctx), run.ID, approvalID, allow)
			return err
		}
	}
	if run.AlreadyCompleted() && !f.json {
		// Idempotent resume: nothing runs; the stored report is printed as the run printed
		// it (with --json the stored events of its last attempt are, below).
		if !f.quiet {
			fmt.Fprintf(e.stderr, "luft: run %s had already completed; printing its stored report\n", run.ID)
			r.state = tui.NewState(tui.StateOptions{LogLevel: g.logLevel})
			for ev := range run.SubscribeAttempt(ctx) {
				r.state.Apply(ev) // the summary of its last attempt
			}
		}
		return r.finish(run.Wait())
	}
	// First Ctrl-C: stop admitting, cancel in-flight calls, exit 3. Second: exit 130 now.
	// Signals are handled until this function returns, including while the report and
	// events are still being written.
	cur := &liveRun{r: r, run: run}
	sigs := make(chan os.Signal, 2)
	stop := e.notify(sigs)
	finished := make(chan struct{})
	endSignals = func() {
		close(finished)
		stop()
	}
	go func() {
		n := 0
		for {
			select {
			case <-sigs:
				n++
				cur.interrupt(n)
			case <-finished:
				return
			}
		}
	}()

	logDone := mirrorLog(ctx, f, logFile, run)
	r.runDone = storedRunDone(svc, run.ID)
	stuck, err := r.view(ctx, run)
	if err != nil {
		run.Cancel()
		run.Wait()
		return &exitError{code: exitFailed, err: err}
	}
	res := run.Wait()
	if f.autoFix && !stuck && fixable(res) {
		fx := &fixing{r: r, run: run, res: res, logFile: logFile, logDone: logDone}
		if err := fx.loop(ctx, e, g, f, svc, pl, cur); err != nil {
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

// approvable reports whether a run's approvals can be answered here: the live board is
// up and has keys.
func approvable(e *env, f *runFlags) bool {
	return !f.json && !f.quiet && liveTerminal(e, f.noTUI) && e.stdinTTY != nil
}

// checkLevel refuses a log level the views do not know.
func checkLevel(s string) error {
	if !slices.Contains([]string{"trace", "debug", "info", "warn", "error"}, s) {
		return usageErr("invalid --log-level %q: use trace, debug, info, warn or error", s)
	}
	return nil
}

// errorExit maps a finished run to its exit error.
func errorExit(res runtime.Result) error {
	switch res.Status {
	case runtime.StatusCompleted:
		return nil
	case runtime.StatusCancelled, runtime.StatusSuspended:
		return &exitError{code: exitResumable, err: fmt.Errorf("run %s %s: %v", res.RunID, res.Status, res.Err), quiet: true}
	}
	code := exitFailed
	switch lua.ErrorKindOf(res.Err) {
	case lua.KindSyntax, lua.KindInvalid:
		code = exitUsage
	}
	if res.Err == nil {
		res.Err = errors.New("unknown failure")
	}
	return &exitError{code: code, err: res.Err, quiet: true}
}
