package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/luft-run/luft/adapters"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/cmd/luft/internal/tui"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/spf13/cobra"
)

// envReadyFD names the file descriptor a detached daemon reports its readiness on (the
// write end of a pipe its starter waits on).
const envReadyFD = "LUFT_DAEMON_READY_FD"

// daemonLogMax is the size at which daemon.log is rotated to daemon.log.1.
const daemonLogMax = 10 << 20

// startWait bounds how long `luft daemon start` waits for the daemon to answer.
const startWait = 30 * time.Second

type daemonFlags struct {
	foreground bool
	listen     string
	grace      time.Duration // daemon start --grace
	stopGrace  time.Duration // daemon stop --grace
	json       bool
}

func newDaemonCmd(e *env, g *globalFlags) *cobra.Command {
	f := &daemonFlags{}
	cmd := &cobra.Command{
		Use:   "daemon start|stop|status",
		Short: "Host runs in a long-lived process: one scheduler for every run on the machine",
		Long: `The daemon hosts runs so they outlive the terminal that started them, and gives every
run of a state dir one admission scheduler. It serves a JSON API on the unix socket
<state-dir>/daemon.sock and, with --listen, on loopback HTTP with a bearer token
(LUFT_TOKEN, else a generated <state-dir>/daemon.token). It logs to <state-dir>/daemon.log.
While it runs, luft run hosts its run there; luft run --detach prints the run's id and
returns, luft attach RUN shows a hosted run.`,
	}
	start := &cobra.Command{
		Use:   "start",
		Short: "Start the daemon of the state dir (detached unless --foreground)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.grace <= 0 {
				return usageErr("invalid --grace %s: give a positive duration such as 10s (luft daemon stop --grace 0s suspends the runs at once)", f.grace)
			}
			if f.foreground {
				return serveDaemon(cmd.Context(), e, g, f)
			}
			return startDaemon(e, g, f)
		},
	}
	start.Flags().BoolVar(&f.foreground, "foreground", false, "run in this process until SIGTERM or Ctrl-C")
	start.Flags().StringVar(&f.listen, "listen", "", "also serve the API on this loopback HTTP address (e.g. 127.0.0.1:7878); any other address needs LUFT_TOKEN")
	start.Flags().DurationVar(&f.grace, "grace", 10*time.Second, "on shutdown, how long hosted runs may go on before they are suspended")
	stop := &cobra.Command{
		Use:   "stop",
		Short: "Stop the daemon gracefully (its runs are suspended and resume when it starts again)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := dialDaemon(e, g)
			if err != nil {
				return err
			}
			defer c.Close()
			var req daemon.ShutdownRequest
			if cmd.Flags().Changed("grace") {
				if f.stopGrace < 0 {
					return usageErr("invalid --grace %s: give 0 (suspend the runs at once) or more", f.stopGrace)
				}
				ms := f.stopGrace.Milliseconds()
				req.GraceMS = &ms
			}
			if err := c.Shutdown(context.Background(), req, startWait); err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, "luft daemon stopped")
			return nil
		},
	}
	stop.Flags().DurationVar(&f.stopGrace, "grace", 0, "how long hosted runs may go on before they are suspended (default: the grace of daemon start, 10s unless set; 0s = at once); stop waits that long plus 30s")
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the daemon's pid, address, uptime, version, runs and scheduler lanes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := dialDaemon(e, g)
			if err != nil {
				return err
			}
			defer c.Close()
			st, err := c.Status(context.Background())
			if err != nil {
				return err
			}
			if f.json {
				return writeJSON(e.stdout, st)
			}
			printDaemonStatus(e, st)
			if st.Addr != "" {
				// The link carries the token in its fragment, which browsers never send.
				tok := e.getenv("LUFT_TOKEN")
				if b, err := os.ReadFile(filepath.Join(stateDir(e, g), daemon.TokenFile)); tok == "" && err == nil {
					tok = strings.TrimSpace(string(b))
				}
				fmt.Fprintf(e.stdout, "dashboard  http://%s/#token=%s\n", st.Addr, tok)
			}
			return nil
		},
	}
	status.Flags().BoolVar(&f.json, "json", false, "print JSON")
	cmd.AddCommand(start, stop, status)
	return cmd
}

// dialDaemon connects to the state dir's daemon; none running is exit 1 with a hint.
func dialDaemon(e *env, g *globalFlags) (*daemon.Client, error) {
	c, err := daemon.Dial(context.Background(), stateDir(e, g))
	if err != nil {
		return nil, &exitError{code: exitFailed, err: err}
	}
	return c, nil
}

