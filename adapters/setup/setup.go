package setup

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/acp"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/config"
)

// Info says what a registered backend is and where it came from (luft backend list).
type Info struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Source  string `json:"source"` // "built-in", "environment", or the config file
	BaseURL string `json:"base_url,omitempty"`
	Model   string `json:"model,omitempty"`
	Default bool   `json:"default"`
}

// Backends are a process's backends: the registry runs use, and what each one is.
type Backends struct {
	Registry *adapters.Registry
	Infos    []Info
	// Auto is set when nothing chose a default backend and the mock stands in.
	Auto bool
	// Unchosen are the config's backends when there are several and default_backend
	// names none of them (the mock stands in; the notice names them).
	Unchosen []string
	// Warnings are what the user should be told once: that commands agents may run
	// cannot be confined by this kernel, say.
	Warnings []string
	// tools are the tools agents may be given ([tools], [mcp_servers]).
	tools *toolset
}

// Close stops what the backends started (upstream MCP servers).
func (s *Backends) Close() error { return s.tools.Close() }

// Options say where a process's backends come from.
type Options struct {
	Config config.Config
	Getenv func(string) string // the environment: OPENAI_*, LUFT_MODEL, LUFT_MOCK_*, api keys
	// MockFile is --mock-file: scripted replies registered as "mockfile"; "" = none.
	MockFile string
	// Protected are files and folders no agent may write even inside the workspace
	// (luft's config file and state dir).
	Protected []string
}

// configName names the config in messages.
func configName(cfg config.Config) string {
	if cfg.Path == "" {
		return "config"
	}
	return cfg.Path
}

// Open builds the registry of a process from flags, environment and config: the mock
// always; mockfile with a mock file; an "openai" backend when OPENAI_BASE_URL or
// OPENAI_API_KEY is set (model from LUFT_MODEL); the built-in coding agents; and every
// [backends.NAME] of the config. The default backend is the config's default_backend,
// else the config's only backend, else mock. Every error is a mistake in the input (config, environment, a file).
func Open(o Options) (*Backends, error) {
	mcfg, err := adapters.ParseMockEnv(o.Getenv)
	if err != nil {
		return nil, err
	}
	ts, err := newToolset(o.Config, o.Protected)
	if err != nil {
		return nil, fmt.Errorf("%s: [tools]: %v", configName(o.Config), err)
	}
	b := &builder{o: o, tools: ts}
	b.add(adapters.NewMock(mcfg), Info{ID: "mock", Type: "mock", Source: "built-in", Model: adapters.MockModel})
	for _, step := range []func() error{b.mockFile, b.fromEnvironment, b.builtinAgents, b.fromConfig} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return b.registry()
}

// builder collects a process's backends, and what each one is, in the order they are
// registered (the order of luft backend list).
type builder struct {
	o     Options
	tools *toolset
	bs    []adapters.Backend
	infos []Info
}

func (b *builder) add(be adapters.Backend, in Info) {
	b.bs = append(b.bs, be)
	b.infos = append(b.infos, in)
}

// mockFile registers --mock-file's scripted replies as "mockfile".
func (b *builder) mockFile() error {
	if b.o.MockFile == "" {
		return nil
	}
	mf, err := adapters.OpenMockFile(b.o.MockFile)
	if err != nil {
		return err
	}
	b.add(mf, Info{ID: "mockfile", Type: "mockfile", Source: "--mock-file " + b.o.MockFile})
	return nil
}

// fromEnvironment registers "openai" when OPENAI_BASE_URL or OPENAI_API_KEY is set.
func (b *builder) fromEnvironment() error {
	getenv := b.o.Getenv
	base, key := getenv("OPENAI_BASE_URL"), getenv("OPENAI_API_KEY")
	if base == "" && key == "" {
		return nil
	}
	o, err := adapters.NewOpenAI(adapters.OpenAIConfig{BaseURL: base, APIKey: key, Model: getenv("LUFT_MODEL"), Tools: b.tools})
	if err != nil {
		return fmt.Errorf("OPENAI_BASE_URL/OPENAI_API_KEY: %v", err)
	}
	b.add(o, Info{ID: "openai", Type: "openai", Source: "environment", BaseURL: o.BaseURL(), Model: getenv("LUFT_MODEL")})
	return nil
}

// builtinAgents registers the coding agents luft knows by name; a [backends.NAME] may
// configure them further (fromConfig registers those).
func (b *builder) builtinAgents() error {
	cfg := b.o.Config
	for _, name := range acp.BuiltinNames() {
		if _, configured := cfg.Backends[name]; configured {
			continue
		}
		c, _ := acp.Builtin(name)
		a, err := acp.New(acpPolicy(c, cfg, b.o.Protected))
		if err != nil {
			return fmt.Errorf("%s: [tools]: %v", configName(cfg), err)
		}
		b.add(a, Info{ID: name, Type: "acp", Source: "built-in", BaseURL: strings.Join(append([]string{c.Command}, c.Args...), " ")})
	}
	return nil
}

