package agentinstall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/luft-run/luft/skills"
)

const testBinary = "/opt/luft/bin/luft"

var testNow = time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC)

// home is a temporary home folder with the given agents' config folders present.
func home(t *testing.T, agents ...string) string {
	t.Helper()
	h := t.TempDir()
	dirs := map[string]string{Claude: ".claude", Codex: ".codex", OpenCode: ".config/opencode", Gemini: ".gemini"}
	for _, a := range agents {
		if err := os.MkdirAll(filepath.Join(h, dirs[a]), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func run(t *testing.T, h string, env map[string]string, mod func(*Options)) (string, error) {
	t.Helper()
	var out bytes.Buffer
	o := Options{
		Home:   h,
		Getenv: func(k string) string { return env[k] },
		Binary: testBinary,
		Now:    func() time.Time { return testNow },
		Out:    &out,
	}
	if mod != nil {
		mod(&o)
	}
	err := Run(context.Background(), o)
	return out.String(), err
}

func mustRun(t *testing.T, h string, mod func(*Options)) string {
	t.Helper()
	out, err := run(t, h, nil, mod)
	if err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out)
	}
	return out
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s is not JSON: %v\n%s", path, err, b)
	}
	return v
}

func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// snapshot is every file under dir with its content, to show what a run changed.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
		case d.IsDir():
			out[rel+"/"] = ""
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if a, ok := after[k]; !ok || a != v {
			t.Errorf("%s changed or went", k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s appeared", k)
		}
	}
}

