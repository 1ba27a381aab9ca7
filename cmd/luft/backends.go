package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/acp"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/config"
)

// backendInfo says what a registered backend is and where it came from.
type backendInfo struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Source  string `json:"source"` // "built-in", "environment", or the config file
	BaseURL string `json:"base_url,omitempty"`
	Model   string `json:"model,omitempty"`
	Default bool   `json:"default"`
}

// backendSet is this process's backends: the registry runs use, and what each one is.
type backendSet struct {
	reg   *adapters.Registry
	infos []backendInfo
	// auto is set when nothing chose a default backend and the mock stands in.
	auto bool
	// tools are the tools agents may be given ([tools], [mcp_servers]).
	tools *toolset
}

// close stops what the backends started (upstream MCP servers).
func (s *backendSet) close() error { return s.tools.Close() }

// configName names the config in messages.
func configName(cfg config.Config) string {
	if cfg.Path == "" {
		return "config"
	}
	return cfg.Path
}

// backends builds the registry of this process from flags, environment and config: the
// mock always; mockfile with --mock-file; an "openai" backend when OPENAI_BASE_URL or
// OPENAI_API_KEY is set (model from LUFT_MODEL); and every [backends.NAME] of the config.
// The default backend is the config's default_backend, else mock.
//
// protected are files and folders no agent may write (luft's config and state dir).
func backends(e *env, cfg config.Config, mockFile string, protected []string) (*backendSet, error) {
	mcfg, err := adapters.ParseMockEnv(e.getenv)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	set := &backendSet{}
	toolset, err := newToolset(cfg, protected)
	if err != nil {
		return nil, usageErr("%s: [tools]: %v", configName(cfg), err)
	}
	set.tools = toolset
	bs := []adapters.Backend{adapters.NewMock(mcfg)}
	set.infos = append(set.infos, backendInfo{ID: "mock", Type: "mock", Source: "built-in", Model: adapters.MockModel})
	if mockFile != "" {
		mf, err := adapters.OpenMockFile(mockFile)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		bs = append(bs, mf)
		set.infos = append(set.infos, backendInfo{ID: "mockfile", Type: "mockfile", Source: "--mock-file " + mockFile})
	}
	if base, key := e.getenv("OPENAI_BASE_URL"), e.getenv("OPENAI_API_KEY"); base != "" || key != "" {
		o, err := adapters.NewOpenAI(adapters.OpenAIConfig{BaseURL: base, APIKey: key, Model: e.getenv("LUFT_MODEL"), Tools: toolset})
		if err != nil {
			return nil, usageErr("OPENAI_BASE_URL/OPENAI_API_KEY: %v", err)
		}
		bs = append(bs, o)
		set.infos = append(set.infos, backendInfo{ID: "openai", Type: "openai", Source: "environment", BaseURL: o.BaseURL(), Model: e.getenv("LUFT_MODEL")})
	}
	// The coding agents luft knows by name; a [backends.NAME] may configure them further.
	for _, name := range acp.BuiltinNames() {
		if _, configured := cfg.Backends[name]; configured {
			continue
		}
		c, _ := acp.Builtin(name)
		b, err := acp.New(acpPolicy(c, cfg, protected))
		if err != nil {
			return nil, usageErr("%s: [tools]: %v", configName(cfg), err)
		}
		bs = append(bs, b)
		set.infos = append(set.infos, backendInfo{ID: name, Type: "acp", Source: "built-in", BaseURL: strings.Join(append([]string{c.Command}, c.Args...), " ")})
	}
	for _, id := range slices.Sorted(maps.Keys(cfg.Backends)) {
		b := cfg.Backends[id]
		info := backendInfo{ID: id, Type: b.Type, Source: cfg.Path, Model: b.Model}
		switch {
		case b.Type == "openai":
			keyEnv := b.APIKeyEnv
			if keyEnv == "" {
				keyEnv = "OPENAI_API_KEY"
			}
			base := b.BaseURL
			if base == "" {
				base = e.getenv("OPENAI_BASE_URL")
			}
			o, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: id, BaseURL: base, APIKey: e.getenv(keyEnv), Model: b.Model,
				PriceInPerMTok: b.PriceInputPerMTok, PriceOutPerMTok: b.PriceOutputPerMTok,
				Tools: toolset, MaxTurns: b.MaxTurns, NoStream: b.Stream != nil && !*b.Stream, Replicas: b.Replicas, StructuredOutput: b.StructuredOutput})
			if err != nil {
				return nil, usageErr("%s: backends.%s: %v", cfg.Path, id, err)
			}
			info.BaseURL = o.BaseURL()
			bs = append(bs, o)
		case b.Type == "mockfile" && b.MockFile != "":
			// Scripted replies of its own, registered under the entry's name; a relative
			// path is taken from the config file's folder.
			path := b.MockFile
			if !filepath.IsAbs(path) && cfg.Path != "" {
				path = filepath.Join(filepath.Dir(cfg.Path), path)
			}
			mf, err := adapters.OpenMockFile(path)
			if err != nil {
				return nil, usageErr("%s: backends.%s: %v", configName(cfg), id, err)
			}
			info.Source += " (" + path + ")"
			bs = append(bs, mf.Named(id))
		case b.Type == "mock" || b.Type == "mockfile":
			// Built in: the config entry only sets the lane's limits.
		default: // "acp" with a command, or "acp:AGENT" for a known agent
			c, known := acp.Builtin(b.Type)
			if b.Type == "acp" || !known {
				c = acp.Config{}
			}
			c.ID = id
			if b.Command != "" {
				c.Command, c.Args = b.Command, b.Args
			}
			c.Model, c.IdleTimeout = b.Model, b.IdleTimeout
			a, err := acp.New(acpPolicy(c, cfg, protected))
			if err != nil {
				return nil, usageErr("%s: backends.%s: %v", configName(cfg), id, err)
			}
			info.BaseURL = strings.Join(append([]string{c.Command}, c.Args...), " ")
			bs = append(bs, a)
		}
		set.infos = append(set.infos, info)
	}
	def := "mock"
	if cfg.DefaultBackend != "" {
		def = cfg.DefaultBackend
		if b := cfg.Backends[def]; b.Type == "mock" || b.Type == "mockfile" && b.MockFile == "" {
			def = b.Type
		}
	} else {
		set.auto = true
	}
	set.reg = adapters.NewRegistry(def, bs...)
	if _, err := set.reg.Get(""); err != nil {
		return nil, usageErr("%s: default_backend %q: %v", cfg.Path, cfg.DefaultBackend, err)
	}
	for i := range set.infos {
		set.infos[i].Default = set.infos[i].ID == set.reg.Default()
	}
	return set, nil
}

