//go:build !unix

package tools

import "os/exec"

// killGroup leaves cancellation to os/exec, which kills the process itself; a process
// group is a Unix notion.
func killGroup(*exec.Cmd) {}
