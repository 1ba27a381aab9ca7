package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/luft-run/luft/cmd/luft/internal/tui"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/version"
	"github.com/luft-run/luft/runtime"
)

// Luft's command lines work unchanged (SPEC §1): -b, --version, --log FILE --log-format,
// -c/--confirm with --yes, --planner-model, a positional JSON object after --workflow F,
// and luft clear [--days N]. The pieces that are more than a flag alias live here.

// positionalArgs takes Luft's `luft run -w F '{"k": 1}'`: one positional JSON object
// after --workflow is the script's args. ok is false when args is not that form.
func positionalArgs(f *runFlags, args []string) (bool, error) {
	if f.workflow == "" || len(args) != 1 || !strings.HasPrefix(strings.TrimSpace(args[0]), "{") {
		return false, nil
	}
	if f.args != "" {
		return true, usageErr("args given twice: as --args and as the JSON after --workflow; keep one")
	}
	f.args = args[0]
	return true, nil
}

// bareWorkflowFile catches `luft run hello.lua`: a bare argument is a task in words, but
// one that names a .lua file was meant as the workflow.
func bareWorkflowFile(args []string) error {
	if len(args) == 0 || !strings.HasSuffix(args[0], ".lua") {
		return nil
	}
	rest := ""
	if len(args) > 1 {
		rest = " '" + strings.Join(args[1:], " ") + "'"
	}
	return usageErr("%s is a workflow file: run it with luft run -w %s%s (a bare argument is a task in words to plan)", args[0], args[0], rest)
}

// confirm shows the script and asks before running it (-c/--confirm). --yes answers for
// the user; without a terminal to ask on, the run is refused rather than started unasked.
func confirm(e *env, f *runFlags) error {
	if !f.yes && e.stdinTTY == nil {
		return usageErr("--confirm needs a terminal to ask on; add --yes to run without asking")
	}
	src, err := os.ReadFile(f.workflow)
	if err != nil {
		return usageErr("--confirm: read workflow %s: %v", f.workflow, err)
	}
	return confirmScript(e, f, f.workflow, src)
}

// confirmScript prints a script and asks whether to run it.
func confirmScript(e *env, f *runFlags, name string, src []byte) error {
	if !f.yes && e.stdinTTY == nil {
		return usageErr("--confirm needs a terminal to ask on; add --yes to run without asking")
	}
	fmt.Fprintf(e.stderr, "── %s ──\n%s", e.errLine(name), e.errText(string(src)))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		fmt.Fprintln(e.stderr)
	}
	fmt.Fprintf(e.stderr, "── end of %s ──\n", name)
	if f.yes {
		fmt.Fprintln(e.stderr, "Run this workflow? [y/N] yes (--yes)")
		return nil
	}
	fmt.Fprint(e.stderr, "Run this workflow? [y/N] ")
	line, _ := bufio.NewReader(e.stdinTTY).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("not confirmed: %s was not run", name)}
}

// logFormats are the formats of --log FILE.
var logFormats = []string{"jsonl", "pretty"}

// checkLogFlags refuses a --log-format luft does not write, and a --log file that cannot
// be created, before any agent runs.
func checkLogFlags(f *runFlags) error {
	if f.logFormat != "jsonl" && f.logFormat != "pretty" {
		return usageErr("invalid --log-format %q: use %s", f.logFormat, strings.Join(logFormats, " or "))
	}
	if f.logFile == "" {
		if f.logFormatSet {
			return usageErr("--log-format applies to --log FILE; add --log FILE")
		}
		return nil
	}
	if st, err := os.Stat(filepath.Dir(f.logFile)); err != nil || !st.IsDir() {
		return usageErr("--log %s: the folder %s does not exist", f.logFile, filepath.Dir(f.logFile))
	}
	return nil
}

