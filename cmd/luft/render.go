package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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
	plain *tui.Plain
	state *tui.State // the run as shown, for the summary

	// With --json: the seq of the last event written, and whether it was run_done.
	lastSeq  int64
	wroteEnd bool
	// runDone reads the run's stored run_done after seq (set by runWorkflow), for a
	// --json stream the view stopped before its end.
	runDone func(since int64) (event.Event, bool)
	// abandoned is set when the view was stopped before the end of the run's events;
	// stuck when it did not even return then (it is blocked writing): finish then
	// touches nothing the view goroutine may still use.
	abandoned atomic.Bool
	stuck     bool
	// signalled is closed by the first Ctrl-C or SIGTERM.
	signalled chan struct{}
	sigOnce   sync.Once

	mu   sync.Mutex
	live *tui.Live // while the board is up

	// lanes samples the admission scheduler's lanes (nil: none to show).
	lanes func() []tui.Lane
	// approve answers a tool call the run waits on (nil: the live board asks nothing).
	approve func(approvalID string, allow bool) error
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
	r := &renderer{e: e, g: g, f: f, sty: styles(e, g), signalled: make(chan struct{})}
	switch {
	case f.json:
		r.mode = modeJSON
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

// interrupt handles the n-th Ctrl-C (or SIGTERM) of a run: the first cancels the run,
// the second exits at once. The live board is told too (it shows that the run stops, and
// restores the terminal before a hard exit), but it is never waited for: a board busy
// with a flood of events must not hold up either.
func (r *renderer) interrupt(n int, run *runtime.Run) {
	r.mu.Lock()
	live := r.live
	r.mu.Unlock()
	if n == 1 {
		r.sigOnce.Do(func() { close(r.signalled) })
		run.Cancel()
		if live != nil {
			go live.Interrupt()
		} else if r.mode == modePlain {
			// Written aside: stderr may be a pipe nobody reads, and this goroutine
			// must stay free for the second signal.
			go fmt.Fprintln(r.e.stderr, "luft: stopping (press Ctrl-C again to quit at once)")
		}
		return
	}
	if live != nil {
		// The board quits and restores the terminal, then show exits; this is the
		// backstop when it cannot.
		go live.Interrupt()
		time.AfterFunc(hardExitGrace, func() { r.e.exit(exitHard) })
		return
	}
	r.e.exit(exitHard)
}

// show renders the run's events until they end. cancel is what q on the live board does
// (nil: q only closes the view); done is closed when the run has ended.
func (r *renderer) show(ctx context.Context, cancel func(), done <-chan struct{}, events <-chan event.Event) error {
	switch r.mode {
	case modeLive:
		live := tui.NewLive(tui.LiveOptions{
			Options: tui.Options{Now: r.e.now, Cancel: cancel, Styles: r.sty, Location: time.Local,
				State: tui.StateOptions{LogLevel: r.g.logLevel}, Approve: r.approve},
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
		if err == nil || ctx.Err() != nil {
			return nil
		}
		// The terminal could not be driven: go on in plain lines (the summary is the
		// same in both modes).
		fmt.Fprintf(r.e.stderr, "luft: live view unavailable (%v); showing plain progress\n", err)
	case modeJSON:
		return r.showJSON(ctx, events)
	case modeQuiet:
		// Nothing is shown: the run's end is all there is to wait for, not a read of
		// every event it stored.
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	}
	// Lines are buffered and written whenever no event is waiting: a flood of events
	// makes a few large writes, not one per line.
	w := bufio.NewWriterSize(r.e.stderr, 64<<10)
	defer w.Flush()
	r.plain = tui.NewPlain(w, tui.PlainOptions{Level: r.g.logLevel, Styles: r.sty, Location: time.Local})
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			r.state = r.plain.State()
			return nil
		}
		select {
		case ev, ok := <-events:
			if !ok {
				r.state = r.plain.State()
				return nil
			}
			if err := r.plain.Event(ev); err != nil {
				return fmt.Errorf("write progress: %w", err)
			}
			if len(events) == 0 {
				if err := w.Flush(); err != nil {
					return fmt.Errorf("write progress: %w", err)
				}
			}
		case <-ctx.Done():
		case <-tick.C:
			if st := r.plain.State(); st.Status == "running" {
				r.plain.SetLanes(r.sampleLanes())
				if err := r.plain.Status(r.e.now()); err != nil {
					return fmt.Errorf("write progress: %w", err)
				}
				if err := w.Flush(); err != nil {
					return fmt.Errorf("write progress: %w", err)
				}
			}
		}
	}
}

// showJSON writes each event as a JSON line on stdout, buffered while more are waiting.
func (r *renderer) showJSON(ctx context.Context, events <-chan event.Event) error {
	w := bufio.NewWriterSize(r.e.stdout, 64<<10)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for {
		if ctx.Err() != nil {
			return w.Flush()
		}
		select {
		case ev, ok := <-events:
			if !ok {
				return w.Flush()
			}
			if err := enc.Encode(ev); err != nil {
				return fmt.Errorf("write event: %w", err)
			}
			r.lastSeq, r.wroteEnd = ev.Seq, ev.Type == event.RunDone
			if len(events) == 0 {
				if err := w.Flush(); err != nil {
					return fmt.Errorf("write event: %w", err)
				}
			}
		case <-ctx.Done():
		}
	}
}

// finish prints the summary and the report and returns the run's exit error.
func (r *renderer) finish(res runtime.Result) error {
	if r.abandoned.Load() {
		r.endAbandoned(res)
	}
	if r.mode == modePlain || r.mode == modeLive {
		var st *tui.State
		if !r.stuck {
			st = r.state
		}
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
		// The file gets the exact text, a terminal a harmless one.
		if !r.f.json {
			fmt.Fprint(r.e.stdout, r.e.outText(text))
		}
		if r.f.output != "" {
			if err := os.WriteFile(r.f.output, []byte(text), 0o644); err != nil {
				return &exitError{code: exitFailed, err: fmt.Errorf("write report to %s: %w", r.f.output, err)}
			}
		}
	}
	if err := errorExit(res); err != nil {
		if r.mode == modeQuiet || r.mode == modeJSON || ownershipLost(res) {
			// Errors are still shown in quiet and JSON modes; a lost run's fate in every
			// mode (the summary only says it stopped).
			fmt.Fprintf(r.e.stderr, "luft: %s\n", r.e.errText(statusMessage(res, r.g.stateDir)))
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
	if ownershipLost(res) {
		return lostMessage(res)
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
