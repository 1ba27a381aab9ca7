//go:build !unix

package runtime

import "os"

// processAlive reports whether a process with this id exists. Where signal 0 is not
// available, finding the process is the best answer (on Windows FindProcess opens it).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}
