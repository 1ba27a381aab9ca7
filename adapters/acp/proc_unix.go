//go:build unix

package acp

import (
	"os/exec"
	"syscall"
)

// ownGroup starts the agent in a process group of its own, so that killing it also ends
// whatever it started (npx and similar wrappers run the real agent as a child).
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		killGroup(cmd)
		return cmd.Process.Kill()
	}
}

// killGroup kills the agent's process group; an empty group is no error.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil && cmd.Process.Pid > 0 {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
