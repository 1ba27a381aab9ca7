package daemon

import (
	"fmt"
	"os"
	"path/filepath"
)

// StartLockFile serialises the clients that check for the daemon and start it when none
// answers (luft mcp serve): two clients starting at once start one daemon.
const StartLockFile = "daemon-start.lock"

// LockStart waits for the start lock of the state dir dir, which must exist, and returns
// its release.
func LockStart(dir string) (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, StartLockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", StartLockFile, err)
	}
	if err := lockWait(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() {
		unlock(f)
		f.Close()
	}, nil
}