func TestInstallEachAgent(t *testing.T) {
	args := []any{"mcp", "serve"}
	tests := []struct {
		agent  string
		config string
		skill  string
		check  func(t *testing.T, path string)
	}{{
		agent: Claude, config: ".claude.json", skill: ".claude/skills",
		check: func(t *testing.T, path string) {
			e := dig(readJSON(t, path), "mcpServers", "luft")
			want := map[string]any{"type": "stdio", "command": testBinary, "args": args}
			if !jsonDeepEqual(e, want) {
				t.Fatalf("mcpServers.luft = %v, want %v", e, want)
			}
		},
	}, {
		agent: Codex, config: ".codex/config.toml", skill: ".agents/skills",
		check: func(t *testing.T, path string) {
			var v struct {
				MCPServers map[string]struct {
					Command string
					Args    []string
				} `toml:"mcp_servers"`
			}
			if _, err := toml.DecodeFile(path, &v); err != nil {
				t.Fatal(err)
			}
			if e := v.MCPServers["luft"]; e.Command != testBinary || !slices.Equal(e.Args, []string{"mcp", "serve"}) {
				t.Fatalf("[mcp_servers.luft] = %+v", e)
			}
		},
	}, {
		agent: OpenCode, config: ".config/opencode/opencode.json", skill: ".agents/skills",
		check: func(t *testing.T, path string) {
			e := dig(readJSON(t, path), "mcp", "luft")
			want := map[string]any{"type": "local", "command": []any{testBinary, "mcp", "serve"}, "enabled": true}
			if !jsonDeepEqual(e, want) {
				t.Fatalf("mcp.luft = %v, want %v", e, want)
			}
		},
	}, {
		agent: Gemini, config: ".gemini/settings.json", skill: ".agents/skills",
		check: func(t *testing.T, path string) {
			e := dig(readJSON(t, path), "mcpServers", "luft")
			want := map[string]any{"command": testBinary, "args": args}
			if !jsonDeepEqual(e, want) {
				t.Fatalf("mcpServers.luft = %v, want %v", e, want)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.agent, func(t *testing.T) {
			h := home(t, tc.agent)
			empty := snapshot(t, h)

			dry := mustRun(t, h, func(o *Options) { o.DryRun = true })
			sameTree(t, empty, snapshot(t, h))
			if !strings.Contains(dry, "+++ "+filepath.Join(h, tc.config)) || !strings.Contains(dry, "dry run: nothing was written") {
				t.Fatalf("dry run output lacks the diff:\n%s", dry)
			}

			out := mustRun(t, h, nil)
			if !strings.Contains(out, tc.agent+": registered luft ("+testBinary+" mcp serve) in "+filepath.Join(h, tc.config)) {
				t.Fatalf("output:\n%s", out)
			}
			tc.check(t, filepath.Join(h, tc.config))
			skillDir := filepath.Join(h, tc.skill, skills.Name)
			for _, n := range skills.Files() {
				got, err := os.ReadFile(filepath.Join(skillDir, n))
				want, _ := skills.Read(n)
				if err != nil || string(got) != want {
					t.Fatalf("skill file %s: %v", n, err)
				}
			}
			installed := snapshot(t, h)

			again := mustRun(t, h, nil)
			if !strings.Contains(again, "luft already registered; unchanged") || !strings.HasSuffix(again, "nothing to change\n") {
				t.Fatalf("second run:\n%s", again)
			}
			sameTree(t, installed, snapshot(t, h))

			gone := mustRun(t, h, func(o *Options) { o.Uninstall = true })
			if !strings.Contains(gone, tc.agent+": removed luft from") || !strings.Contains(gone, "skill removed from") {
				t.Fatalf("uninstall output:\n%s", gone)
			}
			if _, err := os.Stat(skillDir); !os.IsNotExist(err) {
				t.Fatalf("the skill folder is still there: %v", err)
			}
			if tc.check != nil {
				if e := configEntry(t, filepath.Join(h, tc.config)); e {
					t.Fatal("luft is still registered after --uninstall")
				}
			}
		})
	}
}

func jsonDeepEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// configEntry reports whether a written config still mentions luft's entry.
func configEntry(t *testing.T, path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte("luft"))
}

func TestInstallKeepsTheUsersSettingsAndBacksUp(t *testing.T) {
	h := home(t, Claude, Codex)
	claudeJSON := "{\n  \"numStartups\": 7,\n  \"mcpServers\": {\n    \"github\": {\n      \"type\": \"http\",\n      \"url\": \"https://example.test/mcp\"\n    }\n  },\n  \"zzz\": [1, 2.50]\n}\n"
	codexTOML := "# mine\nmodel = \"o3\" # best\n\n[mcp_servers.docs]\ncommand = \"docs-mcp\"\n"
	write(t, filepath.Join(h, ".claude.json"), claudeJSON)
	write(t, filepath.Join(h, ".codex/config.toml"), codexTOML)

	out := mustRun(t, h, nil)
	stamp := ".luft-backup-20261201T170000Z"
	for _, f := range []string{".claude.json", ".codex/config.toml"} {
		if !strings.Contains(out, "backup: "+filepath.Join(h, f)+stamp) {
			t.Fatalf("output does not name the backup of %s:\n%s", f, out)
		}
	}
	if got := read(t, filepath.Join(h, ".claude.json"+stamp)); got != claudeJSON {
		t.Fatalf("backup differs from the original:\n%s", got)
	}
	if got := read(t, filepath.Join(h, ".codex/config.toml"+stamp)); got != codexTOML {
		t.Fatalf("backup differs from the original:\n%s", got)
	}
	got := read(t, filepath.Join(h, ".claude.json"))
	if !strings.HasPrefix(got, "{\n  \"numStartups\": 7,\n  \"mcpServers\": {\n    \"github\": {") || !strings.Contains(got, "2.50") {
		t.Fatalf("the user's keys moved or changed:\n%s", got)
	}
	if got := read(t, filepath.Join(h, ".codex/config.toml")); !strings.HasPrefix(got, codexTOML) {
		t.Fatalf("codex config lost the user's text:\n%s", got)
	}

	// A second backup in the same second gets its own name; uninstall restores the bytes.
	mustRun(t, h, func(o *Options) { o.Uninstall = true })
	if _, err := os.Stat(filepath.Join(h, ".claude.json"+stamp+"-2")); err != nil {
		t.Fatalf("second backup: %v", err)
	}
	if got := read(t, filepath.Join(h, ".claude.json")); got != claudeJSON {
		t.Fatalf("uninstall did not give back the original:\n%s\nwant\n%s", got, claudeJSON)
	}
	if got := read(t, filepath.Join(h, ".codex/config.toml")); got != codexTOML {
		t.Fatalf("uninstall did not give back the original:\n%q\nwant\n%q", got, codexTOML)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestInstallRefusesAndWritesNothing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, h string)
		err   string
	}{{
		name: "malformed JSON",
		setup: func(t *testing.T, h string) {
			write(t, filepath.Join(h, ".gemini/settings.json"), "{\n  \"a\": 1,\n}\n")
		},
		err: "gemini: " + "%H/.gemini/settings.json: not valid JSON (line 3, column 1",
	}, {
		name:  "malformed TOML",
		setup: func(t *testing.T, h string) { write(t, filepath.Join(h, ".codex/config.toml"), "[mcp_servers\n") },
		err:   "codex: %H/.codex/config.toml: TOML:",
	}, {
		name: "read-only config",
		setup: func(t *testing.T, h string) {
			p := filepath.Join(h, ".claude.json")
			write(t, p, "{}")
			if err := os.Chmod(p, 0o444); err != nil {
				t.Fatal(err)
			}
		},
		err: "%H/.claude.json is read-only; make it writable (chmod u+w",
	}, {
		name: "read-only config folder",
		setup: func(t *testing.T, h string) {
			write(t, filepath.Join(h, ".codex/config.toml"), "model = \"o3\"\n")
			if err := os.Chmod(filepath.Join(h, ".codex"), 0o555); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(filepath.Join(h, ".codex"), 0o755) })
		},
		err: "the folder %H/.codex is read-only",
	}, {
		name: "dangling symlink",
		setup: func(t *testing.T, h string) {
			if err := os.Symlink(filepath.Join(h, "nowhere.json"), filepath.Join(h, ".gemini/settings.json")); err != nil {
				t.Fatal(err)
			}
		},
		err: "%H/.gemini/settings.json is a symlink luft cannot follow",
	}, {
		name: "symlink loop",
		setup: func(t *testing.T, h string) {
			a, b := filepath.Join(h, ".gemini/settings.json"), filepath.Join(h, ".gemini/other.json")
			if err := errors.Join(os.Symlink(b, a), os.Symlink(a, b)); err != nil {
				t.Fatal(err)
			}
		},
		err: "%H/.gemini/settings.json is a symlink luft cannot follow",
	}, {
		name: "a FIFO is not read (it would block)",
		setup: func(t *testing.T, h string) {
			if err := syscall.Mkfifo(filepath.Join(h, ".config/opencode/opencode.json"), 0o644); err != nil {
				t.Skip("no FIFOs here:", err)
			}
		},
		err: "is not a regular file",
	}, {
		name: "a config folder in place of the file",
		setup: func(t *testing.T, h string) {
			if err := os.MkdirAll(filepath.Join(h, ".codex/config.toml"), 0o755); err != nil {
				t.Fatal(err)
			}
		},
		err: "is not a regular file",
	}, {
		name: "a huge config",
		setup: func(t *testing.T, h string) {
			f, err := os.Create(filepath.Join(h, ".claude.json"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(maxConfigSize + 1); err != nil { // sparse: no disk used
				t.Fatal(err)
			}
		},
		err: "over the 64 MiB luft reads for a config",
	}, {
		name:  "skill folder is a file",
		setup: func(t *testing.T, h string) { write(t, filepath.Join(h, ".claude/skills/luft-workflows"), "x") },
		err:   "luft-workflows is not a folder",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := home(t, Agents...)
			tc.setup(t, h)
			before := snapshot(t, h)
			out, err := run(t, h, nil, nil)
			want := strings.ReplaceAll(tc.err, "%H", h)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Fatalf("error = %v\nwant one containing %q and saying nothing was changed", err, want)
			}
			sameTree(t, before, snapshot(t, h))
			if strings.Contains(out, "registered") {
				t.Fatalf("output claims a change:\n%s", out)
			}
		})
	}
}