func printDaemonStatus(e *env, st daemon.StatusJSON) {
	addr := "-"
	if st.Addr != "" {
		addr = "http://" + st.Addr
	}
	fmt.Fprintf(e.stdout, "pid        %d\nsocket     %s\naddress    %s\nuptime     %s\nversion    %s\nruns       %d hosted, %d running\n",
		st.PID, st.Socket, addr, (time.Duration(st.UptimeSeconds) * time.Second).String(), st.Version, st.RunsHosted, st.RunsLive)
	if st.StorageProblem != "" {
		fmt.Fprintf(e.stdout, "storage    %s\n", st.StorageProblem)
	}
	if len(st.Lanes) == 0 {
		fmt.Fprintln(e.stdout, "lanes      none used yet")
	}
	for _, l := range st.Lanes {
		fmt.Fprintf(e.stdout, "lane       %s · %d running · %d+%d queued · %d admitted · %d waits · %d × 429 · circuit %s\n",
			l.Lane, l.Running, l.QueuedInteractive, l.QueuedBatch, l.Admitted, l.Waits, l.RateLimited, l.Circuit)
	}
}

// startDaemon starts `luft daemon start --foreground` detached from this terminal and
// waits until it answers on its socket (it says so on a pipe) or exits.
func startDaemon(e *env, g *globalFlags, f *daemonFlags) error {
	dir, err := filepath.Abs(stateDir(e, g))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("daemon start: create state dir %s: %w", dir, err)
	}
	if c, err := daemon.Dial(context.Background(), dir); err == nil {
		c.Close()
		info, _ := daemon.ReadInfo(dir)
		return &exitError{code: exitFailed, err: fmt.Errorf("%w: pid %d, socket %s (luft daemon stop ends it)", daemon.ErrAlreadyRunning, info.PID, info.Socket)}
	}
	info, err := spawnDaemon(e, g, f, dir)
	if err != nil {
		return err
	}
	addr := ""
	if info.Addr != "" {
		addr = ", http://" + info.Addr
	}
	fmt.Fprintf(e.stdout, "luft daemon started: pid %d, socket %s%s (log %s)\n", info.PID, info.Socket, addr, filepath.Join(dir, daemon.LogFile))
	return nil
}

