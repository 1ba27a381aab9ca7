//go:build !unix

package main

import "os"

// lockStart does nothing: the daemon needs a unix system and says so when it starts.
func lockStart(*os.File) error { return nil }

func unlockStart(*os.File) {}
