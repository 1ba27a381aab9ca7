//go:build unix

package runtime

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// processAlive reports whether a process with this id exists. EPERM means it exists but
// belongs to someone else: it is alive. A zombie (killed, not yet reaped by its parent)
// is gone: it drives nothing, and a daemon restarted right after a SIGKILL must resume
// the runs it left.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return !zombie(pid)
}

// zombie reads the process state from /proc (Linux); elsewhere it reports false.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold ") ".
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}