func TestInstallThroughSymlink(t *testing.T) {
	h := home(t, Gemini)
	target := filepath.Join(h, "dotfiles", "gemini-settings.json")
	write(t, target, "{\"theme\": \"dark\"}\n")
	link := filepath.Join(h, ".gemini/settings.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, h, nil)
	if !strings.Contains(out, "(a symlink to "+target+")") {
		t.Fatalf("output:\n%s", out)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the symlink was replaced: %v", err)
	}
	if dig(readJSON(t, target), "mcpServers", "luft", "command") != testBinary || dig(readJSON(t, target), "theme") != "dark" {
		t.Fatalf("target not edited as expected:\n%s", read(t, target))
	}
	if _, err := os.Stat(target + ".luft-backup-20261201T170000Z"); err != nil {
		t.Fatalf("no backup beside the target: %v", err)
	}
}

func TestInstallHome(t *testing.T) {
	for _, tc := range []struct{ home, err string }{
		{"", "HOME is not set"},
		{"relative/home", "not an absolute path"},
	} {
		_, err := run(t, tc.home, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("HOME=%q: error = %v, want %q", tc.home, err, tc.err)
		}
	}
}

func TestInstallDetection(t *testing.T) {
	h := t.TempDir()
	if _, err := run(t, h, nil, nil); err == nil || !strings.Contains(err.Error(), "no coding agent found") {
		t.Fatalf("no agents: %v", err)
	}
	// An agent on PATH counts, even before it made its config folder.
	bin := filepath.Join(h, "bin")
	write(t, filepath.Join(bin, "codex"), "#!/bin/sh\n")
	if err := os.Chmod(filepath.Join(bin, "codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, h, map[string]string{"PATH": "relative:" + bin}, nil)
	if err != nil || !strings.Contains(out, "codex: registered luft") || strings.Contains(out, "claude") {
		t.Fatalf("PATH detection: %v\n%s", err, out)
	}
	// A named agent is configured even when absent, with a note.
	out = mustRun(t, h, func(o *Options) { o.Agents = []string{"gemini"} })
	if !strings.Contains(out, "gemini: not detected (no "+filepath.Join(h, ".gemini")+", no gemini on PATH); configuring it anyway") {
		t.Fatalf("output:\n%s", out)
	}
	if _, err := run(t, h, nil, func(o *Options) { o.Agents = []string{"claude,vim"} }); err == nil || !strings.Contains(err.Error(), `unknown agent "vim"`) {
		t.Fatalf("unknown agent: %v", err)
	}
}

func TestInstallHonoursAgentVariables(t *testing.T) {
	h := t.TempDir()
	env := map[string]string{
		"XDG_CONFIG_HOME":   filepath.Join(h, "xdg"),
		"CODEX_HOME":        filepath.Join(h, "codexhome"),
		"CLAUDE_CONFIG_DIR": filepath.Join(h, "claudecfg"),
	}
	if _, err := run(t, h, env, func(o *Options) { o.Agents = []string{"all"} }); err == nil {
		t.Fatal("all with nothing detected should fail")
	}
	for _, d := range env {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(h, "xdg/opencode"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, h, env, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"xdg/opencode/opencode.json", "codexhome/config.toml", "claudecfg/.claude.json", "claudecfg/skills/luft-workflows/SKILL.md"} {
		if _, err := os.Stat(filepath.Join(h, p)); err != nil {
			t.Errorf("%s not written: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(h, ".claude.json")); err == nil {
		t.Error("~/.claude.json written although CLAUDE_CONFIG_DIR is set")
	}
}

// The skill folder Codex, OpenCode and Gemini CLI share stays while one of them still
// has luft registered.
func TestUninstallKeepsASharedSkill(t *testing.T) {
	h := home(t, Codex, OpenCode)
	mustRun(t, h, nil)
	out := mustRun(t, h, func(o *Options) { o.Uninstall, o.Agents = true, []string{"codex"} })
	if !strings.Contains(out, "codex: skill kept in "+filepath.Join(h, ".agents/skills/luft-workflows")+" (opencode still uses it)") {
		t.Fatalf("output:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(h, ".agents/skills/luft-workflows/SKILL.md")); err != nil {
		t.Fatal(err)
	}
	out = mustRun(t, h, func(o *Options) { o.Uninstall, o.Agents = true, []string{"opencode"} })
	if !strings.Contains(out, "opencode: skill removed from") {
		t.Fatalf("output:\n%s", out)
	}
}

// A skill file the user changed is backed up before luft replaces or removes it; luft's
// own files are replaced without one.
func TestSkillBackups(t *testing.T) {
	h := home(t, Claude)
	mustRun(t, h, nil)
	dir := filepath.Join(h, ".claude/skills/luft-workflows")
	write(t, filepath.Join(dir, "SKILL.md"), "my notes\n")
	write(t, filepath.Join(dir, "mine.md"), "keep me\n")
	out := mustRun(t, h, nil)
	if !strings.Contains(out, "skill written to "+dir+" (SKILL.md)") {
		t.Fatalf("output:\n%s", out)
	}
	backup := filepath.Join(dir, "SKILL.md.luft-backup-20261201T170000Z")
	if read(t, backup) != "my notes\n" {
		t.Fatal("the user's SKILL.md was not backed up")
	}
	mustRun(t, h, func(o *Options) { o.Uninstall = true })
	left := snapshot(t, dir)
	if _, ok := left["mine.md"]; !ok || len(left) != 3 { // ., mine.md, the backup
		t.Fatalf("after uninstall the folder holds %v; want the user's file and the backup", slices.Sorted(maps.Keys(left)))
	}
}

func TestDryRunUninstall(t *testing.T) {
	h := home(t, OpenCode)
	mustRun(t, h, nil)
	before := snapshot(t, h)
	out := mustRun(t, h, func(o *Options) { o.Uninstall, o.DryRun = true, true })
	sameTree(t, before, snapshot(t, h))
	if !strings.Contains(out, "opencode: would remove luft from") || !strings.Contains(out, "-  \"mcp\": {") || !strings.Contains(out, "skill would be removed from") {
		t.Fatalf("output:\n%s", out)
	}
}

// A config nested deeper than the JSON decoder allows is refused with its position, and a
// binary path with quotes, backslashes and a newline is written escaped: each agent's
// file still parses and names exactly that path.
func TestInstallHostileInput(t *testing.T) {
	t.Run("deep JSON", func(t *testing.T) {
		h := home(t, Gemini)
		deep := `{"a":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "}\n"
		write(t, filepath.Join(h, ".gemini/settings.json"), deep)
		before := snapshot(t, h)
		_, err := run(t, h, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "not valid JSON") || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("error = %v, want the file refused as not valid JSON", err)
		}
		sameTree(t, before, snapshot(t, h))
	})
	t.Run("odd binary path", func(t *testing.T) {
		h := home(t, Claude, Codex)
		odd := "/opt/we\"ird\\dir/new\nline/luft"
		mustRun(t, h, func(o *Options) { o.Binary = odd })
		if got := dig(readJSON(t, filepath.Join(h, ".claude.json")), "mcpServers", "luft", "command"); got != odd {
			t.Fatalf("claude command = %q, want %q", got, odd)
		}
		m, err := decodeTOML(read(t, filepath.Join(h, ".codex/config.toml")))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := lookup(m, []string{"mcp_servers", "luft", "command"}); got != odd {
			t.Fatalf("codex command = %q, want %q", got, odd)
		}
	})
}

// The problems that stop a run read one a line and stay visible to errors.Is.
func TestLineErrors(t *testing.T) {
	err := lineErrors{errors.New("codex: bad TOML"), &fs.PathError{Op: "open", Path: "x", Err: fs.ErrPermission}}
	if got, want := err.Error(), "codex: bad TOML\n  open x: permission denied"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, fs.ErrPermission) {
		t.Error("errors.Is does not see a problem's cause")
	}
}

// A skill folder whose files are luft's but whose manifest is gone or stale gets the
// manifest written again, so that a later uninstall knows the files are luft's.
func TestSkillManifestRefreshed(t *testing.T) {
	h := home(t, Claude)
	mustRun(t, h, nil)
	manifest := filepath.Join(h, ".claude/skills/luft-workflows", manifestName)
	want := read(t, manifest)
	for _, stale := range []string{"", `{"files": {"SKILL.md": "0"}}`} {
		if stale == "" {
			if err := os.Remove(manifest); err != nil {
				t.Fatal(err)
			}
		} else {
			write(t, manifest, stale)
		}
		mustRun(t, h, nil)
		if got := read(t, manifest); got != want {
			t.Fatalf("after a run over manifest %q it holds\n%s\nwant\n%s", stale, got, want)
		}
		if out := mustRun(t, h, nil); !strings.HasSuffix(out, "nothing to change\n") {
			t.Fatalf("the run after the refresh changed something:\n%s", out)
		}
	}
}
