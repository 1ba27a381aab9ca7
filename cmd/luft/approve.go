package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
)

// newApproveCmd answers a tool call a run waits on ([tools] approval = "ask"): the answer
// is journaled, and the process that drives the run (the daemon, another luft) picks it
// up within a moment, as it does a cancel.
func newApproveCmd(e *env, g *globalFlags) *cobra.Command {
	var allow, deny, asJSON bool
	cmd := &cobra.Command{
		Use:   "approve RUN [APPROVAL_ID] (--allow | --deny)",
		Short: "Answer a tool call a run waits on (status awaiting_approval)",
		Long: "Answer a tool call a run waits on under [tools] approval = \"ask\": --allow runs it, --deny tells the agent\n" +
			"the user declined and it goes on. APPROVAL_ID (from luft status) may be left out when the run waits on one call.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, a []string) error {
			if allow == deny {
				return usageErr("approve: give --allow or --deny")
			}
			id := ""
			if len(a) == 2 {
				id = a[1]
			}
			return withService(cmd, e, g, func(ctx context.Context, svc *runtime.Service) error {
				ap, err := svc.Approve(ctx, a[0], id, allow)
				switch {
				case errors.Is(err, storage.ErrRunNotFound), errors.Is(err, storage.ErrAmbiguousRun):
					return runRefError(err)
				case errors.Is(err, runtime.ErrNoApproval), errors.Is(err, runtime.ErrApprovalAmbiguous), errors.Is(err, storage.ErrApprovalDecided):
					return usageErr("%v", err)
				case err != nil:
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, map[string]any{"run_id": ap.RunID, "approval_id": ap.ID, "tool": ap.Tool, "status": ap.Status})
				}
				fmt.Fprintf(e.stdout, "%s %s of run %s: %s\n", e.outLine(ap.Tool), ap.ID, ap.RunID, ap.Status)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&allow, "allow", false, "run the tool call")
	cmd.Flags().BoolVar(&deny, "deny", false, "decline it: the agent is told and goes on")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
