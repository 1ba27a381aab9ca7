package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/testkit"
)

// TestDaemonServesProxy: the daemon serves the proxy at /v1/ without its token on
// loopback (the API still needs it); a proxy run shows in luft list and status while it
// lasts and is completed by DELETE; a run left by a daemon killed outright is ended, not
// resumed, when the daemon starts again.
func TestDaemonServesProxy(t *testing.T) {
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, Limits: testkit.Limits{RPM: 600, TPM: 1_000_000}})
	srv := testkit.NewServer(e)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dt := newDaemonTest(t)
	cfg := "[backends.fake]\ntype = \"openai\"\nbase_url = \"" + base + "\"\nmodel = \"m1\"\n"
	if err := os.WriteFile(filepath.Join(dt.dir, "luft.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	info := dt.start("--listen", "127.0.0.1:0")
	url := "http://" + info.Addr
	post := func(hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
		req.Header.Set("Authorization", "Bearer sk-client")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("x-luft-caller", "alice", "x-luft-run-id", "r1")
	if resp.StatusCode != 200 || !strings.Contains(body, `"chat.completion"`) || resp.Header.Get("X-Ratelimit-Limit-Tokens") == "" {
		t.Fatalf("proxied turn: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	run := resp.Header.Get("x-luft-run")
	if r, err := http.Get(url + "/api/runs"); err != nil || r.StatusCode != 401 {
		t.Fatalf("the API answered without its token: %v %v", r, err)
	}
	// Another luft process reads the run: poll it with a deadline.
	waitFor := func(what string, ok func(string) bool, args ...string) string {
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, _, _ := dt.luft(args...)
			if ok(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: luft %v said:\n%s", what, args, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Its one turn answered, the run waits for the client's next: it shows as idle, not
	// running, in list, status and the API until it ends.
	waitFor("the proxy run listed as idle", func(s string) bool {
		return strings.Contains(s, run) && strings.Contains(s, "idle") && strings.Contains(s, "proxy:alice") && !strings.Contains(s, "running")
	}, "list")
	waitFor("its turn in status", func(s string) bool { return strings.Contains(s, "1 ok") }, "status", run)
	if out, _, _ := dt.luft("status", run); !strings.Contains(out, "idle") || strings.Contains(out, "running") {
		t.Errorf("status of an idle proxy run:\n%s", out)
	}
	if out, _, _ := dt.luft("list", "--status", "idle"); !strings.Contains(out, run) {
		t.Errorf("list --status idle leaves the idle proxy run out:\n%s", out)
	}
	if out, _, _ := dt.luft("list", "--status", "running"); strings.Contains(out, run) {
		t.Errorf("list --status running shows the idle proxy run:\n%s", out)
	}
	tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	api, _ := http.NewRequest("GET", url+"/api/runs/"+run, nil)
	api.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	if r, err := http.DefaultClient.Do(api); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !strings.Contains(string(b), `"status":"idle"`) {
			t.Errorf("GET /api/runs/%s of an idle proxy run: HTTP %d %s", run, r.StatusCode, b)
		}
	}
	req, _ := http.NewRequest("DELETE", url+"/v1/runs/r1", nil)
	req.Header.Set("x-luft-caller", "alice")
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != 200 {
		t.Fatalf("DELETE: %v %v", r, err)
	}
	waitFor("the deleted run completed", func(s string) bool { return strings.Contains(s, "completed") }, "status", run)

	// A run left running by a daemon killed outright.
	resp, _ = post("x-luft-caller", "bob")
	left := resp.Header.Get("x-luft-run")
	waitFor("bob's run listed", func(s string) bool { return strings.Contains(s, left) }, "list")
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor("the killed daemon's run shown interrupted", func(s string) bool { return strings.Contains(s, "interrupted") }, "status", left)
	os.Remove(filepath.Join(dt.state, "daemon.sock"))
	dt.start("--listen", "127.0.0.1:0")
	out := waitFor("the left run ended", func(s string) bool { return strings.Contains(s, "completed") }, "status", left)
	if !strings.Contains(out, "proxy that hosted it stopped") {
		t.Errorf("the ended run does not say why:\n%s", out)
	}
}

// TestProxyServeFallbackCredentials: through luft proxy serve, a backend that fails
// hands its turns to its fallback at another host (another port on loopback). The
// client's credentials, meant for the failing backend, never reach the fallback: one
// with api_key_env gets luft's key for it, one without is not sent the turn and the
// client gets an OpenAI-style error naming it and the setting, as the proxy warned at
// start.
func TestProxyServeFallbackCredentials(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer down.Close()
	fake := func(model string) (*testkit.Server, string) {
		s := testkit.NewServer(testkit.NewEngine(testkit.Config{Models: []string{model}}))
		s.RecordHeaders = true
		base, err := s.Start("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, base
	}
	b, bBase := fake("mb")
	d, dBase := fake("md")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "luft.toml")
	writeFiles(t, dir, map[string]string{"luft.toml": `
[backends.a]
type = "openai"
base_url = "` + down.URL + `/v1"
model = "ma"
fallback = "b"
[backends.b]
type = "openai"
base_url = "` + bBase + `"
model = "mb"
api_key_env = "B_KEY"
[backends.c]
type = "openai"
base_url = "` + down.URL + `/v1"
model = "mc"
fallback = "d"
[backends.d]
type = "openai"
base_url = "` + dBase + `"
model = "md"
`})
	p := startLuft(t, []string{"B_KEY=sk-luft-for-b"}, "--config", cfg, "--state-dir", filepath.Join(dir, "st"),
		"proxy", "serve", "--listen", "127.0.0.1:0")
	line := p.waitStdout("luft proxy listening on ")
	url := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "luft proxy listening on "))[0], "/v1")
	turn := func(model string) (int, string) {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
		req.Header.Set("Authorization", "Bearer sk-client-for-a")
		req.Header.Set("OpenAI-Organization", "org-client-for-a")
		req.Header.Set("x-api-key", "client-for-a")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	// Enough turns at once to open each failing lane's circuit (5 failures); their
	// retries then go to the fallback.
	const turns = 6
	type answer struct {
		model, body string
		code        int
	}
	answers := make(chan answer, 2*turns)
	for i := 0; i < turns; i++ {
		for _, m := range []string{"ma", "mc"} {
			go func() {
				code, body := turn(m)
				answers <- answer{m, body, code}
			}()
		}
	}
	for i := 0; i < 2*turns; i++ {
		a := <-answers
		switch {
		case a.model == "ma" && a.code != 200:
			t.Errorf("turn for a (fallback b has its key): HTTP %d %s", a.code, a.body)
		case a.model == "mc" && (a.code != 502 || !strings.Contains(a.body, `"fallback_without_key"`) ||
			!strings.Contains(a.body, `its fallback \"d\"`) || !strings.Contains(a.body, `api_key_env in [backends.d]`)):
			t.Errorf("turn for c (fallback d has no key): HTTP %d %s", a.code, a.body)
		}
	}
	seen := b.RequestHeaders()
	if len(seen) != turns {
		t.Errorf("b got %d turns, want %d", len(seen), turns)
	}
	for i, h := range seen {
		if h.Get("Authorization") != "Bearer sk-luft-for-b" {
			t.Errorf("b's turn %d came with Authorization %q, want luft's key for b", i+1, h.Get("Authorization"))
		}
		for k, vv := range h {
			if strings.Contains(strings.Join(vv, " "), "for-a") {
				t.Errorf("b's turn %d: the client's credential for a crossed: %s: %s", i+1, k, vv)
			}
		}
	}
	if n := len(d.RequestHeaders()); n != 0 {
		t.Errorf("d got %d turns; want none", n)
	}
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Errorf("proxy exit %d", code)
	}
	errOut := p.err.text()
	if !strings.Contains(errOut, `upstream "c": its fallback "d" is at another host and has no key of its own`) {
		t.Errorf("no warning about d at start; stderr:\n%s", errOut)
	}
	if strings.Contains(errOut, "for-a") || strings.Contains(errOut, "for-b") {
		t.Errorf("a key reached the proxy's log:\n%s", errOut)
	}
}

// TestProxyServeDoors: through luft proxy serve with one backend that names no model,
// GET /v1/models lists what that backend's own /v1/models says; luft's x-luft-* headers
// never reach the backend; and once the backend's failures open its circuit (no
// fallback), a turn is answered at once with an OpenAI-shaped 503 and Retry-After
// instead of waiting for the circuit to half-open.
func TestProxyServeDoors(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == "GET" && r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"llama-3","object":"model"}]}`)
			return
		}
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"model":"broken"`) {
			w.WriteHeader(500)
			io.WriteString(w, `{"error":{"message":"boom","type":"server_error"}}`)
			return
		}
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "luft.toml")
	writeFiles(t, dir, map[string]string{"luft.toml": "[backends.local]\ntype = \"openai\"\nbase_url = \"" + up.URL + "/v1\"\n"})
	p := startLuft(t, nil, "--config", cfg, "--state-dir", filepath.Join(dir, "st"), "proxy", "serve", "--listen", "127.0.0.1:0")
	line := p.waitStdout("luft proxy listening on ")
	url := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "luft proxy listening on "))[0], "/v1")

	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"llama-3"`) || !strings.Contains(string(b), `"owned_by":"local"`) {
		t.Errorf("GET /v1/models with a backend that names no model: %s", b)
	}

	client := &http.Client{Timeout: 20 * time.Second}
	turn := func(model string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
		req.Header.Set("Authorization", "Bearer sk-client")
		req.Header.Set("x-luft-caller", "me")
		req.Header.Set("x-luft-run-id", "r1")
		req.Header.Set("x-luft-class", "batch")
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("turn for %s: %v", model, err)
			return nil, ""
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, body := turn("llama-3"); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("turn: %v %s", resp, body)
	}
	mu.Lock()
	for k := range seen[0] {
		if strings.HasPrefix(strings.ToLower(k), "x-luft-") {
			t.Errorf("luft's own header %s reached the backend", k)
		}
	}
	mu.Unlock()

	// Five turns at once fail together and open the lane's circuit; their retries, and
	// the turn after them, are answered 503 at once.
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); turn("broken") }()
	}
	wg.Wait()
	start := time.Now()
	resp, body := turn("broken")
	if resp == nil || resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, `"code":"backend_circuit_open"`) {
		t.Fatalf("a turn while the backend's circuit is open: %v %s", resp, body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the 503 took %s", d)
	}
	p.signal(syscall.SIGTERM)
	if code := p.exitCode(); code != 0 {
		t.Errorf("proxy exit %d", code)
	}
}

// TestDaemonServesEveryWire: the daemon's /v1/ serves the Responses API through an
// openai backend and Anthropic Messages through an anthropic one, with the key of
// api_key_env sent as the wire expects; each turn is a run that luft list shows. The
// daemon's API takes its token as x-api-key too (what Claude Code's ANTHROPIC_API_KEY
// sends).
func TestDaemonServesEveryWire(t *testing.T) {
	e := testkit.NewEngine(testkit.Config{Models: []string{"m1", "claude-test"}})
	srv := testkit.NewServer(e)
	srv.RecordHeaders = true
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	dt := newDaemonTest(t, "LUFT_TEST_ANTHROPIC_KEY=sk-ant-luft")
	cfg := "[backends.fake]\ntype = \"openai\"\nbase_url = \"" + base + "\"\nmodel = \"m1\"\n" +
		"[backends.claude]\ntype = \"anthropic\"\nbase_url = \"" + base + "\"\napi_key_env = \"LUFT_TEST_ANTHROPIC_KEY\"\n"
	if err := os.WriteFile(filepath.Join(dt.dir, "luft.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	info := dt.start("--listen", "127.0.0.1:0")
	url := "http://" + info.Addr
	post := func(path, body string, hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("/v1/responses", `{"model":"m1","input":"hi","max_output_tokens":4}`,
		"Authorization", "Bearer sk-client", "x-luft-caller", "codex")
	if resp.StatusCode != 200 || !strings.Contains(body, `"object":"response"`) || resp.Header.Get("x-luft-run") == "" {
		t.Fatalf("Responses turn: %d %s", resp.StatusCode, body)
	}
	resp, body = post("/v1/messages?beta=true", `{"model":"claude-test","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
		"x-api-key", "sk-ant-client", "anthropic-version", "2023-06-01", "x-luft-caller", "claude")
	if resp.StatusCode != 200 || !strings.Contains(body, `"type":"message"`) || resp.Header.Get("Anthropic-Ratelimit-Requests-Remaining") == "" && resp.Header.Get("Request-Id") == "" {
		t.Fatalf("Messages turn: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	hs := srv.RequestHeaders()
	if len(hs) != 2 || hs[0].Get("Authorization") != "Bearer sk-client" || hs[1].Get("X-Api-Key") != "sk-ant-luft" || hs[1].Get("Authorization") != "" {
		t.Fatalf("upstream headers: %v", hs)
	}
	resp, body = post("/v1/messages", `{"model":"claude-test","max_tokens":4}`, "anthropic-version", "2023-06-01")
	if resp.StatusCode != 400 || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, "invalid_request_error") {
		t.Fatalf("a bad Messages request: %d %s", resp.StatusCode, body)
	}
	tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	api, _ := http.NewRequest("GET", url+"/api/runs", nil)
	api.Header.Set("x-api-key", strings.TrimSpace(string(tok)))
	r, err := http.DefaultClient.Do(api)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 200 || !strings.Contains(string(b), "proxy:codex") || !strings.Contains(string(b), "proxy:claude") {
		t.Fatalf("GET /api/runs with the token as x-api-key: %d %s", r.StatusCode, b)
	}
}
