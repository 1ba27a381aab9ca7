//go:build !unix

package main

import "os/exec"

// detach leaves cmd as it is: the daemon needs a unix system and says so when it starts.
func detach(*exec.Cmd) {}
