package main

import (
	"bytes"
	"context"
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
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
)

// responsesFake is a scripted model behind the OpenAI Responses API, the only API Codex
// speaks to a custom provider (internal/testkit's engine serves chat completions). Each
// request is answered with the next of calls as a function call of luft's MCP namespace,
// then with a closing message; it keeps what Codex sent back for each call.
type responsesFake struct {
	calls []responsesCall

	mu      sync.Mutex
	outputs map[string]string // call_id -> the output Codex returned
	n       int
}

type responsesCall struct{ name, args string }

func (f *responsesFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Input []json.RawMessage `json:"input"`
	}
	b, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	for _, raw := range req.Input {
		var it struct {
			Type   string          `json:"type"`
			CallID string          `json:"call_id"`
			Output json.RawMessage `json:"output"`
		}
		if json.Unmarshal(raw, &it) == nil && it.Type == "function_call_output" {
			f.outputs[it.CallID] = string(it.Output)
		}
	}
	if f.n < len(f.calls) && !bytes.Contains(b, []byte(`"`+f.calls[f.n].name+`"`)) {
		// Codex asked before luft's tools were listed: a retryable error makes it ask
		// again, with the tools it has by then, instead of calling a tool it lacks.
		f.mu.Unlock()
		http.Error(w, `{"error":{"message":"the tool is not offered yet","type":"server_error"}}`, http.StatusServiceUnavailable)
		return
	}
	f.n++
	n := f.n
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	ev := func(v map[string]any) {
		d, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], d)
	}
	id := fmt.Sprintf("resp_%d", n)
	ev(map[string]any{"type": "response.created", "response": map[string]any{"id": id}})
	var item map[string]any
	if n <= len(f.calls) {
		c := f.calls[n-1]
		item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", n), "namespace": "mcp__luft", "name": c.name,
			"arguments": c.args, "call_id": fmt.Sprintf("call_%d", n)}
	} else {
		item = map[string]any{"type": "message", "role": "assistant", "id": "msg_1",
			"content": []map[string]any{{"type": "output_text", "text": "done"}}}
	}
	ev(map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	ev(map[string]any{"type": "response.completed", "response": map[string]any{"id": id,
		"usage": map[string]any{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}})
}

func (f *responsesFake) output(callID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.outputs[callID]
}

// TestCodexExecRunsLuftTools: after `luft install --agent codex`, the real Codex CLI's
// `codex exec` (which cannot ask for approval) calls luft's workflow_execute and spawn
// through luft mcp serve, without --dangerously-bypass-approvals-and-sandbox: the
// install's per-tool approval_mode lets them run. Codex's model is a scripted fake of
// the Responses API on loopback; nothing else leaves the machine.
func TestCodexExecRunsLuftTools(t *testing.T) {
	codex := testkit.NodeFile(t, ".bin/codex")
	home := t.TempDir()
	work := t.TempDir()
	fake := &responsesFake{outputs: map[string]string{}, calls: []responsesCall{
		{"workflow_execute", `{"script":"function main() report({ok = true}) end"}`},
		{"spawn", `{"prompt":"say hi"}`},
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	env := testEnv([]string{"HOME=", "CODEX_HOME=", "OPENAI_", "HTTP_PROXY=", "HTTPS_PROXY=", "ALL_PROXY=", "NO_PROXY="},
		"HOME="+home, "FAKE_KEY=sk-fake", "HTTP_PROXY=http://127.0.0.1:9", "HTTPS_PROXY=http://127.0.0.1:9",
		"NO_PROXY=127.0.0.1,localhost")
	if err := os.MkdirAll(filepath.Join(home, ".codex"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The model provider first: luft install keeps what the file holds.
	provider := "model = \"fake-model\"\nmodel_provider = \"fake\"\ncheck_for_update_on_startup = false\n\n" +
		"[model_providers.fake]\nname = \"fake\"\nbase_url = \"" + srv.URL + "/v1\"\nwire_api = \"responses\"\nenv_key = \"FAKE_KEY\"\n"
	cfg := filepath.Join(home, ".codex", "config.toml")
	if err := os.WriteFile(cfg, []byte(provider), 0o600); err != nil {
		t.Fatal(err)
	}
	mustLuft(t, work, env, "install", "--agent", "codex")
	// The work dir's daemon runs before Codex starts luft mcp serve, so the server lists
	// its tools at once: Codex sends its first turn without waiting for a slow server's
	// tools, and the scripted model's first call would then name a tool Codex lacks.
	mustLuft(t, work, env, "--state-dir", filepath.Join(work, ".luft"), "daemon", "start")
	defer func() {
		// luft mcp serve started the work dir's daemon.
		if _, err := os.Stat(filepath.Join(work, ".luft", "daemon.sock")); err == nil {
			mustLuft(t, work, env, "--state-dir", filepath.Join(work, ".luft"), "daemon", "stop")
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, codex, "exec", "--skip-git-repo-check", "start a luft workflow and a sub-agent")
	cmd.Dir, cmd.Env = work, env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errOut, strings.NewReader("")
	if err := cmd.Run(); err != nil {
		t.Fatalf("codex exec: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for i, want := range []string{`\"run_id\"`, `\"handle\"`} {
		got := fake.output(fmt.Sprintf("call_%d", i+1))
		if !strings.Contains(got, want) || strings.Contains(got, "requires approval") {
			t.Errorf("%s through codex exec returned %q, want its result (%s)\nstderr:\n%s", fake.calls[i].name, got, want, errOut.String())
		}
	}
}
