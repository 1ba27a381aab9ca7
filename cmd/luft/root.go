package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/luft-run/luft/internal/suggest"
	"github.com/luft-run/luft/internal/version"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: suggestFlag(c, plainFlagError(err)), usage: true}
	})
	root.AddCommand(newRunCmd(e, g), newValidateCmd(e), newVersionCmd(e), newBackendCmd(e, g),
		newListCmd(e, g), newStatusCmd(e, g), newLogsCmd(e, g), newPhasesCmd(e, g), newCancelCmd(e, g),
		newClearCmd(e, g), newGenerateCmd(e, g), newSkillDumpCmd(e), newDaemonCmd(e, g), newAttachCmd(e, g),
		newMCPCmd(e, g), newApproveCmd(e, g), newInstallCmd(e),
		newProxyCmd(e, g))
	// luft --version, as Luft has it; the same line as luft version.
	root.Version = "-"
	root.SetVersionTemplate(versionLine())
	completionCmd(root)
	commandGroups(root)
	return root
}

// commandGroups makes a word after a command group (luft daemon strat) that names none
// of its subcommands a usage error with the nearest one, instead of cobra's help page with
// exit 0. The group alone still prints its help.
func commandGroups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		commandGroups(sub)
	}
	if !c.HasSubCommands() || c.Name() == "completion" {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		return unknownCommand(cmd, args[0])
	}
	if !c.Runnable() {
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}

// unknownCommand is the usage error for a word that is none of cmd's subcommands.
func unknownCommand(cmd *cobra.Command, word string) error {
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	msg := fmt.Sprintf("unknown command %q for %q", word, cmd.CommandPath())
	if near := suggest.Nearest(word, names); near != "" {
		msg += fmt.Sprintf(": did you mean '%s %s'?", cmd.CommandPath(), near)
	}
	return &exitError{code: exitUsage, usage: true, err: fmt.Errorf("%s (its commands: %s)", msg, strings.Join(names, ", "))}
}

// unknownFlagRe matches pflag's error for a long flag it does not know.
var unknownFlagRe = regexp.MustCompile(`^unknown flag: --([^\s=]+)$`)

// suggestFlag adds the nearest flag of c to an unknown flag's error.
func suggestFlag(c *cobra.Command, err error) error {
	m := unknownFlagRe.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	var names []string
	add := func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	}
	c.LocalFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	if near := suggest.Nearest(m[1], names); near != "" {
		return fmt.Errorf("%w (did you mean --%s?)", err, near)
	}
	return err
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
			fmt.Fprintf(e.stderr, "luft: %s\n", e.errText(err.Error()))
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
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print luft's version, commit, build date and Go version",
		Long: `Print luft's version, commit, build date and the Go toolchain that built it.

A release build has them stamped; a build from source (go build, go install) reports
what Go recorded: the module version and the VCS revision and time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return writeJSON(e.stdout, version.Get())
			}
			fmt.Fprint(e.stdout, versionLine())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the build as a JSON object")
	return cmd
}

// completionCmd adds cobra's `luft completion bash|zsh|fish|powershell` now rather than at
// Execute, so that a shell it does not know is a usage error instead of a help page with
// exit 0.
func completionCmd(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	completionHints(root)
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Long += `
Install for one user, for example:
  bash:        luft completion bash > ~/.local/share/bash-completion/completions/luft
  zsh:         luft completion zsh > "${fpath[1]}/_luft"
  fish:        luft completion fish > ~/.config/fish/completions/luft.fish
  PowerShell:  Add-Content $PROFILE 'luft completion powershell | Out-String | Invoke-Expression'
`
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("completion: unknown shell %q", args[0])
			if near := suggest.Nearest(args[0], []string{"bash", "zsh", "fish", "powershell"}); near != "" {
				msg += fmt.Sprintf(": did you mean %s?", near)
			}
			return &exitError{code: exitUsage, usage: true, err: fmt.Errorf("%s (use bash, zsh, fish or powershell)", msg)}
		}
	}
}

// completionHints tells the completion scripts what luft's values are: workflow files
// end in .lua, and a few flags take one of a fixed set of words.
func completionHints(root *cobra.Command) {
	lua := func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return []cobra.Completion{"lua"}, cobra.ShellCompDirectiveFilterFileExt
	}
	_ = root.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(
		[]cobra.Completion{"trace", "debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	for _, c := range root.Commands() {
		switch c.Name() {
		case "run":
			_ = c.RegisterFlagCompletionFunc("workflow", lua)
			_ = c.RegisterFlagCompletionFunc("class", cobra.FixedCompletions(
				[]cobra.Completion{"interactive", "batch"}, cobra.ShellCompDirectiveNoFileComp))
		case "validate":
			if c.ValidArgsFunction == nil {
				c.ValidArgsFunction = lua
			}
		}
	}
}

// buildVersion is luft's version: stamped at release, else from build info.
func buildVersion() string { return version.Get().Version }
