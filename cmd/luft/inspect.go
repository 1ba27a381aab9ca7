package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/cmd/luft/internal/tui"
	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
)

// withService opens the state dir read-mostly and hands a Service to fn.
func withService(cmd *cobra.Command, e *env, g *globalFlags, fn func(ctx context.Context, svc *runtime.Service) error) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	// A broken config stops every command that reads it, these too: a mistake found
	// only by the next run is found late.
	if _, err := loadConfig(e, g); err != nil {
		return err
	}
	st, err := openStore(ctx, e, g, true)
	if err != nil {
		return err
	}
	defer st.Close()
	svc, err := newService(e, st, stateDir(e, g), adapters.NewRegistry("mock"), scheduler.Config{})
	if err != nil {
		return err
	}
	return fn(ctx, svc)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// runJSON is the JSON form of a run for list and status: the one shape of a run every
// door answers with (door.Run), so it says what the daemon API and the MCP tools say.
type runJSON = door.Run

// phaseJSON is one phase in `luft phases --json`, whose "actual" list keeps its own
// format (the phase's id under phase_id only).
type phaseJSON struct {
	ID          int    `json:"phase_id"`
	Label       string `json:"label"`
	Description string `json:"description,omitempty"`
	Planned     int    `json:"planned"`
	Status      string `json:"status"`
	OK          int    `json:"ok"`
	Failed      int    `json:"failed"`
	Cancelled   int    `json:"cancelled"`
}

// toJSON is the JSON form of a run; its resume hint carries --state-dir when one was
// given, so following it finds the run.
func toJSON(r storage.Run, stale bool, phases []storage.Phase, stateDir string, now time.Time) runJSON {
	j := door.NewRun(r).WithReport(r).WaitingAt(r, now)
	if len(r.Args) > 0 {
		j.Args = r.Args
	}
	j.ScriptHash = r.ScriptHash
	if r.Resumable() && (r.Status != storage.StatusRunning || stale) && !runtime.PlanFailed(r) {
		j.ResumeWith = tui.ResumeCommand(r.ID, stateDir)
	}
	j.Phases = door.NewPhases(phases)
	return j
}

// phasesJSON are a run's phases as `luft phases` shows them.
func phasesJSON(phases []storage.Phase) []phaseJSON {
	var out []phaseJSON
	for _, p := range phases {
		out = append(out, phaseJSON{ID: p.ID, Label: p.Label, Description: p.Description, Planned: p.Planned,
			Status: p.Status, OK: p.OK, Failed: p.Failed, Cancelled: p.Cancelled})
	}
	return out
}

