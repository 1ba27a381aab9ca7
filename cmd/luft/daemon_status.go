package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/spf13/cobra"
)

// newDaemonStatusCmd is `luft daemon status`.
func newDaemonStatusCmd(e *env, g *globalFlags, f *daemonFlags) *cobra.Command {
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
	return status
}

func printDaemonStatus(e *env, st daemon.StatusJSON) {
	addr := "-"
	if st.Addr != "" {
		addr = "http://" + st.Addr
	}
	fmt.Fprintf(e.stdout, "pid        %d\nsocket     %s\naddress    %s\nuptime     %s\nversion    %s\nruns       %d hosted, %d running\n",
		st.PID, st.Socket, addr, (time.Duration(st.UptimeSeconds) * time.Second).String(), st.Version, st.RunsHosted, st.RunsLive)
	if st.Node != "" {
		fmt.Fprintf(e.stdout, "node       %s\n", st.Node)
	}
	for _, n := range st.Nodes {
		addr := n.Address
		if addr == "" {
			addr = "-"
		}
		self := ""
		if n.Self {
			self = " (this daemon)"
		}
		fmt.Fprintf(e.stdout, "nodes      %s · %s · pid %d · heartbeat %s ago · %d runs owned%s\n",
			n.ID, addr, n.PID, (time.Duration(n.HeartbeatAgeSec*1000) * time.Millisecond).Round(100*time.Millisecond), n.RunsOwned, self)
	}
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
