package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	// The run is stored by the daemon's recorder a moment after the turn: poll the
	// external process with a deadline.
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
	waitFor("the proxy run listed as running", func(s string) bool {
		return strings.Contains(s, run) && strings.Contains(s, "running") && strings.Contains(s, "proxy:alice")
	}, "list")
	waitFor("its turn in status", func(s string) bool { return strings.Contains(s, "1 ok") }, "status", run)
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
