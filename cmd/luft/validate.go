package main

import (
	"context"
	"fmt"
	"os"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
)

func newValidateCmd(e *env) *cobra.Command {
	var args string
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a workflow: syntax, main(), meta, and a dry run on the mock backend",
		Long: `Check a workflow without real agents: it must parse, define main(), carry a valid meta
table, and run to the end on the offline mock backend. Exit 0 when it does, 2 with
file:line errors when it does not.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			parsed, err := parseArgs(args)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			// The dry run keeps its state in a throw-away dir: validating leaves no run behind.
			dir, err := os.MkdirTemp("", "luft-validate-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			st, err := storage.Open(ctx, dir)
			if err != nil {
				return err
			}
			defer st.Close()
			eng, err := newService(e, st, "", adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{})),
				scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 64}})
			if err != nil {
				return err
			}
			run, err := eng.Start(ctx, runtime.Spec{Path: a[0], Args: parsed, Backend: "mock"})
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			res := run.Wait()
			if res.Status != runtime.StatusCompleted {
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: dry run on the mock backend %s: %v", a[0], res.Status, res.Err)}
			}
			fmt.Fprintf(e.stdout, "ok: %s (dry run: %d agent calls)\n", a[0], res.Agents.OK+res.Agents.Failed)
			return nil
		},
	}
	cmd.Flags().StringVar(&args, "args", "", "arguments for the dry run as a JSON object")
	return cmd
}
