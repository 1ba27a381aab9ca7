//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/internal/testkit"
)

// On a terminal, a call that needs approval waits and the live board asks in its
// footer: n declines (the model is told), y allows (the file is written), and the run
// completes.
func TestPTYApprovalPrompt(t *testing.T) {
	skipUnlessPTY(t)
	t.Parallel()
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "first note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"first.txt","content":"1"}`}}, Reply: "first done"},
		{Match: "second note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"second.txt","content":"2"}`}}, Reply: "second done"},
	}})
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	writeFiles(t, dir, map[string]string{
		"ws/.keep":  "",
		"luft.toml": localBackend(url, "fake-1", "[tools]\nworkspace = \""+ws+"\"\n"),
		"notes.lua": `function main()
  local a = agent{name = "first", prompt = "first note", tools = {"write_file"}}
  local b = agent{name = "second", prompt = "second note", tools = {"write_file"}}
  report(a.text .. " / " .. b.text)
end`,
	})
	r := startPTY(t, dir, ptyEnv("TERM=xterm-256color", "OPENAI_API_KEY=k"), "run", "-w", "notes.lua", "--state-dir", filepath.Join(dir, "state"))
	r.waitScreen("the prompt for first.txt", func(s string) bool {
		return strings.Contains(s, "approve write_file? y allow · n decline") && strings.Contains(s, "first.txt")
	})
	r.key("n")
	r.waitScreen("the prompt for second.txt", func(s string) bool {
		return strings.Contains(s, "approve write_file?") && strings.Contains(s, "second.txt")
	})
	r.key("y")
	if code := r.exitCode(); code != 0 {
		t.Fatalf("exit %d; the terminal:\n%s", code, r.everything())
	}
	if out := r.stdout.String(); !strings.Contains(out, "first done / second done") {
		t.Fatalf("report %q", out)
	}
	if _, err := os.Stat(filepath.Join(ws, "first.txt")); !os.IsNotExist(err) {
		t.Error("first.txt was written though the call was declined")
	}
	if b, err := os.ReadFile(filepath.Join(ws, "second.txt")); err != nil || string(b) != "2" {
		t.Errorf("second.txt: %q %v", b, err)
	}
	declined := 0
	for _, req := range engine.Log() {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" && string(last.Content) == tools.DeclinedText {
			declined++
		}
	}
	if declined != 1 {
		t.Errorf("the model was told of %d declined calls, want 1", declined)
	}
}
