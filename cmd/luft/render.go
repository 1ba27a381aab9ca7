package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/cmd/luft/internal/tui"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
)

// renderer shows a run's events on the way the CLI was asked to: JSON lines on stdout
// with --json; nothing but errors with --quiet; otherwise the live board on a terminal
// (tui.Live) or one plain line per state change with a periodic status line (tui.Plain),
// and a summary at the end (tui.Summary).
type renderer struct {
	e     *env
	g     *globalFlags
	f     *runFlags
	mode  renderMode
	sty   tui.Styles
	enc   *json.Encoder
	plain *tui.Plain
	state *tui.State // the run as shown, for the summary

	mu   sync.Mutex
	live *tui.Live // while the board is up

	// lanes samples the admission scheduler's lanes (nil: none to show).
	lanes func() []tui.Lane
}

// laneSampler reads the scheduler's counters for the view: per lane, the queue by class,
// what runs, the budgets left, waits and 429s.
func laneSampler(svc *runtime.Service) func() []tui.Lane {
	return func() []tui.Lane {
		stats, ok := svc.SchedulerStats()
		if !ok {
			return nil
		}
		out := make([]tui.Lane, 0, len(stats.Lanes))
		for _, l := range stats.Lanes {
			out = append(out, tui.Lane{Name: l.Lane, Running: l.Running, QueuedInteractive: l.QueuedInteractive,
				QueuedBatch: l.QueuedBatch, TokensLeft: l.TokensLeft, TokenLimit: l.TokenLimit,
				RequestsLeft: l.RequestsLeft, RequestLimit: l.RequestLimit, Admitted: l.Admitted, Waits: l.Waits,
				RateLimited: l.RateLimited, Retries: l.Retries, Suspended: l.Suspended, PausedUntil: l.PausedUntil,
				Circuit: l.Circuit})
		}
		return out
	}
}

// sampleLanes is r.lanes(), or nil without a sampler.
func (r *renderer) sampleLanes() []tui.Lane {
	if r.lanes == nil {
		return nil
	}
	return r.lanes()
}

// lanesEvery is how often the board samples the scheduler.
const lanesEvery = time.Second

type renderMode int

const (
	modeJSON renderMode = iota
	modeQuiet
	modePlain
	modeLive
)

// statusEvery is how often plain mode prints the one-line status of a running run.
const statusEvery = 10 * time.Second

func newRenderer(e *env, g *globalFlags, f *runFlags) *renderer {
	r := &renderer{e: e, g: g, f: f, sty: styles(e, g)}
	switch {
	case f.json:
		r.mode = modeJSON
		r.enc = json.NewEncoder(e.stdout)
		r.enc.SetEscapeHTML(false)
	case f.quiet:
		r.mode = modeQuiet
	case liveTerminal(e, f.noTUI):
		r.mode = modeLive
	default:
		r.mode = modePlain
	}
	return r
}

// liveTerminal reports whether the live board may be drawn: stderr is a terminal that is
// not dumb, and neither CI nor --no-tui asks for plain lines.
func liveTerminal(e *env, noTUI bool) bool {
	return e.stderrTTY && !noTUI && e.getenv("TERM") != "dumb" && e.getenv("CI") == ""
}

// styles are the colours of human output: none with --no-color, NO_COLOR or a pipe.
func styles(e *env, g *globalFlags) tui.Styles {
	if g.noColor || e.getenv("NO_COLOR") != "" || !e.stderrTTY {
		return tui.NoColor()
	}
	return tui.ColorFor(e.stderr, e.getenv)
}

// interrupt handles the n-th Ctrl-C (or SIGTERM) of a run: the live board counts them
// itself (the first stops the run, the second quits); otherwise the first cancels the
// run and the second exits at once.
func (r *renderer) interrupt(n int, run *runtime.Run) {
	r.mu.Lock()
	live := r.live
	r.mu.Unlock()
	if live != nil {
		live.Interrupt()
		return
	}
	if n == 1 {
		if r.mode == modePlain {
			fmt.Fprintln(r.e.stderr, "luft: stopping (press Ctrl-C again to quit at once)")
		}
		run.Cancel()
		return
	}
	r.e.exit(exitHard)
}