// acpPolicy gives a coding agent the [tools] policy: the workspace, the allowed
// commands and the approval policy; edits inside the workspace are allowed unless
// [tools] destructive lists write_file or edit_file (then the approval policy decides).
func acpPolicy(c acp.Config, cfg config.Config, protected []string) acp.Config {
	c.Dir = cfg.Tools.Workspace
	c.Protected = protected
	c.Approval = tools.Approval(cfg.Tools.Approval)
	c.AllowCommands = cfg.Tools.AllowCommands
	c.AllowEdits = !slices.Contains(cfg.Tools.Destructive, "write_file") && !slices.Contains(cfg.Tools.Destructive, "edit_file")
	return c
}

// protectedPaths are luft's own files, which agents may not write even when they lie in
// the workspace: the config file in use and the state dir.
func protectedPaths(e *env, g *globalFlags, cfg config.Config) []string {
	out := []string{stateDir(e, g)}
	if cfg.Path != "" {
		out = append(out, cfg.Path)
	}
	return out
}

// autoNotice is the one line a run on the stand-in default prints.
const autoNotice = "luft: no backend configured: agents run on the offline mock backend (configure one in luft.toml, or pass --backend; see `luft backend list`)"

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
			set, err := loadBackends(e, g)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e.stdout, set.infos)
			}
			tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTYPE\tMODEL\tENDPOINT\tSOURCE")
			for _, b := range set.infos {
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
			set, err := loadBackends(e, g)
			if err != nil {
				return err
			}
			b, err := set.reg.Get(args[0])
			if err != nil {
				return usageErr("backend check: %v", err)
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

func loadBackends(e *env, g *globalFlags) (*backendSet, error) {
	cfg, err := loadConfig(e, g)
	if err != nil {
		return nil, err
	}
	return backends(e, cfg, "", protectedPaths(e, g, cfg))
}

func printCheck(e *env, id string, r adapters.CheckReport) {
	w := e.stdout
	fmt.Fprintf(w, "backend %s\n", id)
	if r.Reachable {
		fmt.Fprintf(w, "  reachable    yes (%d ms)\n", r.Latency.Milliseconds())
	} else {
		fmt.Fprintf(w, "  reachable    no: %s\n", r.Error)
	}
	switch {
	case r.ModelListed != nil && *r.ModelListed:
		fmt.Fprintf(w, "  model        %s: listed\n", r.Model)
	case r.ModelListed != nil:
		fmt.Fprintf(w, "  model        %s: NOT listed (the endpoint lists: %s)\n", r.Model, dash(strings.Join(r.Models, ", ")))
	case r.Reachable && r.Model == "":
		fmt.Fprintf(w, "  model        none configured (agents must name one: agent{model=...}); listed: %s\n", dash(strings.Join(r.Models, ", ")))
	}
	if len(r.RateLimits) > 0 {
		fmt.Fprintln(w, "  rate limits")
		for _, k := range slices.Sorted(maps.Keys(r.RateLimits)) {
			fmt.Fprintf(w, "    %s: %s\n", k, r.RateLimits[k])
		}
	} else if r.Reachable {
		fmt.Fprintln(w, "  rate limits  none seen")
	}
	if r.Refused != "" {
		fmt.Fprintf(w, "  refused      %s\n", r.Refused)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