func newListCmd(e *env, g *globalFlags) *cobra.Command {
	var status string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch status {
			case "", storage.StatusRunning, string(runtime.StatusAwaitingApproval), string(runtime.StatusIdle), storage.StatusInterrupted, storage.StatusCompleted, storage.StatusFailed, storage.StatusCancelled, storage.StatusSuspended:
			default:
				return usageErr("invalid --status %q: use running, awaiting_approval, idle, interrupted, completed, failed, cancelled or suspended", status)
			}
			return withService(cmd, e, g, func(ctx context.Context, svc *runtime.Service) error {
				runs, err := svc.List(ctx, storage.ListOptions{Status: status, Limit: limit})
				if err != nil {
					return err
				}
				if asJSON {
					out := make([]runJSON, 0, len(runs))
					for _, r := range runs {
						out = append(out, toJSON(r, false, nil, g.stateDir, e.now()))
					}
					return writeJSON(e.stdout, out)
				}
				if len(runs) == 0 {
					fmt.Fprintln(e.stderr, "no runs")
					return nil
				}
				w := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
				// The owner node shows once a daemon's runs are listed (held under a lease).
				nodes := slices.ContainsFunc(runs, func(r storage.Run) bool { return !r.LeaseUntil.IsZero() })
				if nodes {
					fmt.Fprintln(w, "RUN\tSTATUS\tSTARTED\tAGENTS\tTOKENS\tNODE\tWORKFLOW")
				} else {
					fmt.Fprintln(w, "RUN\tSTATUS\tSTARTED\tAGENTS\tTOKENS\tWORKFLOW")
				}
				for _, r := range runs {
					node := ""
					if nodes {
						node = cmp.Or(e.outLine(r.Node), "-") + "\t"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s%s\n", r.ID, r.Status, r.CreatedAt.Local().Format("2006-01-02 15:04:05"),
						r.Agents.Finished(), r.Usage.Input+r.Usage.Output, node, e.outLine(r.Workflow))
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only runs in this status (interrupted: stored as running, but its process is gone)")
	cmd.Flags().IntVar(&limit, "limit", 20, "at most this many runs (0 = all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newStatusCmd(e *env, g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status RUN",
		Short: "Show one run: status, phases, agents, tokens, cost, report, error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withService(cmd, e, g, func(ctx context.Context, svc *runtime.Service) error {
				info, err := svc.Status(ctx, a[0])
				if err != nil {
					return runRefError(err)
				}
				j := toJSON(info.Run, info.Stale, info.Phases, g.stateDir, e.now())
				j.Pending = door.NewApprovals(info.Pending)
				if asJSON {
					return writeJSON(e.stdout, j)
				}
				status := j.Status
				switch {
				case j.Waiting != "":
					status += ": " + j.Waiting // a run no node may take over but one that serves its workspace
				case info.Stale:
					status += " (its process is gone)"
				}
				w := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
				fmt.Fprintf(w, "run\t%s\n", j.ID)
				fmt.Fprintf(w, "workflow\t%s\n", e.outLine(j.Workflow))
				fmt.Fprintf(w, "status\t%s\n", e.outLine(status))
				fmt.Fprintf(w, "attempt\t%d\n", j.Attempt)
				// Who drives it, while it runs (the JSON names the last owner of any run).
				if owner := runtime.Owner(info.Run); owner != "" && runtime.Running(info.Status) {
					fmt.Fprintf(w, "node\t%s\n", e.outLine(owner))
				}
				if j.Workspace != "" {
					fmt.Fprintf(w, "workspace\t%s\n", e.outLine(j.Workspace))
				}
				fmt.Fprintf(w, "started\t%s\n", j.CreatedAt.Local().Format(time.RFC3339))
				if j.FinishedAt != nil {
					fmt.Fprintf(w, "finished\t%s\n", j.FinishedAt.Local().Format(time.RFC3339))
				}
				fmt.Fprintf(w, "agents\t%s\n", j.Agents)
				fmt.Fprintf(w, "tokens\t%d in / %d out\n", j.Usage.Input, j.Usage.Output)
				if j.Cost > 0 {
					fmt.Fprintf(w, "cost\t$%.4f\n", j.Cost)
				}
				if j.Error != "" {
					fmt.Fprintf(w, "error\t%s\n", e.outText(j.Error))
				}
				if j.ResumeWith != "" {
					fmt.Fprintf(w, "resume\t%s\n", j.ResumeWith)
				}
				for _, a := range j.Pending {
					fmt.Fprintf(w, "approval\t%s: %s %s (call %s) waits for an answer\n", a.ID, e.outLine(a.Tool), e.outLine(clipArgs(a.Arguments)), e.outLine(a.CallKey))
				}
				if err := w.Flush(); err != nil {
					return err
				}
				// The board of the live view, folded from the stored events: the phases,
				// what runs, what waits and why, the latest log lines. It is the one
				// place the phases are shown (luft phases has the table).
				evs, errc, err := svc.Events(ctx, info.Run.ID, runtime.EventsOptions{})
				if err != nil {
					return err
				}
				st := tui.NewState(tui.StateOptions{})
				for ev := range evs {
					st.Apply(ev)
				}
				if err := <-errc; err != nil {
					return err
				}
				if info.Stale {
					st.Status = storage.StatusInterrupted // its events stop short of run_done
				} else if info.Status == string(runtime.StatusIdle) {
					st.Status = info.Status // a proxy conversation between turns
				}
				fmt.Fprintf(e.stdout, "\n%s\n", tui.StatusView(st, e.now(), e.width(), styles(e, g), time.Local))
				if report, ok := j.Report.(json.RawMessage); ok && len(report) > 0 {
					var v any
					if json.Unmarshal(report, &v) == nil {
						if text, err := reportText(v); err == nil {
							fmt.Fprintf(e.stdout, "\nreport:\n%s", e.outText(text))
						}
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printPhases prints the phases table; a CANCELLED column is added when a cancel cut
// calls off in some phase.
func printPhases(e *env, phases []phaseJSON) {
	cancelled := slices.ContainsFunc(phases, func(p phaseJSON) bool { return p.Cancelled > 0 })
	tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
	head := "  #\tPHASE\tSTATUS\tPLANNED\tOK\tFAILED"
	if cancelled {
		head += "\tCANCELLED"
	}
	fmt.Fprintln(tw, head)
	for _, p := range phases {
		line := fmt.Sprintf("  %d\t%s\t%s\t%d\t%d\t%d", p.ID, e.outLine(p.Label), p.Status, p.Planned, p.OK, p.Failed)
		if cancelled {
			line += fmt.Sprintf("\t%d", p.Cancelled)
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
}

func newPhasesCmd(e *env, g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "phases RUN",
		Short: "Planned phases (from meta) against the phases the run went through",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withService(cmd, e, g, func(ctx context.Context, svc *runtime.Service) error {
				info, err := svc.Status(ctx, a[0])
				if err != nil {
					return runRefError(err)
				}
				// The plan is the last plan event of the run.
				evs, errc, err := svc.Events(ctx, info.ID, runtime.EventsOptions{Types: []string{event.Plan}})
				if err != nil {
					return err
				}
				var planned []any
				for ev := range evs {
					if p, ok := ev.Data["phases"].([]any); ok {
						planned = p
					}
				}
				if err := <-errc; err != nil {
					return err
				}
				actual := phasesJSON(info.Phases)
				if asJSON {
					if planned == nil {
						planned = []any{}
					}
					if actual == nil {
						actual = []phaseJSON{}
					}
					return writeJSON(e.stdout, map[string]any{"run_id": info.ID, "planned": planned, "actual": actual})
				}
				fmt.Fprintln(e.stdout, "planned:")
				if len(planned) == 0 {
					fmt.Fprintln(e.stdout, "  (the script has no meta.phases)")
				}
				for i, p := range planned {
					m, _ := p.(map[string]any)
					label, _ := m["label"].(string)
					desc, _ := m["description"].(string)
					if desc == "" {
						desc, _ = m["detail"].(string) // Luft's meta.phases[].detail
					}
					seen := "not started"
					for _, a := range actual {
						if a.Label == label {
							seen = a.Status
						}
					}
					fmt.Fprintf(e.stdout, "  %d. %s — %s [%s]\n", i+1, e.outLine(label), e.outLine(desc), seen)
				}
				fmt.Fprintln(e.stdout, "actual:")
				if len(actual) == 0 {
					fmt.Fprintln(e.stdout, "  (no phase started)")
					return nil
				}
				printPhases(e, actual)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newLogsCmd(e *env, g *globalFlags) *cobra.Command {
	var asJSON, follow bool
	var types []string
	var level string
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Show a run's events (--follow to keep streaming while it runs)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkLevel(level); err != nil {
				return err
			}
			return withService(cmd, e, g, func(ctx context.Context, svc *runtime.Service) error {
				board := !asJSON && follow && liveTerminal(e, false) && len(types) == 0
				opts := runtime.EventsOptions{Types: types, Follow: follow}
				if board {
					// The board shows the latest attempt: an earlier one's run_done would end it.
					info, err := svc.Status(ctx, a[0])
					if err != nil {
						return runRefError(err)
					}
					opts.Attempt = info.Run.Attempt
				}
				evs, errc, err := svc.Events(ctx, a[0], opts)
				if err != nil {
					return runRefError(err)
				}
				if board {
					// The same board as `luft run`, as a viewer: q closes it, the run goes on.
					live := tui.NewLive(tui.LiveOptions{
						Options: tui.Options{Now: e.now, Styles: styles(e, g), Location: time.Local, State: tui.StateOptions{LogLevel: level}},
						Out:     e.stderr, In: e.stdinTTY,
					})
					if _, err := live.Run(ctx, evs); err != nil {
						return err
					}
					return nil // q closed the viewer or the run ended; the stream stops with ctx
				}
				enc := json.NewEncoder(e.stdout)
				enc.SetEscapeHTML(false)
				lines := newPrettyLines(level)
				for ev := range evs {
					if asJSON {
						if err := enc.Encode(ev); err != nil {
							return err
						}
						continue
					}
					if line, ok := lines.line(ev); ok { // not ok: a log line below --level
						fmt.Fprint(e.stdout, line)
					}
				}
				if err := <-errc; err != nil {
					return err
				}
				// The events of a run whose process died stop short of run_done: say so.
				if info, err := svc.Status(ctx, a[0]); err == nil && info.Stale {
					fmt.Fprintf(e.stderr, "luft: run %s is interrupted: its process is gone before it ended (resume with: %s)\n",
						info.ID, tui.ResumeCommand(info.ID, g.stateDir))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print events as JSON lines")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events until the run ends")
	cmd.Flags().StringSliceVar(&types, "type", nil, "only events of these types (repeat or comma-separate)")
	cmd.Flags().StringVar(&level, "level", "trace", "lowest log level shown in plain output")
	return cmd
}

func newCancelCmd(e *env, g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a running run (also one driven by another luft process)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return withService(cmd, e, g, func(ctx context.Context, svc *runtime.Service) error {
				r, err := svc.Cancel(ctx, a[0])
				if err != nil {
					if r.ID == "" {
						return runRefError(err)
					}
					return usageErr("%v", err)
				}
				if asJSON {
					return writeJSON(e.stdout, map[string]any{"run_id": r.ID, "result": "cancel_requested",
						"resume_with": tui.ResumeCommand(r.ID, g.stateDir)})
				}
				fmt.Fprintf(e.stdout, "cancel requested for run %s (resume later with: %s)\n", r.ID, tui.ResumeCommand(r.ID, g.stateDir))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// clipArgs shows a tool call's arguments on one line of at most 200 bytes.
func clipArgs(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= 200 {
		return s
	}
	n := 200
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
