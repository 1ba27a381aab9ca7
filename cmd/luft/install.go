package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/luft-run/luft/internal/agentinstall"
)

func newInstallCmd(e *env) *cobra.Command {
	var (
		agents    []string
		dryRun    bool
		uninstall bool
		binary    string
	)
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Register luft's MCP server and skill with Claude Code, Codex, OpenCode and Gemini CLI",
		Long: `Register ` + "`luft mcp serve`" + ` (with the absolute path of this luft) in each coding agent's
own config, and install the workflow-authoring skill where the agent reads skills.

Without --agent every detected agent is configured (found by its config folder or its
program on PATH); a named agent is configured even when it is not detected. Every file
edited is backed up first (FILE.luft-backup-<time>); a second run changes nothing;
--uninstall removes what install added.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if binary == "" {
				exe, err := os.Executable()
				if err == nil {
					exe, err = filepath.EvalSymlinks(exe)
				}
				if err != nil {
					return fmt.Errorf("install: cannot find this luft executable's path (%v); give it with --binary", err)
				}
				binary = exe
			} else if !filepath.IsAbs(binary) {
				return usageErr("install: --binary %q is not an absolute path", binary)
			}
			if strings.Contains(binary, string(filepath.Separator)+"go-build") {
				fmt.Fprintf(e.stderr, "luft: note: %s is a temporary build (go run); agents will lose it — install luft (go install) and run luft install from there\n", binary)
			}
			home := e.getenv("HOME")
			if home == "" && runtime.GOOS == "windows" {
				home = e.getenv("USERPROFILE")
			}
			err := agentinstall.Run(cmd.Context(), agentinstall.Options{
				Home:      home,
				Getenv:    e.getenv,
				Binary:    binary,
				Agents:    agents,
				DryRun:    dryRun,
				Uninstall: uninstall,
				Now:       e.now,
				Out:       e.stdout,
			})
			if errors.Is(err, agentinstall.ErrUnknownAgent) {
				return usageErr("%v", err)
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&agents, "agent", nil, "agent to configure: claude, codex, opencode, gemini or all (repeat or separate with commas; default every detected one)")
	fl.BoolVar(&dryRun, "dry-run", false, "print what would change (diffs) and write nothing")
	fl.BoolVar(&uninstall, "uninstall", false, "remove luft's MCP server entry and skill from the agents")
	fl.StringVar(&binary, "binary", "", "absolute path of the luft to register (default this luft, symlinks resolved)")
	return cmd
}
