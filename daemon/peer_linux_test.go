package daemon

import (
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckPeer: the socket takes a client of its own user and refuses one under
// no_new_privs, as every confined command runs.
func TestCheckPeer(t *testing.T) {
	curl, err1 := exec.LookPath("curl")
	setpriv, err2 := exec.LookPath("setpriv")
	if err1 != nil || err2 != nil {
		t.Skip("needs curl and setpriv (util-linux) to connect as a client under no_new_privs")
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		name string
		argv []string
		want string // "" = taken
	}{
		{"plain", []string{curl, "-s", "-m", "5", "--unix-socket", sock, "http://x/"}, ""},
		{"no_new_privs", []string{setpriv, "--no-new-privs", curl, "-s", "-m", "5", "--unix-socket", sock, "http://x/"}, "runs confined (no_new_privs)"},
	} {
		cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		verdict := checkPeer(c.(*net.UnixConn))
		c.Close()
		cmd.Wait()
		switch {
		case tc.want == "" && verdict != nil:
			t.Errorf("%s: refused: %v", tc.name, verdict)
		case tc.want != "" && (verdict == nil || !strings.Contains(verdict.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, verdict, tc.want)
		}
	}
}
