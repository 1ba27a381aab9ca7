package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/host"
)

// openBackends builds this process's backends, the first step of its host (package host);
// what it refuses is a mistake in the input, exit 2.
func openBackends(e *env, g *globalFlags, cfg config.Config, mockFile string) (*host.Host, error) {
	h, err := host.Open(host.Options{StateDir: stateDir(e, g), Config: cfg, Getenv: e.getenv, MockFile: mockFile})
	if err != nil {
		return nil, usageErr("%v", err)
	}
	for _, w := range h.Backends.Warnings {
		fmt.Fprintf(e.stderr, "luft: warning: %s\n", w)
	}
	return h, nil
}

// autoNotice is the one line a run on the stand-in default prints.
const autoNotice = "luft: no backend configured: agents run on the offline mock backend (add a [backends.NAME] to luft.toml, or pass --backend; see `luft backend list`)"

// defaultNotice is the line a run prints when the mock stands in: none configured, or
// several and default_backend names none.
func defaultNotice(unchosen []string) string {
	if len(unchosen) < 2 {
		return autoNotice
	}
	return fmt.Sprintf("luft: %d backends are configured (%s) and none is the default: agents run on the offline mock backend; set default_backend = %q in luft.toml, or pass --backend",
		len(unchosen), strings.Join(unchosen, ", "), unchosen[0])
}

// notConfigured is the error of `luft backend check ID` for an id nothing registers: what
// to put in luft.toml.
func notConfigured(cfg config.Config, id string, err error) error {
	where := "luft.toml (in this folder; none was found)"
	if cfg.Path != "" {
		where = cfg.Path
	}
	return usageErr(`backend check: %v
No backend %q is configured. Add one to %s, for example:

  default_backend = %q
  [backends.%s]
  type = "openai"                          # any OpenAI-compatible endpoint; or "acp" with command = ...
  base_url = "http://127.0.0.1:11434/v1"   # e.g. Ollama; the key comes from $OPENAI_API_KEY (api_key_env)
  model = "llama3.2"

then run: luft backend check %s`, err, id, where, id, tomlKey(id), id)
}

// tomlKey quotes a backend id that is not a bare TOML key.
func tomlKey(id string) string {
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return strconv.Quote(id)
		}
	}
	return id
}

func newBackendCmd(e *env, g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backend",
		Short: "List the configured backends, or probe one",
	}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the backends this process would offer: built-in, from the environment and from luft.toml",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := loadBackends(e, g)
			if err != nil {
				return err
			}
			set := h.Backends
			if asJSON {
				return writeJSON(e.stdout, set.Infos)
			}
			tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTYPE\tMODEL\tENDPOINT\tSOURCE")
			for _, b := range set.Infos {
				id := b.ID
				if b.Default {
					id += " (default)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", id, b.Type, dash(b.Model), dash(b.BaseURL), b.Source)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var checkJSON bool
	var timeout time.Duration
	check := &cobra.Command{
		Use:   "check ID",
		Short: "Probe a backend: is it reachable, is its model listed, which rate limits does it report",
		Long: `Probe a backend live. For an OpenAI-compatible endpoint: GET /models (reachable, the
configured model listed) and, when that response carries no rate-limit headers, one
completion of a single token to read them. Exit 0 when the backend is usable, 1 when not.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(e, g)
			if err != nil {
				return err
			}
			set, err := openBackends(e, g, cfg, "")
			if err != nil {
				return err
			}
			b, err := set.Registry.Get(args[0])
			if err != nil {
				return notConfigured(cfg, args[0], err)
			}
			c, ok := b.(adapters.Checker)
			if !ok {
				return usageErr("backend check: %s cannot be probed", args[0])
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep := c.Check(ctx)
			if checkJSON {
				if err := writeJSON(e.stdout, struct {
					ID string `json:"id"`
					OK bool   `json:"ok"`
					adapters.CheckReport
				}{args[0], rep.OK(), rep}); err != nil {
					return err
				}
			} else {
				printCheck(e, args[0], rep)
			}
			if !rep.OK() {
				return &exitError{code: exitFailed, err: fmt.Errorf("backend %s is not usable as configured", args[0]), quiet: checkJSON}
			}
			return nil
		},
	}
	check.Flags().BoolVar(&checkJSON, "json", false, "print JSON")
	check.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up after this long")
	cmd.AddCommand(list, check)
	return cmd
}

func loadBackends(e *env, g *globalFlags) (*host.Host, error) {
	cfg, err := loadConfig(e, g)
	if err != nil {
		return nil, err
	}
	return openBackends(e, g, cfg, "")
}

func printCheck(e *env, id string, r adapters.CheckReport) {
	w := e.stdout
	fmt.Fprintf(w, "backend %s\n", id)
	if r.Reachable {
		fmt.Fprintf(w, "  reachable    yes (%d ms)\n", r.Latency.Milliseconds())
	} else {
		fmt.Fprintf(w, "  reachable    no: %s\n", e.outLine(r.Error))
	}
	switch {
	case r.ModelListed != nil && *r.ModelListed:
		fmt.Fprintf(w, "  model        %s: listed\n", r.Model)
	case r.ModelListed != nil:
		fmt.Fprintf(w, "  model        %s: NOT listed (the endpoint lists: %s)\n", r.Model, e.outLine(dash(strings.Join(r.Models, ", "))))
	case r.Reachable && r.Model == "":
		fmt.Fprintf(w, "  model        none configured (agents must name one: agent{model=...}); listed: %s\n", e.outLine(dash(strings.Join(r.Models, ", "))))
	}
	if len(r.RateLimits) > 0 {
		fmt.Fprintln(w, "  rate limits")
		for _, k := range slices.Sorted(maps.Keys(r.RateLimits)) {
			fmt.Fprintf(w, "    %s: %s\n", e.outLine(k), e.outLine(r.RateLimits[k]))
		}
	} else if r.Reachable {
		fmt.Fprintln(w, "  rate limits  none seen")
	}
	if r.Refused != "" {
		fmt.Fprintf(w, "  refused      %s\n", e.outLine(r.Refused))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", e.outLine(n))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
