package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
)

// A luft process killed with SIGKILL in the middle of an agent's tool loop — its
// run_command has run, the model's next turn is under way — resumes without running the
// command again: the command appends a line to a file and counts the lines, and after the
// resume the file has one line and every tool result the engine was sent says 1.
func TestKilledMidToolLoopResumesWithoutRerunningTheTool(t *testing.T) {
	t.Parallel()
	engine := testkit.NewEngine(testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "count the lines", Calls: []testkit.ScriptedCall{{Name: "run_command",
			Arguments: `{"command":"sh","args":["-c","echo line >> log.txt; wc -l < log.txt"]}`}}, Reply: "counted"},
	}})
	var (
		hold    atomic.Bool
		once    sync.Once
		holding = make(chan struct{})
	)
	hold.Store(true)
	inner := testkit.NewServer(engine).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req testkit.ChatRequest
		if hold.Load() && json.Unmarshal(body, &req) == nil && len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool" {
			// The model's turn after the tool: it never answers while the process lives.
			once.Do(func() { close(holding) })
			<-r.Context().Done()
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	writeFiles(t, dir, map[string]string{
		"ws/.keep":  "",
		"luft.toml": localBackend(srv.URL+"/v1", "m", fmt.Sprintf("[tools]\nworkspace = %q\nallow_commands = [\"sh\"]\n", ws)),
		"wf.lua":    `function main() report(agent{prompt = "count the lines", tools = {"run_command"}}.text) end`,
	})
	state := filepath.Join(dir, "st")
	cmd := exec.Command(luftBinary(t), "--state-dir", state, "run", "-q", "-w", "wf.lua")
	cmd.Dir = dir
	cmd.Env = testEnv(nil, "OPENAI_API_KEY=k")
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-holding:
	case err := <-exited:
		t.Fatalf("luft ended (%v) before the model's turn after the tool\n%s", err, errOut.String())
	case <-time.After(lineTimeout):
		_ = cmd.Process.Kill()
		t.Fatalf("the model's turn after the tool never came\n%s", errOut.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited

	hold.Store(false)
	out := mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", state, "run", "-q", "--resume")
	if !strings.Contains(out, "counted") {
		t.Fatalf("the resumed run's report: %q", out)
	}
	b, err := os.ReadFile(filepath.Join(ws, "log.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "line\n" {
		t.Fatalf("log.txt is %q after the resume: run_command ran again", b)
	}
	n := 0
	for _, r := range engine.Log() {
		for _, m := range r.Messages {
			if m.Role == "tool" {
				n++
				if got := strings.TrimSpace(strings.TrimSuffix(string(m.Content), "[exit 0]")); got != "1" {
					t.Errorf("the engine was sent the tool result %q", m.Content)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the resumed run sent the engine no tool result")
	}
}
