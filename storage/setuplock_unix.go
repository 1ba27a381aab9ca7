//go:build unix

package storage

import (
	"fmt"
	"os"
	"syscall"
)

// lockSetup holds an exclusive lock on the state dir itself while a process opens the
// database and brings its schema up to date. Two processes (or goroutines) opening a fresh
// state dir at once otherwise race: switching a new database to WAL takes a lock SQLite's
// busy handler does not wait for (SQLITE_BUSY), and one may see the other's half-created
// file. The lock is on the folder's own descriptor, so no lock file is left behind; it is
// held only for the setup, never while the store is in use.
func lockSetup(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: lock state dir %s: %w", dir, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.ENOLCK || err == syscall.EOPNOTSUPP || err == syscall.ENOTSUP {
		// A file system without locks (some network mounts): open unlocked, as before.
		f.Close()
		return func() {}, nil
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: lock state dir %s: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
