//go:build unix

package tools

import (
	"os"
	"syscall"
)

// links is a file's hard-link count.
func links(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}
