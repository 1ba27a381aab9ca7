package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
)

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--window", "sliding"},
		{"--listen", "0.0.0.0:0"},
		{"--no-such-flag"},
		{"--provider", "azure"},
		{"--otpm", "-5"},
	} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("%s: want an error", strings.Join(args, " "))
		}
	}
}

func TestProviderFlags(t *testing.T) {
	cfg, _, _, err := parseFlags([]string{"--provider", "Anthropic", "--rpm", "50", "--itpm", "30000", "--otpm", "8000",
		"--quantum", "500ms", "--max-output", "4096", "--lengths-median", "60"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Limits
	if l.Provider != testkit.ProviderAnthropic || l.RPM != 50 || l.ITPM != 30000 || l.OTPM != 8000 ||
		l.Quantum.Milliseconds() != 500 || l.MaxOutput != 4096 || cfg.Lengths.Median != 60 {
		t.Fatalf("%+v %+v", l, cfg.Lengths)
	}
	if _, _, _, err := parseFlags([]string{"--provider", "nope"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--provider") {
		t.Fatalf("bad provider: %v", err)
	}
}

// The binary with --provider silent answers 429s with no rate-limit header at all.
func TestSilentBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "luft-fake-engine")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--provider", "silent", "--rpm", "1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url = strings.TrimSpace(url)
	var statuses []int
	for range 2 {
		resp, err := http.Post(url+"/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		for k := range resp.Header {
			if k = strings.ToLower(k); strings.Contains(k, "ratelimit") || strings.HasPrefix(k, "retry-after") {
				t.Errorf("HTTP %d carries %s", resp.StatusCode, k)
			}
		}
	}
	if statuses[0] != 200 || statuses[1] != 429 {
		t.Fatalf("statuses %v, want 200 then 429 (1 RPM)", statuses)
	}
}
