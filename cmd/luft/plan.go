package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/planner"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/skills"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
)

// maxFixes bounds --auto-fix: how many fixed scripts one run may be continued with.
const maxFixes = 2

// newPlanner picks who plans: --planner-model, else the config's planner_model, else the
// run's backend and model. "BACKEND/MODEL" names a configured backend too. On the mock
// backend the planner is the offline template planner.
func newPlanner(svc *runtime.Service, reg *adapters.Registry, cfg config.Config, f *runFlags) (*planner.Planner, error) {
	backend, model := f.backend, f.model
	pm := f.plannerModel
	if pm == "" {
		pm = cfg.PlannerModel
	}
	if pm != "" {
		model = pm
		if b, m, ok := strings.Cut(pm, "/"); ok {
			if _, err := reg.Get(b); err == nil && b != "" {
				backend, model = b, m
			}
		}
	}
	b, err := reg.Get(backend)
	if err != nil {
		return nil, usageErr("--planner-model: %v", err)
	}
	t := plannerTools(cfg)
	if b.ID() == "mock" {
		return planner.New(planner.Options{Tools: t}), nil
	}
	return planner.New(planner.Options{Model: svc, Backend: b.ID(), ModelName: model, Tools: t}), nil
}

// plannerTools are the tools the config lets planned agents be given.
func plannerTools(cfg config.Config) planner.Tools {
	return planner.Tools{Workspace: cfg.Tools.Workspace, Commands: cfg.Tools.AllowCommands,
		Approval: cfg.Tools.Approval, MCP: slices.Sorted(maps.Keys(cfg.MCPServers))}
}

// planTask plans f.task and shows the plan on stderr. runsOn is the backend the planned
// script will run on ("" when it is only written, by generate).
func planTask(ctx context.Context, e *env, f *runFlags, pl *planner.Planner, runsOn string) (*planner.Plan, error) {
	chatty := !f.quiet && !f.json
	if chatty {
		if pl.Template() {
			where := "written without running it"
			if runsOn != "" {
				where = "run on the " + runsOn + " backend"
			}
			fmt.Fprintf(e.stderr, "luft: no model to plan with: the offline template planner plans a few parallel analyses and a synthesis, %s (configure a backend in luft.toml, or pass --backend or --planner-model, to plan with a model)\n", where)
		} else {
			fmt.Fprintf(e.stderr, "luft: planning with %s (up to %d attempts)\n", pl.Name(), planner.DefaultMaxAttempts)
		}
	}
	plan, err := pl.Plan(ctx, f.task)
	if err != nil {
		var pe *planner.Error
		if errors.As(err, &pe) {
			return nil, &exitError{code: exitFailed, err: err}
		}
		return nil, usageErr("%v", err)
	}
	if chatty {
		showPlan(e, plan)
	}
	return plan, nil
}

// failedPlan records a plan that found no valid workflow as a failed run — its attempts
// journaled, their tokens and cost as the run's — so list and status show what planning
// tried and cost, and fails the command with it. Other errors pass through.
func failedPlan(ctx context.Context, e *env, g *globalFlags, f *runFlags, svc *runtime.Service, pl *planner.Planner, err error) error {
	var pe *planner.Error
	if !errors.As(err, &pe) {
		return err
	}
	spec := runtime.Spec{Backend: f.backend, Model: f.model, Class: agent.Class(f.class),
		Plan: &runtime.Plan{Task: strings.TrimSpace(f.task), Planner: pl.Name(), Calls: planCalls(pe.Calls, "")}}
	res, rerr := svc.FailedPlan(context.WithoutCancel(ctx), spec, pe)
	if rerr != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("%w (recording it as a failed run failed too: %v)", err, rerr)}
	}
	if !f.quiet && !f.json {
		status := "luft status " + short(res.RunID)
		if g.stateDir != "" {
			status += " --state-dir " + g.stateDir // as the resume hints say it
		}
		fmt.Fprintf(e.stderr, "luft: run %s failed in planning: %d attempt%s, %d tokens, $%.4f (%s shows them)\n",
			res.RunID, pe.Attempts, plural(pe.Attempts), res.Usage.Total(), res.Cost, status)
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("run %s: %w", res.RunID, err)}
}

