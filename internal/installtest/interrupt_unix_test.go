//go:build unix

package installtest

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// An install interrupted mid-download (Ctrl-C, or SIGTERM) removes its temporary directory
// and installs nothing.
func TestInstallInterruptedCleansUp(t *testing.T) {
	hostOnly(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			release := make(chan struct{})
			defer close(release)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "1000000")
				w.WriteHeader(http.StatusOK)
				w.Write([]byte("partial"))
				w.(http.Flusher).Flush()
				select {
				case arrived <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(srv.Close)
			sb := newSandbox(t, &server{url: srv.URL})
			script, _ := filepath.Abs(filepath.Join(repoRoot, "install.sh"))
			cmd := exec.Command("/bin/sh", script)
			cmd.Env, cmd.Dir = sb.env, sb.home
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-arrived:
			case err := <-done:
				t.Fatalf("install.sh ended before the download started: %v\n%s", err, errb.String())
			case <-time.After(time.Minute):
				t.Fatal("the download never started")
			}
			if left, _ := os.ReadDir(sb.tmp); len(left) == 0 {
				t.Fatal("no temporary directory while downloading: the test would prove nothing")
			}
			// As a terminal does: the signal goes to the whole foreground process group.
			if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("install.sh exited 0 after %v", sig)
				}
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatalf("install.sh did not stop on %v", sig)
			}
			if left, _ := os.ReadDir(sb.tmp); len(left) > 0 {
				t.Errorf("after %v, TMPDIR still holds %s", sig, left[0].Name())
			}
			if _, err := os.Stat(filepath.Join(sb.home, ".luft", "bin", "luft")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after %v, luft was installed (%v)", sig, err)
			}
		})
	}
}
