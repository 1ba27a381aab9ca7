package main

import (
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
)

// Exit codes of SPEC §1.
const (
	exitOK        = 0
	exitFailed    = 1
	exitUsage     = 2
	exitResumable = 3
	exitHard      = 130
)

// exitError carries an exit code out of a command.
type exitError struct {
	code  int
	err   error
	quiet bool // already reported; print nothing more
	usage bool // a mistake in the command line: point at --help
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// Set by -ldflags at release time; empty in development and `go install` builds.
var (
	version = ""
	commit  = ""
)

type globalFlags struct {
	noColor    bool
	logLevel   string
	stateDir   string
	configPath string
}

func newRootCmd(e *env) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "luft",
		Short:         "Run multi-agent LLM workflows written as sandboxed Lua scripts",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.PersistentFlags().StringVar(&g.configPath, "config", "", "config file (default ./luft.toml, else ~/.config/luft/config.toml)")
	root.PersistentFlags().StringVar(&g.stateDir, "state-dir", "", "where runs are kept (default $LUFT_HOME, else ./.luft)")
	root.PersistentFlags().BoolVar(&g.noColor, "no-color", false, "no colour in human output (also NO_COLOR)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "lowest level of script log lines shown in progress output: trace, debug, info, warn or error")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: plainFlagError(err), usage: true}
	})
	root.AddCommand(newRunCmd(e, g), newValidateCmd(e), newVersionCmd(e), newBackendCmd(e, g),
		newListCmd(e, g), newStatusCmd(e, g), newLogsCmd(e, g), newPhasesCmd(e, g), newCancelCmd(e, g),
		newClearCmd(e, g), newGenerateCmd(e, g), newSkillDumpCmd(e), newDaemonCmd(e, g), newAttachCmd(e, g),
		newProxyCmd(e, g))
	// luft --version, as Luft has it; the same line as luft version.
	root.Version = "-"
	root.SetVersionTemplate(versionLine())
	return root
}

// strconvRe matches the Go parser's own words in pflag's errors ("strconv.ParseInt:
// parsing "99999999999999999999": value out of range").
var strconvRe = regexp.MustCompile(`strconv\.Parse\w+: parsing "[^"]*": (.*)$`)

// plainFlagError says what is wrong with a flag's value in the user's words, not the Go
// parser's.
func plainFlagError(err error) error {
	msg := err.Error()
	if m := strconvRe.FindStringSubmatchIndex(msg); m != nil {
		reason := msg[m[2]:m[3]]
		switch reason {
		case "value out of range":
			reason = "the number is too large (see luft run --help for the range)"
		case "invalid syntax":
			reason = "not a number"
		}
		return errors.New(msg[:m[0]] + reason)
	}
	return err
}

// execute runs the CLI and turns its outcome into an exit code. It is the one place that
// decides exit codes.
func execute(e *env, args []string) int {
	root := newRootCmd(e)
	root.SetArgs(args)
	err := root.Execute()
	code := exitCode(err)
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || !ee.quiet {
			fmt.Fprintf(e.stderr, "luft: %v\n", err)
		}
		if code == exitUsage && (isCobraUsage(err) || errors.As(err, &ee) && ee.usage) {
			fmt.Fprintln(e.stderr, "Run 'luft --help' for usage.")
		}
	}
	return code
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, storage.ErrCorruptState) || errors.Is(err, storage.ErrSchemaTooNew) {
		return exitUsage // as when the open finds it: the state dir is the bad input
	}
	switch lua.ErrorKindOf(err) {
	case lua.KindSyntax, lua.KindInvalid:
		return exitUsage
	case "":
		if isCobraUsage(err) {
			return exitUsage
		}
	}
	return exitFailed
}

// isCobraUsage reports errors cobra raises for bad commands and arguments.
func isCobraUsage(err error) bool {
	var ee *exitError
	if errors.As(err, &ee) {
		return false
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires ", "invalid argument", "flag needs"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print luft's version and commit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(e.stdout, versionLine())
			return nil
		},
	}
}

// buildVersion is the version and commit: stamped at release, else from build info.
func buildVersion() (string, string) {
	v, c := version, commit
	if info, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
			}
		}
	}
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}
