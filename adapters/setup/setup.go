package setup

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/acp"
	"github.com/luft-run/luft/adapters/tools"
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
	cfg, mockFile, protected, getenv := o.Config, o.MockFile, o.Protected, o.Getenv
	mcfg, err := adapters.ParseMockEnv(getenv)
	if err != nil {
		return nil, err
	}
	set := &Backends{}
	toolset, err := newToolset(cfg, protected)
	if err != nil {
		return nil, fmt.Errorf("%s: [tools]: %v", configName(cfg), err)
	}
	set.tools = toolset
	set.Warnings = toolset.base.Warnings()
	bs := []adapters.Backend{adapters.NewMock(mcfg)}
	set.Infos = append(set.Infos, Info{ID: "mock", Type: "mock", Source: "built-in", Model: adapters.MockModel})
	if mockFile != "" {
		mf, err := adapters.OpenMockFile(mockFile)
		if err != nil {
			return nil, err
		}
		bs = append(bs, mf)
		set.Infos = append(set.Infos, Info{ID: "mockfile", Type: "mockfile", Source: "--mock-file " + mockFile})
	}
	if base, key := getenv("OPENAI_BASE_URL"), getenv("OPENAI_API_KEY"); base != "" || key != "" {
		o, err := adapters.NewOpenAI(adapters.OpenAIConfig{BaseURL: base, APIKey: key, Model: getenv("LUFT_MODEL"), Tools: toolset})
		if err != nil {
			return nil, fmt.Errorf("OPENAI_BASE_URL/OPENAI_API_KEY: %v", err)
		}
		bs = append(bs, o)
		set.Infos = append(set.Infos, Info{ID: "openai", Type: "openai", Source: "environment", BaseURL: o.BaseURL(), Model: getenv("LUFT_MODEL")})
	}
	// The coding agents luft knows by name; a [backends.NAME] may configure them further.
	for _, name := range acp.BuiltinNames() {
		if _, configured := cfg.Backends[name]; configured {
			continue
		}
		c, _ := acp.Builtin(name)
		b, err := acp.New(acpPolicy(c, cfg, protected))
		if err != nil {
			return nil, fmt.Errorf("%s: [tools]: %v", configName(cfg), err)
		}
		bs = append(bs, b)
		set.Infos = append(set.Infos, Info{ID: name, Type: "acp", Source: "built-in", BaseURL: strings.Join(append([]string{c.Command}, c.Args...), " ")})
	}
	for _, id := range slices.Sorted(maps.Keys(cfg.Backends)) {
		b := cfg.Backends[id]
		info := Info{ID: id, Type: b.Type, Source: cfg.Path, Model: b.Model}
		switch {
		case b.Type == "openai":
			keyEnv := b.APIKeyEnv
			if keyEnv == "" {
				keyEnv = "OPENAI_API_KEY"
			}
			base := b.BaseURL
			if base == "" {
				base = getenv("OPENAI_BASE_URL")
			}
			o, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: id, BaseURL: base, APIKey: getenv(keyEnv), Model: b.Model,
				PriceInPerMTok: b.PriceInputPerMTok, PriceOutPerMTok: b.PriceOutputPerMTok,
				Tools: toolset, MaxTurns: b.MaxTurns, NoStream: b.Stream != nil && !*b.Stream, Replicas: b.Replicas, StructuredOutput: b.StructuredOutput})
			if err != nil {
				return nil, fmt.Errorf("%s: backends.%s: %v", cfg.Path, id, err)
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
				return nil, fmt.Errorf("%s: backends.%s: %v", configName(cfg), id, err)
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
			c.Model, c.IdleTimeout, c.PassEnv = b.Model, b.IdleTimeout, b.Env
			a, err := acp.New(acpPolicy(c, cfg, protected))
			if err != nil {
				return nil, fmt.Errorf("%s: backends.%s: %v", configName(cfg), id, err)
			}
			info.BaseURL = strings.Join(append([]string{c.Command}, c.Args...), " ")
			bs = append(bs, a)
		}
		set.Infos = append(set.Infos, info)
	}
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
		if b := cfg.Backends[def]; b.Type == "mock" || b.Type == "mockfile" && b.MockFile == "" {
			def = b.Type
		}
	} else {
		set.Auto = true
		set.Unchosen = slices.Sorted(maps.Keys(cfg.Backends))
	}
	set.Registry = adapters.NewRegistry(def, bs...)
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
