package sandbox

import "syscall"

// userCred runs a process as nobody.
func userCred() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
}
