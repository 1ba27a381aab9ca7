package main

import (
	"context"
	"fmt"

	"github.com/luft-run/luft/daemon"
	"github.com/spf13/cobra"
)

// newDaemonStopCmd is `luft daemon stop`: its runs are suspended and resume when it starts again.
func newDaemonStopCmd(e *env, g *globalFlags, f *daemonFlags) *cobra.Command {
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
	return stop
}
