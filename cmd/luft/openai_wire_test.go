package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
)

// A 429 whose body says insufficient_quota fails the call at once — one request, no
// scheduler retries, no agent retries — with a message saying it is not a rate limit.
// An ordinary 429 would be waited for and retried (TestRateLimitAndServerErrorsEndToEnd).
func TestInsufficientQuotaFailsAtOnce(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("retry-after", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(srv.URL+"/v1", "m", ""),
		"wf.lua": `function main()
  local r = agent{prompt = "hello", retries = 3}
  if not r.ok then error(r.error) end
end`,
	})
	_, errOut, code := luftIn(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "-q", "-w", "wf.lua")
	if code != 1 || !strings.Contains(errOut, "insufficient_quota") || !strings.Contains(errOut, "not a rate limit") {
		t.Fatalf("exit %d, want 1 with a message that the quota is used up:\n%s", code, errOut)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the endpoint got %d requests, want 1", n)
	}
}

// Through the scheduler, end to end: max_tokens goes out as max_completion_tokens; an
// endpoint that refuses it gets max_tokens, remembered, so the next call goes with
// max_tokens at once.
func TestOutputCapFallbackEndToEnd(t *testing.T) {
	t.Parallel()
	engine, _, url := startEngine(t, testkit.Config{KeepRequests: true, NoMaxCompletionTokens: true})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(url, "m", ""),
		"wf.lua": `function main()
  local a = agent{prompt = "one", max_tokens = 5}
  local b = agent{prompt = "two", max_tokens = 5}
  report(a.ok and b.ok)
end`,
	})
	if out := mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "-q", "-w", "wf.lua"); strings.TrimSpace(out) != "true" {
		t.Fatalf("report %q", out)
	}
	var got []string
	for _, r := range engine.Log() {
		got = append(got, fmt.Sprintf("%d max_tokens=%d max_completion_tokens=%d", r.Status, r.MaxTokens, r.MaxCompletionTokens))
	}
	want := "400 max_tokens=0 max_completion_tokens=5|200 max_tokens=5 max_completion_tokens=0|200 max_tokens=5 max_completion_tokens=0"
	if strings.Join(got, "|") != want {
		t.Fatalf("the engine saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.ReplaceAll(want, "|", "\n"))
	}
}

// A reply cut at max_tokens (finish_reason "length") fails the call, end to end: the
// agent_done event carries the error naming the cap and an agent_progress event of kind
// truncated comes before it.
func TestTruncatedReplyEndToEnd(t *testing.T) {
	t.Parallel()
	_, _, url := startEngine(t, testkit.Config{ToolRules: []testkit.ToolRule{
		{Match: "tell a long story", Reply: "once upon a time there was a scheduler that never slept"},
	}})
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"luft.toml": localBackend(url, "m", ""),
		"wf.lua":    `function main() report(agent{prompt = "tell a long story", max_tokens = 3}.ok) end`,
	})
	events := mustLuft(t, dir, []string{"OPENAI_API_KEY=k"}, "--state-dir", filepath.Join(dir, "st"), "run", "--json", "-w", "wf.lua")
	for _, want := range []string{`"kind":"truncated"`, `"status":"error"`, `cut off at max_tokens=3`, `finish_reason \"length\"`, `"report","value":false`} {
		if !strings.Contains(events, want) {
			t.Errorf("events lack %s:\n%s", want, events)
		}
	}
}