// showPlan prints the plan's phases and what validation found on stderr. The planner's
// reasons and phases are model text.
func showPlan(e *env, p *planner.Plan) {
	w := e.stderr
	attempts := max(len(p.Calls), 1)
	fmt.Fprintf(w, "luft: plan by %s (%d attempt%s, dry run: %d agent calls)\n", e.errLine(p.Planner), attempts, plural(attempts), p.Check.Calls)
	if p.Check.Reasons != "" {
		fmt.Fprintf(w, "  why: %s\n", e.errLine(p.Check.Reasons))
	}
	fmt.Fprintf(w, "  tools: %s\n", e.errLine(toolsLine(p.Check)))
	for i, ph := range p.Check.Phases {
		if ph.Description != "" {
			fmt.Fprintf(w, "  %d. %s — %s\n", i+1, e.errLine(ph.Label), e.errLine(ph.Description))
		} else {
			fmt.Fprintf(w, "  %d. %s\n", i+1, e.errLine(ph.Label))
		}
	}
	for _, warn := range p.Check.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", e.errLine(warn))
	}
}

// toolsLine says which tools the plan gives to how many of its agents, e.g.
// "read_file, list_dir, search_files (3 of 4 agents)"; why is in meta.reasoning.
func toolsLine(c planner.Check) string {
	given := c.Tools()
	if len(given) == 0 {
		return "none"
	}
	n := 0
	for _, u := range c.Uses {
		if len(u.Tools) > 0 {
			n++
		}
	}
	return fmt.Sprintf("%s (%d of %d agent%s)", strings.Join(given, ", "), n, len(c.Uses), plural(len(c.Uses)))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// planRecord is what the run journals of its plan.
func planRecord(p *planner.Plan, suffix string) *runtime.Plan {
	rec := &runtime.Plan{Task: p.Task, Planner: p.Planner}
	rec.Calls = planCalls(p.Calls, suffix)
	return rec
}

func planCalls(calls []planner.Call, suffix string) []runtime.PlanCall {
	out := make([]runtime.PlanCall, 0, len(calls))
	for _, c := range calls {
		out = append(out, runtime.PlanCall{Key: c.Key + suffix, Prompt: c.Prompt, Reply: c.Reply, Reason: c.Reason, Usage: c.Usage, Cost: c.Cost})
	}
	return out
}

// fixable reports whether --auto-fix may repair how a run ended: the script itself failed.
func fixable(res runtime.Result) bool {
	if res.Status != runtime.StatusFailed {
		return false
	}
	k := lua.ErrorKindOf(res.Err)
	return k == lua.KindRuntime || k == lua.KindInvalid
}

// failingLine is the line number of a script error's file:line, 0 when it has none.
func failingLine(err error) int {
	var se *lua.ScriptError
	if !errors.As(err, &se) {
		return 0
	}
	i := strings.LastIndexByte(se.Where, ':')
	if i < 0 {
		return 0
	}
	n, _ := strconv.Atoi(se.Where[i+1:])
	return n
}

// autoFix asks the planner for a fixed script and continues the same run with it: the
// fixed script is pinned as the run's script (and saved as autofix-N.lua in the run's
// folder), and the run resumes, so calls whose keys and inputs are unchanged replay from
// the journal; the journal is dropped only from the first call the fix changed.
func autoFix(ctx context.Context, e *env, f *runFlags, svc *runtime.Service, pl *planner.Planner,
	res runtime.Result, src []byte, round int) (*runtime.Run, []byte, error) {
	chatty := !f.quiet && !f.json
	if chatty {
		fmt.Fprintf(e.stderr, "luft: auto-fix %d/%d: asking %s to repair: %s\n", round, maxFixes, pl.Name(), e.errText(res.Err.Error()))
	}
	fix, err := pl.Fix(ctx, planner.Failure{Script: src, Error: res.Err.Error(), Line: failingLine(res.Err)})
	if err != nil {
		return nil, nil, err
	}
	if err := svc.JournalPlan(ctx, res.RunID, planCalls(fix.Calls, fmt.Sprintf("@%d", round))); err != nil {
		return nil, nil, err
	}
	if dir := svc.RunDir(res.RunID); dir != "" {
		path := filepath.Join(dir, fmt.Sprintf("autofix-%d.lua", round))
		if err := os.WriteFile(path, fix.Script, 0o644); err != nil {
			return nil, nil, fmt.Errorf("auto-fix: save %s: %w", path, err)
		}
		if chatty {
			fmt.Fprintf(e.stderr, "luft: auto-fix %d: fixed script saved to %s; continuing run %s\n", round, path, res.RunID)
		}
	}
	run, err := svc.Resume(ctx, runtime.ResumeSpec{Run: res.RunID, Source: fix.Script, AllowChangedScript: true, RerunFromDivergence: true})
	if err != nil {
		return nil, nil, err
	}
	return run, fix.Script, nil
}

// liveRun is the run (and its renderer) a signal applies to; --auto-fix replaces both.
type liveRun struct {
	mu  sync.Mutex
	r   *renderer
	run *runtime.Run
}

func (l *liveRun) set(r *renderer, run *runtime.Run) {
	l.mu.Lock()
	l.r, l.run = r, run
	l.mu.Unlock()
}

func (l *liveRun) interrupt(n int) {
	l.mu.Lock()
	r, run := l.r, l.run
	l.mu.Unlock()
	r.interrupt(n, run)
}

func newGenerateCmd(e *env, g *globalFlags) *cobra.Command {
	f := &runFlags{}
	var withMock bool
	cmd := &cobra.Command{
		Use:   `generate "TASK" [-o FILE] [--with-mock]`,
		Short: "Plan a workflow from a task in words and write it without running it",
		Long: `Plan a workflow from a task in words, validate it (it compiles, has main and a valid
meta, and a dry run on the mock backend calls report within caps) and write it to
stdout or -o FILE. With --with-mock, also write FILE.mock.json (-o review.lua writes
review.lua.mock.json): a --mock-file for the mockfile backend covering the script's agent
names, each with a reply a report can show. On the mock backend the planner is
the offline template planner; --planner-model or --backend plans with a model.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.task = strings.Join(args, " ")
			if withMock && f.output == "" {
				return usageErr("--with-mock writes FILE.mock.json next to -o FILE; add -o FILE")
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if f.output != "" {
				if st, err := os.Stat(filepath.Dir(f.output)); err != nil || !st.IsDir() {
					return usageErr("-o %s: the folder %s does not exist", f.output, filepath.Dir(f.output))
				}
			}
			cfg, err := loadConfig(e, g)
			if err != nil {
				return err
			}
			bset, err := openBackends(e, g, cfg, "")
			if err != nil {
				return err
			}
			defer bset.Close()
			// The plan call belongs to no run: the service only schedules it, and its store
			// is a throw-away one, so generating leaves no state behind.
			tmp, err := os.MkdirTemp("", "luft-generate-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			st, err := storage.Open(ctx, tmp)
			if err != nil {
				return err
			}
			defer st.Close()
			svc, err := newService(e, st, "", bset.Registry, schedulerConfig(cfg, 8, false))
			if err != nil {
				return err
			}
			pl, err := newPlanner(svc, bset.Registry, cfg, f)
			if err != nil {
				return err
			}
			plan, err := planTask(ctx, e, f, pl, "")
			if err != nil {
				return err
			}
			if f.output == "" {
				// A planned script is model text: exact through a pipe, harmless on a terminal.
				_, err := io.WriteString(e.stdout, e.outText(string(plan.Script)))
				return err
			}
			if err := os.WriteFile(f.output, plan.Script, 0o644); err != nil {
				return fmt.Errorf("generate: write %s: %w", f.output, err)
			}
			fmt.Fprintf(e.stderr, "luft: wrote %s (run it with luft run --workflow %s)\n", f.output, f.output)
			if withMock {
				mock := f.output + ".mock.json"
				if err := os.WriteFile(mock, planner.MockFile(plan.Check, filepath.Base(mock)), 0o644); err != nil {
					return fmt.Errorf("generate: write %s: %w", mock, err)
				}
				fmt.Fprintf(e.stderr, "luft: wrote %s covering %d agent names (luft run --workflow %s --mock-file %s)\n",
					mock, len(plan.Check.Agents), f.output, mock)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "", "write the script to FILE instead of stdout")
	fl.BoolVar(&withMock, "with-mock", false, "also write FILE.mock.json, a --mock-file covering the script's agent names")
	fl.StringVarP(&f.backend, "backend", "b", "", "backend to plan with (default: the configured default; mock plans offline)")
	fl.StringVar(&f.model, "model", "", "model to plan with when --planner-model is not given")
	fl.StringVar(&f.plannerModel, "planner-model", "", "model that plans (MODEL or BACKEND/MODEL); default planner_model of the config, else --model")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing but the script and errors")
	return cmd
}

func newSkillDumpCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "skill-dump DIR",
		Short: "Write the embedded workflow-authoring skill to DIR/luft-workflows/",
		Long: `Write luft's workflow-authoring skill (SKILL.md and its references) to
DIR/luft-workflows/, the layout coding agents read skills from (e.g. ~/.claude/skills).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root, err := skills.Dump(args[0])
			if err != nil {
				return usageErr("%v", err)
			}
			fmt.Fprintf(e.stdout, "wrote %s\n", root)
			return nil
		},
	}
}

