package main

import (
	"context"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/spf13/cobra"
)

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
	cmd.AddCommand(newDaemonStartCmd(e, g, f), newDaemonStopCmd(e, g, f), newDaemonStatusCmd(e, g, f))
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

// short is the first 13 characters of a run id, as hints and listings print it.
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