// spawnDaemon starts `luft daemon start --foreground` for the state dir dir, detached,
// and waits until it answers on its socket (it says so on a pipe) or exits.
func spawnDaemon(e *env, g *globalFlags, f *daemonFlags, dir string) (daemon.Info, error) {
	self, err := os.Executable()
	if err != nil {
		return daemon.Info{}, fmt.Errorf("daemon start: find the luft executable: %w", err)
	}
	args := []string{"--state-dir", dir}
	if g.configPath != "" {
		cp, _ := filepath.Abs(g.configPath)
		args = append(args, "--config", cp)
	}
	args = append(args, "daemon", "start", "--foreground", "--grace", f.grace.String())
	if f.listen != "" {
		args = append(args, "--listen", f.listen)
	}
	logf, err := os.OpenFile(filepath.Join(dir, daemon.LogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return daemon.Info{}, fmt.Errorf("daemon start: open its log: %w", err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return daemon.Info{}, fmt.Errorf("daemon start: %w", err)
	}
	defer pr.Close()
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf // a panic's trace lands in the log too
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Env = append(os.Environ(), envReadyFD+"=3")
	detach(cmd)
	if err := cmd.Start(); err != nil {
		pw.Close()
		return daemon.Info{}, fmt.Errorf("daemon start: %w", err)
	}
	pw.Close()
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		ready <- line // empty when the daemon exited first
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	timer := time.NewTimer(startWait)
	defer timer.Stop()
	select {
	case line := <-ready:
		var info daemon.Info
		if json.Unmarshal([]byte(line), &info) != nil || info.PID == 0 {
			err := <-exited
			return daemon.Info{}, &exitError{code: exitFailed, err: fmt.Errorf("daemon start: it exited (%v): %s", err, lastLine(filepath.Join(dir, daemon.LogFile)))}
		}
		return info, nil
	case <-timer.C:
		return daemon.Info{}, &exitError{code: exitFailed, err: fmt.Errorf("daemon start: pid %d did not answer within %s (see %s)", cmd.Process.Pid, startWait, filepath.Join(dir, daemon.LogFile))}
	}
}

// lastLine is the last non-empty line of a file (the error a daemon logged as it exited).
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "see " + path
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimPrefix(lines[len(lines)-1], "luft: ")
}

// serveDaemon runs the daemon in this process until SIGTERM/SIGINT or a shutdown request.
func serveDaemon(ctx context.Context, e *env, g *globalFlags, f *daemonFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	h, err := openHost(ctx, e, g)
	if err != nil {
		return err
	}
	defer h.Close()
	dir, cfg, bset, st := h.dir, h.cfg, h.backends, h.store
	logw, err := daemon.OpenLog(filepath.Join(dir, daemon.LogFile), daemonLogMax)
	if err != nil {
		return err
	}
	defer logw.Close()
	gate := daemon.NewGate()
	var sched scheduler.Scheduler
	svc, err := newService(e, st, dir, bset.Registry, schedulerConfig(cfg, 8, false), eventLimits(cfg.Limits),
		func(o *runtime.Options) {
			// Hosted runs park a call that needs approval: an MCP client or POST
			// /api/runs/{id}/approve answers it.
			o.Caller, o.Scheduler, o.AskApprovals = "daemon", gate.Wrap(o.Scheduler), true
			sched = o.Scheduler
		})
	if err != nil {
		return err
	}
	var px *proxy.Proxy
	defer func() {
		if px != nil {
			px.Close()
		}
	}()
	v := buildVersion()
	d, err := daemon.New(daemon.Options{
		StateDir: dir, Service: svc, Store: st, Version: v, Listen: f.listen, Token: e.getenv("LUFT_TOKEN"),
		Grace: f.grace, Gate: gate, Log: logw, Now: e.now,
		NewSpec: hostedSpec(bset.Registry, cfg),
		Ready: func(info daemon.Info) {
			readyFD(e, info)
		},
		Mounts: func(d *daemon.Daemon) []daemon.Mount {
			mounts := mcpMounts(d, svc, v, logw, cfg)
			// The proxy door at /v1/: its turns go through the daemon's one scheduler.
			ups, def := proxy.FromConfig(cfg, e.getenv)
			p, err := proxy.New(proxy.Options{Upstreams: ups, Default: def, Scheduler: sched, Service: svc, Log: logw,
				Secret: d.Token(), IdleTTL: cfg.Proxy.IdleTimeout, MaxBody: cfg.Proxy.MaxBody})
			if err != nil {
				fmt.Fprintf(logw, "luft: proxy: %v\n", err)
				return mounts
			}
			px = p
			return append(mounts, daemon.Mount{Pattern: "/v1/", Handler: p, OpenOnLoopback: true})
		},
	})
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 1)
	stop := e.notify(sigs)
	defer stop()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := d.Run(sctx); err != nil {
		if errors.Is(err, daemon.ErrAlreadyRunning) {
			return &exitError{code: exitFailed, err: err}
		}
		return err
	}
	return nil
}

// hostedSpec turns a start request of a door (the API, MCP) into what the Service runs:
// the backend must exist, and the config's limits apply.
func hostedSpec(backends runtime.BackendSource, cfg config.Config) func(daemon.StartRequest) (runtime.Spec, error) {
	return func(req daemon.StartRequest) (runtime.Spec, error) {
		if _, err := backends.Get(req.Backend); err != nil {
			return runtime.Spec{}, fmt.Errorf("backend: %w", err)
		}
		s := req.Spec()
		if s.Class == "" {
			s.Class = agent.ClassInteractive
		}
		if s.Limits.MaxAgentCalls <= 0 {
			s.Limits.MaxAgentCalls = 10000
		}
		s.Limits.MaxLogBytes, s.Limits.MaxReportBytes = cfg.Limits.MaxLogBytes, cfg.Limits.MaxReportBytes
		return s, nil
	}
}

// readyFD tells the starter of a detached daemon that it answers: its info as one JSON
// line on the pipe named by LUFT_DAEMON_READY_FD.
func readyFD(e *env, info daemon.Info) {
	n, err := strconv.Atoi(e.getenv(envReadyFD))
	if err != nil || n < 3 {
		return
	}
	f := os.NewFile(uintptr(n), "ready")
	if f == nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(info)
	_, _ = f.Write(append(b, '\n'))
}

// daemonRun hosts `luft run` in the state dir's daemon when one runs (routed is false
// otherwise, and the run is hosted here). --detach prints the run's id and returns; an
// attached run shows the live view and ends as a local run would, Ctrl-C cancelling it.
func daemonRun(ctx context.Context, e *env, g *globalFlags, f *runFlags, args any, resumeRef string) (routed bool, err error) {
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

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

// cliCaller is who a CLI run counts as in the daemon's fair shares: the user.
func cliCaller(e *env) string {
	if u := e.getenv("USER"); u != "" {
		return "cli:" + u
	}
	return "cli"
}
