package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/spf13/cobra"
)

// envReadyFD names the file descriptor a detached daemon reports its readiness on (the
// write end of a pipe its starter waits on).
const envReadyFD = "LUFT_DAEMON_READY_FD"

// newDaemonStartCmd is `luft daemon start`: detached, or in this process with --foreground.
func newDaemonStartCmd(e *env, g *globalFlags, f *daemonFlags) *cobra.Command {
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
	return start
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
