package tools

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// BaseEnv are the variables every process luft starts (run_command's commands, MCP
// servers, coding agents) gets from luft's environment: what programs need to find
// things and speak the user's language, and nothing that authenticates. "LC_*" stands
// for every locale variable.
var BaseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TERM", "TZ", "TMPDIR"}

// ChildEnv is the environment of a process luft starts: from environ (luft's, as
// os.Environ gives it) only the variables BaseEnv and pass name, then set on top. A name
// ending in "*" passes every variable with that prefix. Everything else — API keys,
// tokens, cloud credentials — stays with luft: the list says what goes, not what stays.
func ChildEnv(environ []string, pass []string, set map[string]string) []string {
	keep := func(name string) bool {
		for _, list := range [][]string{BaseEnv, pass} {
			for _, p := range list {
				if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(name, prefix) || p == name {
					return true
				}
			}
		}
		return false
	}
	var out []string
	seen := map[string]int{}
	add := func(name, kv string) {
		if i, ok := seen[name]; ok {
			out[i] = kv // the last value wins, as in exec.Cmd.Env
			return
		}
		seen[name] = len(out)
		out = append(out, kv)
	}
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if ok && name != "" && keep(name) {
			add(name, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		add(k, k+"="+set[k])
	}
	return out
}

// CheckEnvNames checks names for ChildEnv's pass list: variable names, optionally ending
// in "*". where names the list in errors (e.g. "[tools] env").
func CheckEnvNames(where string, names []string) error {
	for _, n := range names {
		base := strings.TrimSuffix(n, "*")
		if base == "" || strings.ContainsAny(base, "=*\x00 ") {
			return fmt.Errorf("%s: %q is not an environment variable name (give names such as \"GOPATH\", or a prefix such as \"GO*\")", where, n)
		}
	}
	return nil
}
