package proxy

import (
	"strings"
	"testing"

	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/scheduler"
)

func TestFromConfig(t *testing.T) {
	cfg, err := config.Parse("luft.toml", []byte(`
default_backend = "any"
[backends.groq]
type = "openai"
base_url = "https://api.groq.com/openai/v1"
model = "llama"
api_key_env = "GROQ_KEY"
fallback = "local"
price_input_per_mtok = 0.5
[backends.local]
type = "openai"
base_url = "http://127.0.0.1:8000/v1"
model = "qwen"
replicas = ["http://127.0.0.1:8001/v1"]
[backends.any]
type = "openai"
base_url = "http://127.0.0.1:9000/v1"
[backends.mocked]
type = "mock"
`))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GROQ_KEY": "gsk-1", "OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://127.0.0.1:7000/v1", "LUFT_MODEL": "envm"}
	ups, def := FromConfig(cfg, func(k string) string { return env[k] })
	var names []string
	byName := map[string]Upstream{}
	for _, u := range ups {
		names = append(names, u.Name)
		byName[u.Name] = u
	}
	if strings.Join(names, ",") != "any,groq,local,openai" || def != "any" {
		t.Fatalf("upstreams %v, default %q", names, def)
	}
	if g := byName["groq"]; g.APIKey != "gsk-1" || g.Fallback != "local" || g.PriceInPerMTok != 0.5 || g.Model != "llama" {
		t.Errorf("groq: %+v", g)
	}
	// No api_key_env: the client's own key goes upstream, never OPENAI_API_KEY.
	if l := byName["local"]; l.APIKey != "" || len(l.Replicas) != 1 {
		t.Errorf("local: %+v", l)
	}
	if o := byName["openai"]; o.BaseURL != "http://127.0.0.1:7000/v1" || o.Model != "envm" || o.APIKey != "" {
		t.Errorf("openai from the environment: %+v", o)
	}
	p, err := New(Options{Upstreams: ups, Default: def, Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for model, want := range map[string]string{"llama": "groq", "qwen": "local", "envm": "openai", "whatever": "any"} {
		if u := p.upstreamOf(FamilyOpenAI, model); u == nil || u.Name != want {
			t.Errorf("model %s goes to %v, want %s", model, u, want)
		}
	}
}

// An upstream's URLs come from the environment (OPENAI_BASE_URL) or a Go caller as well as
// the config file: New refuses one that is not an http(s) URL with a host, naming it.
func TestNewRefusesBadUpstreamURLs(t *testing.T) {
	long := "http://" + strings.Repeat("a", 1<<20) + ".test/v1"
	for _, c := range []struct {
		up   Upstream
		want string
	}{
		{Upstream{Name: "openai", BaseURL: "not a url"}, `upstream "openai": base URL: not an http or https URL`},
		{Upstream{Name: "openai", BaseURL: ""}, `upstream "openai": base URL: not an http or https URL`},
		{Upstream{Name: "x", BaseURL: "file:///etc/passwd"}, `upstream "x": base URL: not an http or https URL: "file:///etc/passwd"`},
		{Upstream{Name: "x", BaseURL: "http:///v1"}, `upstream "x": base URL: URL has no host`},
		{Upstream{Name: "x", BaseURL: "http://127.0.0.1:1/v1", Replicas: []string{"http://127.0.0.1:2/v1", "ftp://h/"}},
			`upstream "x": replica 2: not an http or https URL`},
		{Upstream{Name: "x", BaseURL: "http://a\x00b/v1"}, `upstream "x": base URL:`},
		{Upstream{Name: "x", BaseURL: long}, ""}, // long but well formed: accepted
	} {
		p, err := New(Options{Upstreams: []Upstream{c.up}, Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
		if c.want == "" {
			if err != nil {
				t.Errorf("%.40q: %v", c.up.BaseURL, err)
			} else {
				p.Close()
			}
			continue
		}
		if err == nil {
			p.Close()
			t.Errorf("%.40q: accepted", c.up.BaseURL)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: %v, want %s", c.up.BaseURL, err, c.want)
		}
	}
}
