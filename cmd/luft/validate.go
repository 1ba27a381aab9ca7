package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
)

// defaultValidateTimeout bounds a dry run when --timeout is not given: validate is a
// check, and a script whose top level or main() loops forever must not hang it.
const defaultValidateTimeout = 30 * time.Second

func newValidateCmd(e *env) *cobra.Command {
	var (
		args          string
		timeout       time.Duration
		maxAgentCalls int
	)
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a workflow: syntax, main(), meta, and a dry run on the mock backend",
		Long: `Check a workflow without real agents: it must parse, define main(), carry a valid meta
table, and run to the end on the offline mock backend. Exit 0 when it does, 2 with
file:line errors when it does not. The dry run has the limits of luft run: --timeout
(here 30s by default), --max-agent-calls and the memory limit; reaching one is exit 2.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			parsed, err := parseArgs(args)
			if err != nil {
				return err
			}
			if timeout < 0 {
				return usageErr("invalid --timeout %s: must not be negative (0 = no limit)", timeout)
			}
			if maxAgentCalls < 1 {
				return usageErr("invalid --max-agent-calls %d: must be at least 1", maxAgentCalls)
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
			run, err := eng.Start(ctx, runtime.Spec{Path: a[0], Args: parsed, Backend: "mock", Timeout: timeout,
				Limits: lua.Limits{MaxAgentCalls: maxAgentCalls}})
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			res := run.Wait()
			if errors.Is(res.Err, runtime.ErrTimeout) {
				where := a[0]
				var se *lua.ScriptError
				if errors.As(res.Err, &se) && se.Where != "" {
					where = se.Where
				}
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: dry run stopped by the time limit (--timeout %s); a loop that never ends? Pass a longer --timeout if the script needs more time", where, timeout)}
			}
			if res.Status != runtime.StatusCompleted {
				return &exitError{code: exitUsage, err: fmt.Errorf("%s: dry run on the mock backend %s: %v", a[0], res.Status, res.Err)}
			}
			fmt.Fprintf(e.stdout, "ok: %s (dry run: %d agent calls)\n", a[0], res.Agents.OK+res.Agents.Failed)
			return nil
		},
	}
	cmd.Flags().StringVar(&args, "args", "", "arguments for the dry run as a JSON object")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultValidateTimeout, "stop the dry run after this long (e.g. 90s); 0 = no limit")
	cmd.Flags().IntVar(&maxAgentCalls, "max-agent-calls", 10000, "agent calls allowed in the dry run")
	return cmd
}
