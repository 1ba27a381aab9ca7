//go:build unix

package tools

import (
	"os/exec"
	"syscall"
)

// killGroup starts the command in a process group of its own and makes cancellation kill
// the whole group, so a timeout also stops what the command started (go test's test
// binaries, say).
func killGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
}
