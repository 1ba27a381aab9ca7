package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A socket whose daemon is gone, or dies while it accepts, is ErrNotRunning (so a client
// starts another), not a failure to reach it.
func TestDialAGoneDaemonIsNotRunning(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(net.Listener)
	}{
		{"no listener", nil},
		{"closes unanswered", func(l net.Listener) {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}},
		{"resets", func(l net.Listener) {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				// Unread request bytes make close send a reset.
				c.Read(make([]byte, 1))
				c.Close()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "luftd")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			sock := filepath.Join(dir, SocketFile)
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sock, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.serve == nil {
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			} else {
				defer l.Close()
				go tc.serve(l)
			}
			c, err := Dial(context.Background(), dir)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			if !errors.Is(err, ErrNotRunning) {
				t.Fatalf("Dial: %v, want ErrNotRunning", err)
			}
		})
	}
}