// openLog creates --log FILE before the run starts, so a file that cannot be written is
// refused before any agent runs. nil without --log.
func openLog(f *runFlags) (*os.File, error) {
	if f.logFile == "" {
		return nil, nil
	}
	file, err := os.OpenFile(f.logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, usageErr("--log: %v", err)
	}
	return file, nil
}

// mirrorLog writes every event of this attempt to file (JSON lines, or the lines of `luft
// logs`) until the run ends, then closes it. The returned wait reports a write error.
func mirrorLog(ctx context.Context, f *runFlags, file *os.File, run *runtime.Run) (wait func() error) {
	if file == nil {
		return func() error { return nil }
	}
	events := run.SubscribeAttempt(ctx)
	done := make(chan error, 1)
	go func() {
		w := bufio.NewWriter(file)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		lines := newPrettyLines("trace")
		var werr error
		for ev := range events {
			if werr != nil {
				continue // keep draining so the run is never held up by this subscriber
			}
			if f.logFormat == "jsonl" {
				werr = enc.Encode(ev)
			} else if line, ok := lines.line(ev); ok {
				_, werr = io.WriteString(w, line)
			}
			if werr == nil && (ev.Type == event.RunDone || len(events) == 0) {
				werr = w.Flush()
			}
		}
		if werr == nil {
			werr = w.Flush()
		}
		if cerr := file.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			werr = fmt.Errorf("write --log %s: %w", f.logFile, werr)
		}
		done <- werr
	}()
	return func() error { return <-done }
}

// prettyLines renders events as `luft logs` prints them: seq, time, the plain line.
type prettyLines struct{ plain *tui.Plain }

func newPrettyLines(level string) prettyLines {
	return prettyLines{plain: tui.NewPlain(io.Discard, tui.PlainOptions{Level: level, Location: time.Local, ShowRunDone: true, Styles: tui.NoColor()})}
}

// line is the text of ev, or false for a log event below the level.
func (p prettyLines) line(ev event.Event) (string, bool) {
	line := p.plain.Line(ev)
	if line == "" {
		if ev.Type == event.Log {
			return "", false
		}
		line = "  " + ev.Type
	}
	return fmt.Sprintf("%5d %s %s\n", ev.Seq, ev.TS.Local().Format("15:04:05.000"), strings.TrimRight(line, "\n")), true
}

func newClearCmd(e *env, g *globalFlags) *cobra.Command {
	var days int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "clear [--days N]",
		Short: "Delete finished runs (completed, failed, cancelled), or only those older than N days",
		Long: `Delete finished runs — completed, failed or cancelled — from the state dir: their
events, journal and pinned files. With --days N, only runs that finished more than N days
ago. Running and suspended runs are kept. A deleted run cannot be resumed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days < 0 {
				return usageErr("invalid --days %d: must be 0 or more", days)
			}
			cutoff := e.now()
			if days > 0 {
				cutoff = cutoff.Add(-time.Duration(days) * 24 * time.Hour)
			}
			var ids []string
			err := withService(cmd, e, g, func(ctx context.Context, svc *runtime.Service) error {
				var warn, err error
				ids, warn, err = svc.DeleteFinished(ctx, cutoff)
				if warn != nil {
					fmt.Fprintf(e.stderr, "luft: warning: %v\n", warn)
				}
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				if ids == nil {
					ids = []string{}
				}
				return writeJSON(e.stdout, map[string]any{"deleted": ids})
			}
			what := "finished runs"
			if days == 1 {
				what = "runs finished more than a day ago"
			} else if days > 1 {
				what = fmt.Sprintf("runs finished more than %d days ago", days)
			}
			fmt.Fprintf(e.stdout, "deleted %d %s from %s\n", len(ids), what, stateDir(e, g))
			return nil
		},
	}
	cmd.Flags().IntVar(&days, "days", 0, "only runs that finished more than N days ago (0 = every finished run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the deleted run ids as JSON")
	return cmd
}

// versionLine is what `luft version` and `luft --version` print.
func versionLine() string {
	return version.Get().String() + "\n"
}