// runScript is the script run id runs now: its pinned main workflow.
func runScript(ctx context.Context, svc *runtime.Service, id string) ([]byte, error) {
	src, err := svc.Script(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("auto-fix: %w", err)
	}
	return src, nil
}

// fixing is the state of a run that --auto-fix continues: the attempt being shown, how it
// ended, and the --log mirror following it.
type fixing struct {
	r       *renderer
	run     *runtime.Run
	res     runtime.Result
	stuck   bool
	logFile *os.File
	logDone func() error
}

// loop repairs and continues the run while it fails with a script error, at most maxFixes
// times. A fix the planner cannot make leaves the last attempt's result standing.
func (x *fixing) loop(ctx context.Context, e *env, g *globalFlags, f *runFlags, svc *runtime.Service, pl *planner.Planner, cur *liveRun) error {
	src, err := runScript(ctx, svc, x.run.ID)
	if err != nil {
		return err
	}
	for round := 1; round <= maxFixes && fixable(x.res) && !x.stuck; round++ {
		next, fixed, err := autoFix(ctx, e, f, svc, pl, x.res, src, round)
		if err != nil {
			fmt.Fprintf(e.stderr, "luft: auto-fix: %s\n", e.errText(err.Error()))
			return nil
		}
		src, x.run = fixed, next
		if x.logFile != nil {
			// The mirror of the failed attempt has ended with its run_done; the fixed
			// attempt's events follow in the same file.
			if err := x.logDone(); err != nil {
				return x.abort(err)
			}
			if x.logFile, err = os.OpenFile(f.logFile, os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
				return x.abort(fmt.Errorf("--log %s: %w", f.logFile, err))
			}
			x.logDone = mirrorLog(ctx, f, x.logFile, x.run)
		}
		x.r = newRenderer(e, g, f)
		x.r.lanes, x.r.runDone = laneSampler(svc), storedRunDone(svc, x.run.ID)
		cur.set(x.r, x.run)
		if x.stuck, err = x.r.view(ctx, x.run); err != nil {
			return x.abort(err)
		}
		x.res = x.run.Wait()
	}
	return nil
}

// abort stops the current attempt and fails the command with err.
func (x *fixing) abort(err error) error {
	x.run.Cancel()
	x.run.Wait()
	return &exitError{code: exitFailed, err: err}
}
