package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/internal/testkit/acpfake"
)

// A coding agent over ACP, end to end through `luft run`: a [backends.NAME] of type acp
// whose command is the fake agent. A plain prompt, a structured answer, a session
// continued by a later call (in a new agent process), an edit inside the workspace
// allowed and one outside refused, a command outside the allow-list refused. The fake's
// ground-truth log says what it received and how its permission requests were answered.
func TestCodingAgentOverACP(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	logPath := filepath.Join(dir, "acp.jsonl")
	for _, d := range []string{ws, filepath.Join(dir, "sessions")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, dir, map[string]string{
		"luft.toml": fmt.Sprintf(`[backends.coder]
type = "acp"
command = %q
args = [%q]
env = ["LUFT_FAKE_ACP_*", "GORACE"]
[tools]
workspace = %q
allow_commands = ["go test"]
`, self, fakeACPArg, ws),
		"wf.lua": `function main()
  local a = agent{backend = "coder", prompt = "hello there"}
  local b = agent{backend = "coder", prompt = "answer in JSON", schema = {type = "object", required = {"ok"}}}
  local c = agent{backend = "coder", prompt = "and then?", session_id = a.session_id}
  local d = agent{backend = "coder", prompt = "EDIT notes.txt\nEDIT ../escape.txt\nRUN rm -rf /\nRUN go test ./..."}
  report({a = a.text, ok = b.output.ok, same = c.session_id == a.session_id, c = c.text, d = d.ok})
end`,
	})
	out := mustLuft(t, dir, []string{acpfake.EnvLog + "=" + logPath, acpfake.EnvState + "=" + filepath.Join(dir, "sessions")},
		"--state-dir", filepath.Join(dir, "st"), "run", "-q", "-w", "wf.lua")
	for _, want := range []string{`"ok": true`, `"same": true`, `"d": true`, `"a": "echo: hello there"`, `(turn 2 of session`} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %s:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || !strings.Contains(string(b), "edited by luft-fake-acp") {
		t.Errorf("the edit inside the workspace did not happen: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "escape.txt")); err == nil {
		t.Error("the edit outside the workspace happened")
	}
	log, err := acpfake.ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var loads int
	outcomes := map[string]string{}
	for _, e := range log {
		switch e.Method {
		case "session/load":
			loads++
		case "session/request_permission":
			outcomes[e.Title+" "+e.Path] = e.Outcome
		}
	}
	if loads != 1 {
		t.Errorf("the agent saw %d session/load, want 1 (the continued session)", loads)
	}
	var got []string
	for k, v := range outcomes {
		got = append(got, k+"="+v)
	}
	text := strings.Join(got, "\n")
	for _, want := range []string{"notes.txt=allow_once", "escape.txt=reject_once", "`rm -rf /` =reject_once", "`go test ./...` =allow_once"} {
		if !strings.Contains(text, want) {
			t.Errorf("permission outcomes lack %q:\n%s", want, text)
		}
	}
}
