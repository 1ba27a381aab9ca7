package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tmpfsDir mounts a tmpfs of the given size on a fresh temp dir, or skips the test when
// mounting is not permitted.
func tmpfsDir(t *testing.T, size string) string {
	t.Helper()
	if goruntime.GOOS != "linux" {
		t.Skip("a small full disk is a tmpfs: Linux only")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("a full disk needs a small tmpfs, and mount -t tmpfs -o size=%s tmpfs %s was not permitted (run the test as root): %v %s",
			size, dir, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// fillUp writes a file into dir until its disk has no space left, and returns its path.
func fillUp(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, size := range []int{64 << 10, 4 << 10, 1} {
		buf := make([]byte, size)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	return path
}

// okUpstream is an OpenAI-compatible backend that answers every turn, streamed when asked.
func okUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	return up
}

// proxyTurn sends one turn to a luft proxy at url (its /v1 base's host) and returns
// the status and body.
func proxyTurn(t *testing.T, url, run string, stream bool) (int, string) {
	t.Helper()
	body := `{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	if stream {
		body = `{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("x-luft-run-id", run)
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// refusedUnrecorded sends turns (new runs and turns of run) until one is refused, as it
// must be once the state dir cannot be written, and returns the refusal. Writes that fit
// in what SQLite's files already hold still succeed for a while.
func refusedUnrecorded(t *testing.T, url string) string {
	t.Helper()
	for i := 0; i < 3000; i++ {
		code, body := proxyTurn(t, url, "r"+string(rune('a'+i%26)), false)
		if code == http.StatusOK {
			continue
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("a turn luft could not record: HTTP %d %s, want 503", code, body)
		}
		return body
	}
	t.Fatal("every turn was answered though the state dir is full")
	return ""
}

// checkUnrecordedError checks the refusal of a turn the state dir could not record: an
// OpenAI-shaped error that names the state dir, what is wrong and the fix.
func checkUnrecordedError(t *testing.T, body, state, reason string) {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type, Code string
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("the refusal is not OpenAI-shaped error JSON: %v\n%s", err, body)
	}
	if e.Error.Type != "server_error" || e.Error.Code != "luft_state_unwritable" {
		t.Errorf("refusal type %q code %q, want server_error luft_state_unwritable", e.Error.Type, e.Error.Code)
	}
	for _, want := range []string{"could not record this turn", state, reason, "free space on the disk"} {
		if !strings.Contains(e.Error.Message, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, e.Error.Message)
		}
	}
}

// TestProxyServeFullStateDir: luft proxy serve on a state dir whose disk fills up
// refuses the turns it cannot record with a 503 naming the state dir and the fix,
// never answering a turn it did not record; it stays up, and once space is freed it
// answers again.
func TestProxyServeFullStateDir(t *testing.T) {
	disk := tmpfsDir(t, "4m")
	dir := t.TempDir()
	up := okUpstream(t)
	writeFiles(t, dir, map[string]string{"luft.toml": "[backends.local]\ntype = \"openai\"\nbase_url = \"" + up.URL + "/v1\"\nmodel = \"m1\"\n"})
	state := filepath.Join(disk, "st")
	p := startLuft(t, nil, "--config", filepath.Join(dir, "luft.toml"), "--state-dir", state, "proxy", "serve", "--listen", "127.0.0.1:0")
	line := p.waitStdout("luft proxy listening on ")
	url := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(line, "luft proxy listening on "))[0], "/v1")
	if code, body := proxyTurn(t, url, "first", false); code != 200 {
		t.Fatalf("a turn before the disk filled up: %d %s", code, body)
	}

	filler := fillUp(t, disk)
	body := refusedUnrecorded(t, url)
	checkUnrecordedError(t, body, state, "full")
	// Refused before it goes upstream, or, when only its end could not be recorded, its
	// stream ends with the error in place of its [DONE].
	if code, body := proxyTurn(t, url, "streamed", true); (code != http.StatusServiceUnavailable && code != http.StatusOK) ||
		!strings.Contains(body, "luft_state_unwritable") || strings.Contains(body, "[DONE]") {
		t.Errorf("a streamed turn on the full disk: HTTP %d %s", code, body)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body := proxyTurn(t, url, "after", false); code != 200 {
		t.Fatalf("a turn once space was freed: %d %s", code, body)
	}
	if code, body := proxyTurn(t, url, "after", true); code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("a streamed turn once space was freed: %d %s", code, body)
	}
}

// TestDaemonProxyFullStateDir: the daemon's proxy door on a full state dir refuses the
// turns it cannot record, and luft daemon status shows the problem until space is
// freed and a turn is recorded again.
func TestDaemonProxyFullStateDir(t *testing.T) {
	disk := tmpfsDir(t, "8m")
	up := okUpstream(t)
	dt := newDaemonTest(t)
	dt.state = filepath.Join(disk, "st")
	writeFiles(t, dt.dir, map[string]string{"luft.toml": "[backends.local]\ntype = \"openai\"\nbase_url = \"" + up.URL + "/v1\"\nmodel = \"m1\"\n"})
	info := dt.start("--listen", "127.0.0.1:0")
	url := "http://" + info.Addr
	if code, body := proxyTurn(t, url, "first", false); code != 200 {
		t.Fatalf("a turn before the disk filled up: %d %s", code, body)
	}
	if out, _, _ := dt.luft("daemon", "status"); strings.Contains(out, "storage") {
		t.Fatalf("daemon status shows a storage problem before there is one:\n%s", out)
	}

	filler := fillUp(t, disk)
	checkUnrecordedError(t, refusedUnrecorded(t, url), dt.state, "full")
	out, errOut, code := dt.luft("daemon", "status")
	if code != 0 || !strings.Contains(out, "storage") || !strings.Contains(out, "proxy") || !strings.Contains(out, "free space") {
		t.Fatalf("daemon status does not show the proxy's storage problem: exit %d\n%s%s", code, out, errOut)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, body := proxyTurn(t, url, "after", false); code != 200 {
		t.Fatalf("a turn once space was freed: %d %s", code, body)
	}
	if out, _, _ := dt.luft("daemon", "status"); strings.Contains(out, "storage") {
		t.Fatalf("daemon status still shows the storage problem once a turn was recorded again:\n%s", out)
	}
}

// TestProxyServeReadOnlyStateDir: luft proxy serve on a read-only state dir does not
// serve turns it could not record: it refuses to start, naming the state dir, the
// problem and the fix. (Linux does not make a disk read-only while a process has files
// on it open for writing, so a state dir that turns read-only under a running proxy is
// the proxy package's TestUnrecordedTurnRefused.)
func TestProxyServeReadOnlyStateDir(t *testing.T) {
	disk := tmpfsDir(t, "4m")
	state := filepath.Join(disk, "st")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "remount,ro", disk).CombinedOutput(); err != nil {
		t.Skipf("remount %s read-only: %v %s", disk, err, out)
	}
	dir := t.TempDir()
	up := okUpstream(t)
	writeFiles(t, dir, map[string]string{"luft.toml": "[backends.local]\ntype = \"openai\"\nbase_url = \"" + up.URL + "/v1\"\nmodel = \"m1\"\n"})
	out, errOut, code := luftIn(t, dir, nil, "--config", filepath.Join(dir, "luft.toml"), "--state-dir", state, "proxy", "serve", "--listen", "127.0.0.1:0")
	if code == 0 || strings.Contains(out, "listening") {
		t.Fatalf("luft proxy serve on a read-only state dir: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{state, "read-only", "another --state-dir"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("the error does not say %q:\n%s", want, errOut)
		}
	}
}
