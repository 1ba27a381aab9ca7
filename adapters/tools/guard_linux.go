//go:build linux

package tools

import (
	"os"
	"strconv"
	"strings"
)

// openedPath is the path of the file f is open on, as the kernel knows it (links
// resolved), so the file checked is the file written.
func openedPath(f *os.File) (string, bool) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || !strings.HasPrefix(p, "/") || strings.HasSuffix(p, " (deleted)") {
		return "", false
	}
	return p, true
}
