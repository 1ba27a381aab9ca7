package proxy

import (
	"maps"
	"slices"

	"github.com/luft-run/luft/config"
)

// FromConfig returns the upstreams the configuration offers the proxy — every
// [backends.NAME] of type openai or anthropic, and the "openai" backend OPENAI_BASE_URL
// makes when no entry has that name — and the name of the default one (default_backend,
// or the only one). An anthropic backend without base_url is Anthropic's API. A backend's key is luft's only when its entry names one (api_key_env):
// otherwise the client's own Authorization goes upstream — to that backend, or to a
// fallback at the same host, never to a fallback at another host (see Upstream.APIKey).
func FromConfig(cfg config.Config, getenv func(string) string) (ups []Upstream, def string) {
	for _, name := range slices.Sorted(maps.Keys(cfg.Backends)) {
		b := cfg.Backends[name]
		if b.Type != FamilyOpenAI && b.Type != FamilyAnthropic {
			continue
		}
		base := b.BaseURL
		if b.Type == FamilyAnthropic {
			// Not ANTHROPIC_BASE_URL: in a shell set up for Claude Code that points at luft.
			if base == "" {
				base = "https://api.anthropic.com/v1"
			}
		} else {
			if base == "" {
				base = getenv("OPENAI_BASE_URL")
			}
			if base == "" {
				base = "https://api.openai.com/v1"
			}
		}
		u := Upstream{Name: name, Family: b.Type, BaseURL: base, Replicas: slices.Clone(b.Replicas), Model: b.Model,
			Fallback: b.Fallback, PriceInPerMTok: b.PriceInputPerMTok, PriceOutPerMTok: b.PriceOutputPerMTok}
		if b.APIKeyEnv != "" {
			u.APIKey = getenv(b.APIKeyEnv)
		}
		ups = append(ups, u)
	}
	if _, taken := cfg.Backends["openai"]; !taken {
		if base := getenv("OPENAI_BASE_URL"); base != "" {
			ups = append(ups, Upstream{Name: "openai", BaseURL: base, Model: getenv("LUFT_MODEL")})
		}
	}
	def = cfg.DefaultBackend
	if def == "" && len(ups) == 1 {
		def = ups[0].Name
	}
	// A fallback must be an upstream the proxy knows.
	known := map[string]bool{}
	for _, u := range ups {
		known[u.Name] = true
	}
	for i := range ups {
		if !known[ups[i].Fallback] {
			ups[i].Fallback = ""
		}
	}
	return ups, def
}
