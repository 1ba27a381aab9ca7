//go:build !unix

package tools

import "os"

// links is 1 where the system does not report hard-link counts through os.FileInfo.
func links(os.FileInfo) uint64 { return 1 }
