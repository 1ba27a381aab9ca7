package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// A daemon whose state dir is moved away, deleted or replaced under it notices (it checks
// every WatchEvery), suspends its runs as on shutdown, removes its socket and daemon.json
// from the dir where it is now, leaves whatever is at the old path alone, and returns
// ErrStateDirGone.
func TestDaemonExitsWhenStateDirMoves(t *testing.T) {
	cases := []struct {
		name string
		move func(t *testing.T, dir string) string // returns where the dir is now, "" if deleted
	}{
		{"moved", func(t *testing.T, dir string) string {
			to := dir + ".moved"
			if err := os.Rename(dir, to); err != nil {
				t.Fatal(err)
			}
			return to
		}},
		{"deleted", func(t *testing.T, dir string) string {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			return ""
		}},
		{"replaced", func(t *testing.T, dir string) string {
			to := dir + ".old"
			if err := os.Rename(dir, to); err != nil {
				t.Fatal(err)
			}
			// A new state dir at the old path, with files of its own the orphan must keep.
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{SocketFile, InfoFile} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte("new"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			return to
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			st, err := storage.Open(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			mock := adapters.NewMock(adapters.MockConfig{})
			g := &gate{mock: mock, release: make(chan struct{})}
			svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("mock", mock, g)})
			if err != nil {
				t.Fatal(err)
			}
			ready := make(chan Info, 1)
			d, err := New(Options{StateDir: dir, Service: svc, Store: st, Version: "test", Grace: time.Millisecond,
				WatchEvery: 10 * time.Millisecond, Ready: func(i Info) { ready <- i }})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- d.Run(context.Background()) }()
			defer func() {
				if d.lock != nil {
					d.lock.Close()
				}
			}()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("daemon: %v", err)
			}
			run, err := d.start(context.Background(), StartRequest{Script: `function main() agent{prompt = "x", backend = "gate"} end`, Path: "w.lua"})
			if err != nil {
				t.Fatal(err)
			}

			now := tc.move(t, dir)
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				d.Shutdown()
				<-done
				t.Fatal("the daemon did not notice that its state dir was moved")
			}
			if !errors.Is(err, ErrStateDirGone) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Run = %v, want ErrStateDirGone naming %s", err, dir)
			}
			if r, err := st.GetRun(context.Background(), run.ID); err != nil || r.Status != storage.StatusSuspended {
				t.Errorf("hosted run after the exit: %+v, %v; want it suspended", r.Status, err)
			}
			if now != "" {
				for _, name := range []string{SocketFile, InfoFile} {
					if _, err := os.Lstat(filepath.Join(now, name)); !os.IsNotExist(err) {
						t.Errorf("%s left in the moved state dir: %v", name, err)
					}
				}
			}
			if tc.name == "replaced" {
				for _, name := range []string{SocketFile, InfoFile} {
					if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "new" {
						t.Errorf("the new state dir's %s was touched: %q, %v", name, b, err)
					}
				}
			}
		})
	}
}
