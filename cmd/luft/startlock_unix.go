//go:build unix

package main

import (
	"os"
	"syscall"
)

// lockStart waits for the exclusive lock of f.
func lockStart(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }

func unlockStart(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