// show renders the run's events until they end.
func (r *renderer) show(ctx context.Context, run *runtime.Run, events <-chan event.Event) error {
	switch r.mode {
	case modeLive:
		live := tui.NewLive(tui.LiveOptions{
			Options: tui.Options{Now: r.e.now, Cancel: run.Cancel, Styles: r.sty, Location: time.Local,
				State: tui.StateOptions{LogLevel: r.g.logLevel}},
			Out: r.e.stderr, In: r.e.stdinTTY,
		})
		r.mu.Lock()
		r.live = live
		r.mu.Unlock()
		sampling := make(chan struct{})
		go func() {
			t := time.NewTicker(lanesEvery)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					live.SetLanes(r.sampleLanes())
				case <-sampling:
					return
				}
			}
		}()
		m, err := live.Run(ctx, events)
		close(sampling)
		r.mu.Lock()
		r.live = nil
		r.mu.Unlock()
		if m.HardExited() {
			r.e.exit(exitHard)
		}
		r.state = m.State()
		if err == nil {
			return nil
		}
		// The terminal could not be driven: go on in plain lines.
		r.mode = modePlain
		fmt.Fprintf(r.e.stderr, "luft: live view unavailable (%v); showing plain progress\n", err)
	case modeJSON:
		for ev := range events {
			if err := r.enc.Encode(ev); err != nil {
				return fmt.Errorf("write event: %w", err)
			}
		}
		return nil
	case modeQuiet:
		for range events {
		}
		return nil
	}
	r.plain = tui.NewPlain(r.e.stderr, tui.PlainOptions{Level: r.g.logLevel, Styles: r.sty, Location: time.Local})
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				r.state = r.plain.State()
				return nil
			}
			if err := r.plain.Event(ev); err != nil {
				return fmt.Errorf("write progress: %w", err)
			}
		case <-tick.C:
			if st := r.plain.State(); st.Status == "running" {
				r.plain.SetLanes(r.sampleLanes())
				if err := r.plain.Status(r.e.now()); err != nil {
					return fmt.Errorf("write progress: %w", err)
				}
			}
		}
	}
}

// finish prints the summary and the report and returns the run's exit error.
func (r *renderer) finish(res runtime.Result) error {
	if r.mode == modePlain || r.mode == modeLive {
		st := r.state
		if st == nil {
			st = tui.NewState(tui.StateOptions{})
		}
		if !st.Done() {
			// The events ended before run_done (the view stopped early): say how the run
			// ended from its result.
			st.Apply(runDoneEvent(res, r.e.now()))
		}
		opts := tui.SummaryOptions{ReportPath: r.f.output, StateDir: r.g.stateDir, Now: r.e.now(), Styles: r.sty,
			Lanes: r.sampleLanes()}
		if lua.ErrorKindOf(res.Err) == lua.KindDivergence {
			opts.Resume = tui.ResumeCommand(res.RunID, r.g.stateDir) + " --allow-changed-script --rerun-from-divergence"
		}
		opts.NoResume = res.Status == runtime.StatusFailed && noResume(res.Err)
		fmt.Fprintln(r.e.stderr, tui.Summary(st, opts))
	}
	if res.Status == runtime.StatusCompleted && res.HasReport {
		text, err := reportText(res.Report)
		if err != nil {
			return &exitError{code: exitFailed, err: err}
		}
		// stdout first: a report file that cannot be written must not lose the report.
		if !r.f.json {
			fmt.Fprint(r.e.stdout, text)
		}
		if r.f.output != "" {
			if err := os.WriteFile(r.f.output, []byte(text), 0o644); err != nil {
				return &exitError{code: exitFailed, err: fmt.Errorf("write report to %s: %w", r.f.output, err)}
			}
		}
	}
	if err := errorExit(res); err != nil {
		if r.mode == modeQuiet || r.mode == modeJSON {
			// Errors are still shown in quiet and JSON modes.
			fmt.Fprintf(r.e.stderr, "luft: %s\n", statusMessage(res, r.g.stateDir))
		}
		return err
	}
	return nil
}

// noResume reports whether a failed run's error is one a resume cannot get past (the
// script itself is broken).
func noResume(err error) bool {
	k := lua.ErrorKindOf(err)
	return k == lua.KindSyntax || k == lua.KindInvalid
}

// runDoneEvent is the run_done a result stands for.
func runDoneEvent(res runtime.Result, now time.Time) event.Event {
	d := map[string]any{"status": string(res.Status), "tokens": res.Usage.Total(), "cost": res.Cost,
		"elapsed_ms": res.Elapsed.Milliseconds()}
	if res.Err != nil {
		d["error"] = res.Err.Error()
	}
	ev := event.New(event.RunDone, d)
	ev.RunID, ev.TS = res.RunID, now
	return ev
}

func statusMessage(res runtime.Result, stateDir string) string {
	resume := "; resume with: " + tui.ResumeCommand(res.RunID, stateDir)
	switch res.Status {
	case runtime.StatusCancelled:
		return fmt.Sprintf("run %s cancelled%s", res.RunID, resume)
	case runtime.StatusSuspended:
		return fmt.Sprintf("run %s suspended: %v%s", res.RunID, res.Err, resume)
	}
	switch lua.ErrorKindOf(res.Err) {
	case lua.KindSyntax, lua.KindInvalid:
		return fmt.Sprintf("run %s failed: %v", res.RunID, res.Err)
	case lua.KindDivergence:
		return fmt.Sprintf("run %s failed: %v; to run from that call on: %s --allow-changed-script --rerun-from-divergence", res.RunID, res.Err, tui.ResumeCommand(res.RunID, stateDir))
	}
	return fmt.Sprintf("run %s failed: %v%s", res.RunID, res.Err, resume)
}

// reportText renders a report: a string, or an object's markdown field, raw; anything else
// as indented JSON. A trailing newline is added when missing.
func reportText(v any) (string, error) {
	text, ok := v.(string)
	if m, isMap := v.(map[string]any); isMap {
		text, ok = m["markdown"].(string)
	}
	if !ok {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return "", fmt.Errorf("render report: %w", err)
		}
		text = string(b)
	}
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text, nil
}
