package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/testkit"
)

// TestInstallAgentCLIs runs testdata/agents/*.txtar: `luft install` into a temporary HOME,
// then each coding agent's own CLI (pinned in internal/testkit/node) lists what it finds
// there: its MCP servers and, where the CLI can show them offline, its skills. The agents
// get no network: their API base URLs and proxies point at a closed loopback port and
// their telemetry, update checks and model downloads are off; every command is bounded by
// exitwithin.
func TestInstallAgentCLIs(t *testing.T) {
	bins := map[string]string{
		"CLAUDE":   testkit.NodeFile(t, ".bin/claude"),
		"CODEX":    testkit.NodeFile(t, ".bin/codex"),
		"OPENCODE": testkit.NodeFile(t, "opencode-linux-x64/bin/opencode"),
		"GEMINI":   testkit.NodeFile(t, ".bin/gemini"),
	}
	p := scriptParams(t)
	p.Dir = filepath.Join("testdata", "agents")
	p.Cmds["exitwithin"] = cmdExitwithin
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		for k, v := range bins {
			env.Setenv(k, v)
		}
		// Claude Code and OpenCode check a server by starting it: `luft mcp serve` starts
		// the state dir's daemon, which must not outlive the script.
		state := env.Getenv("LUFT_HOME")
		env.Defer(func() {
			if _, err := os.Stat(filepath.Join(state, daemon.SocketFile)); err == nil {
				out, err := exec.Command(luftBinary(t), "--state-dir", state, "daemon", "stop").CombinedOutput()
				if err != nil {
					t.Errorf("stopping the daemon the agents' checks started: %v\n%s", err, out)
				}
			}
		})
		const closed = "http://127.0.0.1:9" // the discard port: nothing listens there
		for k, v := range map[string]string{
			"HOME":                   filepath.Join(env.WorkDir, "home"),
			"ANTHROPIC_BASE_URL":     closed,
			"OPENAI_BASE_URL":        closed,
			"GOOGLE_GEMINI_BASE_URL": closed,
			"HTTP_PROXY":             closed,
			"HTTPS_PROXY":            closed,
			"ALL_PROXY":              closed,
			"NO_PROXY":               "",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER":                      "1",
			"DISABLE_TELEMETRY":                        "1",
			"DISABLE_ERROR_REPORTING":                  "1",
			"OPENCODE_DISABLE_MODELS_FETCH":            "true",
			"OPENCODE_DISABLE_AUTOUPDATE":              "true",
			"OPENCODE_DISABLE_LSP_DOWNLOAD":            "true",
			"GEMINI_TELEMETRY_ENABLED":                 "false",
			"NO_UPDATE_NOTIFIER":                       "1",
		} {
			env.Setenv(k, v)
		}
		return nil
	}
	testscript.Run(t, p)
}
