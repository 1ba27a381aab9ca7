//go:build unix

package runtime

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with this id exists. EPERM means it exists but
// belongs to someone else: it is alive.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
