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
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/host"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/lua/luaval"
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

// runWorkflow runs `luft run`: it checks the flags, opens the backends, hands the run to
// the state dir's daemon when one runs, and otherwise hosts it here (run_local.go).
func runWorkflow(ctx context.Context, e *env, g *globalFlags, f *runFlags, resumeRef string) error {
	// Signals stay handled until the very end, after the store is closed: a second
	// Ctrl-C while it closes still exits 130 rather than killing the process.
	sig := &runSignals{}
	sig.listen(e)
	defer sig.end()
	if ctx == nil {
		ctx = context.Background()
	}
	args, err := checkRunFlags(f)
	if err != nil {
		return err
	}
	h, err := openRunBackends(e, g, f)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := checkBeforeRun(e, g, f); err != nil {
		return err
	}
	// While a daemon runs for the state dir, the run is hosted there: one scheduler for
	// every run on the machine.
	if routed, err := daemonRun(ctx, e, g, f, args, resumeRef, sig.end); routed {
		return err
	}
	lr, err := serveLocalRun(ctx, e, g, f, h)
	if err != nil {
		return err
	}
	defer lr.close()
	run, err := lr.start(ctx, e, g, f, args, resumeRef, sig)
	if err != nil {
		return err
	}
	return lr.watch(ctx, e, g, f, run, sig)
}

// checkRunFlags refuses flags out of range before anything is opened, and returns the
// script's args. --mock-file alone runs on the mockfile backend.
func checkRunFlags(f *runFlags) (args any, err error) {
	if args, err = parseArgs(f.args); err != nil {
		return nil, err
	}
	if f.class != string(agent.ClassInteractive) && f.class != string(agent.ClassBatch) {
		return nil, usageErr("invalid --class %q: use interactive or batch", f.class)
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
			return nil, usageErr("invalid %s: %v", c.flag, c.err)
		}
	}
	if f.mockFile != "" && f.backend == "" {
		f.backend = "mockfile"
	}
	return args, nil
}

// openRunBackends is the first step of the run's host: the config and the backends. It
// says once when the mock stands in as the default, and refuses a --backend nothing
// registers.
func openRunBackends(e *env, g *globalFlags, f *runFlags) (*host.Host, error) {
	cfg, err := loadConfig(e, g)
	if err != nil {
		return nil, err
	}
	h, err := openBackends(e, g, cfg, f.mockFile)
	if err != nil {
		return nil, err
	}
	b := h.Backends
	// A task planned offline says so in the planner's one line, which covers this notice.
	offlineTask := f.task != "" && len(b.Unchosen) < 2
	if b.Auto && f.backend == "" && !f.resume && !f.quiet && !f.json && !offlineTask {
		fmt.Fprintln(e.stderr, defaultNotice(b.Unchosen))
	}
	if _, err := h.Registry.Get(f.backend); err != nil {
		h.Close()
		return nil, usageErr("--backend: %v", err)
	}
	return h, nil
}

// checkBeforeRun refuses what would fail the run late, before any agent runs: an unknown
// log level, a script the user declines (--confirm), a report path that cannot be
// written.
func checkBeforeRun(e *env, g *globalFlags, f *runFlags) error {
	if err := checkLevel(g.logLevel); err != nil {
		return err
	}
	if f.confirm && !f.resume && f.task == "" {
		if err := confirm(e, f); err != nil {
			return err
		}
	}
	if f.output != "" {
		if st, err := os.Stat(filepath.Dir(f.output)); err != nil || !st.IsDir() {
			return usageErr("-o %s: the folder %s does not exist", f.output, filepath.Dir(f.output))
		}
	}
	return nil
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

// ownershipLost reports whether the run stopped here because it is no longer this
// process's: another node claimed it (this process was paused, or cut off from the
// database, past its lease), or this process's lease may have lapsed.
func ownershipLost(res runtime.Result) bool {
	return errors.Is(res.Err, storage.ErrOwnershipLost) || errors.Is(res.Err, runtime.ErrLeaseLapsed)
}

// lostMessage says what became of a run whose ownership this process lost.
func lostMessage(res runtime.Result) string {
	why := "another node claimed it (this process was stopped, or cut off from the database, past its lease)"
	if errors.Is(res.Err, runtime.ErrLeaseLapsed) {
		why = "this process could not renew its lease in time, so another node may be claiming it"
	}
	return fmt.Sprintf("run %s: ownership lost, stopped here: %s; a daemon on the same database goes on with it "+
		"with no finished call redone (luft status %s names its node), or resume it with luft run --resume %s", res.RunID, why, short(res.RunID), short(res.RunID))
}

// errorExit maps a finished run to its exit error.
func errorExit(res runtime.Result) error {
	switch res.Status {
	case runtime.StatusCompleted:
		return nil
	case runtime.StatusCancelled, runtime.StatusSuspended:
		return &exitError{code: exitResumable, err: fmt.Errorf("run %s %s: %v", res.RunID, res.Status, res.Err), quiet: true}
	}
	if ownershipLost(res) {
		// Not a failure: the run goes on, on whichever node claimed it.
		return &exitError{code: exitResumable, err: errors.New(lostMessage(res)), quiet: true}
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
