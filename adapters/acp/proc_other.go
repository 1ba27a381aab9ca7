//go:build !unix

package acp

import "os/exec"

// ownGroup leaves the process as it is: without Unix process groups only the agent
// process itself is killed.
func ownGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) {}
