package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/cmd/luft/internal/tui"
	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/spf13/cobra"
)

func newAttachCmd(e *env, g *globalFlags) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "attach RUN",
		Short: "Show the live view of a run another process hosts (q detaches; the run goes on)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkLevel(g.logLevel); err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			c, _ := daemon.Dial(ctx, stateDir(e, g)) // for the lanes; the run's events come from the store
			if c != nil {
				defer c.Close()
			}
			return attach(ctx, e, g, f, a[0], c, true)
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "write events as JSON lines on stdout")
	cmd.Flags().BoolVarP(&f.quiet, "quiet", "q", false, "print nothing but the report and errors")
	cmd.Flags().BoolVar(&f.noTUI, "no-tui", false, "plain progress lines even on a terminal")
	return cmd
}

// attach shows a run's events from the store until it ends, then its summary and report,
// and exits as the run did. detachable: q or Ctrl-C leave the run going on; otherwise the
// first Ctrl-C (or q) cancels it through the daemon.
func attach(ctx context.Context, e *env, g *globalFlags, f *runFlags, ref string, c *daemon.Client, detachable bool) error {
	st, err := openStore(ctx, e, g, true)
	if err != nil {
		return err
	}
	defer st.Close()
	svc, err := newService(e, st, stateDir(e, g), adapters.NewRegistry("mock"), scheduler.Config{})
	if err != nil {
		return err
	}
	info, err := svc.Status(ctx, ref)
	if err != nil {
		return runRefError(err)
	}
	id := info.ID
	vctx, stopView := context.WithCancel(ctx)
	defer stopView()
	src, errc, err := svc.Events(vctx, id, runtime.EventsOptions{Follow: true, Attempt: info.Attempt})
	if err != nil {
		return err
	}
	r := newRenderer(e, g, f)
	if c != nil {
		r.lanes = daemonLanes(c)
		if e.stdinTTY != nil {
			r.approve = func(approvalID string, allow bool) error {
				return c.Approve(context.Background(), id, approvalID, allow)
			}
		}
	}
	var cancel func()
	if !detachable {
		cancel = func() { _ = c.Cancel(context.Background(), id) }
	}
	events := make(chan event.Event, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(events)
		for ev := range src {
			if r.mode == modeQuiet {
				continue
			}
			select {
			case events <- ev:
			case <-vctx.Done():
				return
			}
		}
	}()
	sigs := make(chan os.Signal, 2)
	stopSigs := e.notify(sigs)
	defer stopSigs()
	go func() {
		n := 0
		for {
			select {
			case <-sigs:
				n++
				switch {
				case detachable:
					stopView()
				case n == 1:
					cancel()
				default:
					e.exit(exitHard)
				}
			case <-vctx.Done():
				return
			}
		}
	}()
	if err := r.show(vctx, cancel, done, events); err != nil {
		return &exitError{code: exitFailed, err: err}
	}
	stopView()
	if err := <-errc; err != nil {
		return err
	}
	now, err := svc.Status(context.Background(), id)
	if err != nil {
		return err
	}
	switch runtime.Status(now.Status) {
	case runtime.StatusRunning:
		fmt.Fprintf(e.stderr, "luft: detached from run %s; it goes on (luft attach %s shows it again, luft cancel %s stops it)\n", id, short(id), short(id))
		return nil
	case runtime.StatusInterrupted:
		return &exitError{code: exitResumable, err: fmt.Errorf("run %s: the process hosting it is gone; it resumes when the daemon starts again (luft daemon start), or with luft run --resume %s", id, short(id))}
	}
	res := runtime.Result{RunID: id, Status: runtime.Status(now.Status), Usage: agent.Usage(now.Usage), Cost: now.Cost,
		Agents: now.Agents, Attempt: now.Attempt, ResumeAfter: now.ResumeAfter}
	if now.Error != "" {
		res.Err = errors.New(now.Error)
	}
	if !now.FinishedAt.IsZero() {
		res.Elapsed = now.FinishedAt.Sub(now.CreatedAt)
	}
	if now.HasReport && json.Unmarshal(now.Report, &res.Report) == nil {
		res.HasReport = true
	}
	return r.finish(res)
}

// daemonLanes samples the daemon's scheduler lanes for the view.
func daemonLanes(c *daemon.Client) func() []tui.Lane {
	return func() []tui.Lane {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := c.Status(ctx)
		if err != nil {
			return nil
		}
		out := make([]tui.Lane, 0, len(st.Lanes))
		for _, l := range st.Lanes {
			out = append(out, tui.Lane{Name: l.Lane, Running: l.Running, QueuedInteractive: l.QueuedInteractive,
				QueuedBatch: l.QueuedBatch, TokensLeft: l.TokensLeft, TokenLimit: l.TokenLimit,
				RequestsLeft: l.RequestsLeft, RequestLimit: l.RequestLimit, Admitted: l.Admitted, Waits: l.Waits,
				RateLimited: l.RateLimited, Retries: l.Retries, Suspended: l.Suspended, PausedUntil: l.PausedUntil,
				Circuit: l.Circuit})
		}
		return out
	}
}
