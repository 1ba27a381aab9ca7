package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/luft-run/luft/adapters/tools/sandbox"
)

// Secrets are the well-known places of a user's credentials, relative to the home
// folder. A command never reads them, even where a folder it may read holds them (a
// workspace that is the home folder, [tools] readable = ["~"]), unless [tools] readable
// names one of them, or a path inside one, itself.
var Secrets = []string{
	".ssh", ".aws", ".gnupg", ".netrc", ".config/gh", ".config/hub", ".docker", ".kube", ".azure",
	".config/gcloud", ".npmrc", ".yarnrc", ".pypirc", ".git-credentials", ".cargo/credentials",
	".cargo/credentials.toml", ".password-store", ".local/share/keyrings", ".terraform.d", ".vault-token",
	".pgpass", ".my.cnf", ".s3cfg", ".boto", ".config/rclone", ".oci", ".m2/settings.xml",
	".gradle/gradle.properties", ".config/op", ".config/luft", ".codex", ".claude", ".claude.json",
	".config/opencode", ".local/share/opencode", ".gemini", ".config/github-copilot",
	".config/git/credentials", ".config/containers/auth.json", ".local/share/uv/credentials",
}

// toolCaches are folders under the home folder that programs need to read to run: the
// toolchains and package caches of the common languages, and git's and go's settings.
// Each is readable to commands when it exists.
var toolCaches = []string{
	"go", ".cargo", ".rustup", ".npm", ".nvm", ".pyenv", ".rbenv", ".local/bin", ".local/lib",
	".sdkman", ".volta", ".deno", ".bun", ".gitconfig", ".config/git", ".config/go",
}

// toolEnvDirs are variables that name where a toolchain lives, when it is not in the
// usual place.
var toolEnvDirs = []string{"GOROOT", "GOPATH", "GOMODCACHE", "CARGO_HOME", "RUSTUP_HOME", "NVM_DIR", "PYENV_ROOT"}

// confinement is what a Set's commands may reach, resolved once by New.
type confinement struct {
	readable   []string // [tools] readable, absolute and resolved
	caches     []string // toolCaches and toolEnvDirs and PATH's folders: read only
	hide       []string // protected paths and Secrets not named by readable
	ports      []uint16
	anyPort    bool
	unconfined bool
}

// newConfinement resolves [tools] readable and network against the workspace and home.
func newConfinement(ws workspace, cfg Config, protected []string) (confinement, error) {
	var c confinement
	home, _ := os.UserHomeDir()
	for _, r := range cfg.Readable {
		if strings.ContainsRune(r, 0) || r == "" {
			return c, fmt.Errorf("tools: readable %q is not a path (name a folder or file, e.g. \"~/data\")", r)
		}
		if err := CheckPathLen(r); err != nil {
			return c, fmt.Errorf("tools: readable: %v", err)
		}
		p, err := expandHome(r, home)
		if err != nil {
			return c, fmt.Errorf("tools: readable %q: %v", r, err)
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(ws.dir, p)
		}
		p = ResolveExisting(filepath.Clean(p))
		for _, pr := range protected {
			if Within(pr, p) {
				return c, fmt.Errorf("tools: readable %q: %s is luft's own state or config (%s), which commands never read: remove it from [tools] readable", r, p, pr)
			}
		}
		c.readable = append(c.readable, p)
	}
	c.hide = append(c.hide, protected...)
	if home != "" {
		for _, s := range Secrets {
			p := filepath.Join(home, s)
			if !slices.ContainsFunc(c.readable, func(r string) bool { return Within(p, r) }) {
				c.hide = append(c.hide, p)
			}
		}
		c.caches = append(c.caches, programDirs(home)...)
	}
	for _, n := range cfg.Network {
		switch n = strings.TrimSpace(n); {
		case n == "*" || n == "all":
			c.anyPort = true
		default:
			port, err := strconv.ParseUint(strings.TrimPrefix(n, "tcp:"), 10, 16)
			if err != nil || port == 0 {
				return c, fmt.Errorf("tools: network %q is not a TCP port (give port numbers such as 443, or \"all\" to let commands connect anywhere)", n)
			}
			c.ports = append(c.ports, uint16(port))
		}
	}
	c.unconfined = cfg.Unconfined
	return c, nil
}

// programDirs are the folders commands read programs and tools from besides the system's:
// PATH's folders and the toolchains' (toolCaches, toolEnvDirs). A folder that is, or
// holds, the home folder or the root is left out: it would open everything below it.
func programDirs(home string) []string {
	var cands []string
	cands = append(cands, filepath.SplitList(os.Getenv("PATH"))...)
	for _, c := range toolCaches {
		cands = append(cands, filepath.Join(home, c))
	}
	for _, v := range toolEnvDirs {
		cands = append(cands, os.Getenv(v))
	}
	var out []string
	for _, d := range cands {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if d == "/" || Within(d, home) {
			continue
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

func expandHome(p, home string) (string, error) {
	if rest, ok := strings.CutPrefix(p, "~/"); ok || p == "~" {
		if home == "" {
			return "", fmt.Errorf("no home folder to expand ~ in")
		}
		return filepath.Join(home, rest), nil
	}
	return p, nil
}

// policy is the sandbox policy of one command: it writes the workspace, tmp, the
// command cache and [tools] writable; it reads those, the system's folders, the
// program's own folder and the tool caches; it reaches the ports [tools] network names.
func (e *env) policy(program, tmp, cache string) sandbox.Policy {
	c := e.conf
	write := append([]string{e.ws.real, tmp}, e.writable...)
	if cache != "" {
		write = append(write, cache)
	}
	read := append(slices.Clone(c.caches), c.readable...)
	if dir := filepath.Dir(program); filepath.IsAbs(program) && dir != "/" {
		if home, _ := os.UserHomeDir(); home == "" || !Within(dir, home) {
			read = append(read, dir)
		}
	}
	return sandbox.Policy{Write: write, Read: read, Hide: c.hide, Ports: c.ports, AnyPort: c.anyPort, Unconfined: c.unconfined}
}