// fromConfig registers every [backends.NAME] of the config, by name.
func (b *builder) fromConfig() error {
	cfg := b.o.Config
	for _, id := range slices.Sorted(maps.Keys(cfg.Backends)) {
		be, info, err := b.configured(id, cfg.Backends[id])
		if err != nil {
			return err
		}
		if be != nil {
			b.bs = append(b.bs, be)
		}
		b.infos = append(b.infos, info)
	}
	return nil
}

// configured is the backend of one [backends.NAME] entry (nil for the built-in mock and
// mockfile, whose entry only sets the lane's limits) and what it is.
func (b *builder) configured(id string, e config.Backend) (adapters.Backend, Info, error) {
	cfg, getenv := b.o.Config, b.o.Getenv
	info := Info{ID: id, Type: e.Type, Source: cfg.Path, Model: e.Model}
	switch {
	case e.Type == "openai":
		keyEnv := e.APIKeyEnv
		if keyEnv == "" {
			keyEnv = "OPENAI_API_KEY"
		}
		base := e.BaseURL
		if base == "" {
			base = getenv("OPENAI_BASE_URL")
		}
		o, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: id, BaseURL: base, APIKey: getenv(keyEnv), Model: e.Model,
			PriceInPerMTok: e.PriceInputPerMTok, PriceOutPerMTok: e.PriceOutputPerMTok,
			Tools: b.tools, MaxTurns: e.MaxTurns, NoStream: e.Stream != nil && !*e.Stream, Replicas: e.Replicas, StructuredOutput: e.StructuredOutput})
		if err != nil {
			return nil, info, fmt.Errorf("%s: backends.%s: %v", cfg.Path, id, err)
		}
		info.BaseURL = o.BaseURL()
		return o, info, nil
	case e.Type == "mockfile" && e.MockFile != "":
		// Scripted replies of its own, registered under the entry's name; a relative
		// path is taken from the config file's folder.
		path := e.MockFile
		if !filepath.IsAbs(path) && cfg.Path != "" {
			path = filepath.Join(filepath.Dir(cfg.Path), path)
		}
		mf, err := adapters.OpenMockFile(path)
		if err != nil {
			return nil, info, fmt.Errorf("%s: backends.%s: %v", configName(cfg), id, err)
		}
		info.Source += " (" + path + ")"
		return mf.Named(id), info, nil
	case e.Type == "mock" || e.Type == "mockfile":
		// Built in: the config entry only sets the lane's limits.
		return nil, info, nil
	case e.Type == "anthropic":
		// Anthropic Messages, spoken by the proxy's /v1/messages door only.
		info.BaseURL = e.BaseURL
		return proxyOnly{id: id}, info, nil
	default: // "acp" with a command, or "acp:AGENT" for a known agent
		c, known := acp.Builtin(e.Type)
		if e.Type == "acp" || !known {
			c = acp.Config{}
		}
		c.ID = id
		if e.Command != "" {
			c.Command, c.Args = e.Command, e.Args
		}
		c.Model, c.IdleTimeout, c.PassEnv = e.Model, e.IdleTimeout, e.Env
		a, err := acp.New(acpPolicy(c, cfg, b.o.Protected))
		if err != nil {
			return nil, info, fmt.Errorf("%s: backends.%s: %v", configName(cfg), id, err)
		}
		info.BaseURL = strings.Join(append([]string{c.Command}, c.Args...), " ")
		return a, info, nil
	}
}

// registry is the registry of the backends collected, with the default chosen: the
// config's default_backend, else the config's only backend, else the mock (Auto).
func (b *builder) registry() (*Backends, error) {
	cfg := b.o.Config
	set := &Backends{Infos: b.infos, tools: b.tools, Warnings: b.tools.base.Warnings()}
	def := "mock"
	chosen := cfg.DefaultBackend
	if chosen == "" && len(cfg.Backends) == 1 {
		// The one backend a newcomer configured is the one they mean.
		for id := range cfg.Backends {
			chosen = id
		}
	}
	if chosen != "" {
		def = chosen
		if e := cfg.Backends[def]; e.Type == "mock" || e.Type == "mockfile" && e.MockFile == "" {
			def = e.Type
		}
	} else {
		set.Auto = true
		set.Unchosen = slices.Sorted(maps.Keys(cfg.Backends))
	}
	set.Registry = adapters.NewRegistry(def, b.bs...)
	if _, err := set.Registry.Get(""); err != nil {
		return nil, fmt.Errorf("%s: default_backend %q: %v", cfg.Path, cfg.DefaultBackend, err)
	}
	for i := range set.Infos {
		set.Infos[i].Default = set.Infos[i].ID == set.Registry.Default()
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

// proxyOnly is a backend that serves luft's proxy and not luft's own agents: an agent
// call on it fails, saying so.
type proxyOnly struct{ id string }

func (p proxyOnly) ID() string { return p.id }

func (p proxyOnly) Run(context.Context, agent.Request, adapters.Call) (agent.Result, error) {
	return agent.Result{}, fmt.Errorf("backend %q is of type anthropic: it serves the proxy's Anthropic Messages door (POST /v1/messages, for Claude Code and other Anthropic clients), not luft's own agents; give the agent an openai, acp or mock backend", p.id)
}
