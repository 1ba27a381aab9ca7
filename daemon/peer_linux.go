//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// checkPeer refuses a connection on the daemon's socket from another user (root
// aside), and from a process that runs under no_new_privs: every command luft's agents
// run is confined with it, for good and for every process it starts, so a command that
// found the socket still cannot drive the daemon (approve its own writes, start runs).
// A client that must run under no_new_privs uses the TCP API with the bearer token.
func checkPeer(uc *net.UnixConn) error {
	raw, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("luft daemon: cannot tell who connected: %v", err)
	}
	var cred *unix.Ucred
	pidfd := -1
	var credErr, pidfdErr error
	raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		pidfd, pidfdErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	})
	if pidfdErr == nil {
		defer unix.Close(pidfd)
	} else {
		pidfd = -1
	}
	if credErr != nil {
		return fmt.Errorf("luft daemon: cannot tell who connected: %v", credErr)
	}
	// Only a kernel without SO_PEERPIDFD (before 6.5) goes without it; any other error
	// (the peer has exited, say) is refused, since its pid may already be another's.
	if pidfdErr != nil && !errors.Is(pidfdErr, unix.ENOPROTOOPT) {
		return fmt.Errorf("luft daemon: cannot tell who connected (%v); refused", pidfdErr)
	}
	if uid := uint32(os.Geteuid()); cred.Uid != uid && cred.Uid != 0 {
		return fmt.Errorf("luft daemon: user %d may not use the daemon of user %d", cred.Uid, uid)
	}
	nnp, err := noNewPrivs(int(cred.Pid))
	if err != nil {
		return fmt.Errorf("luft daemon: cannot tell whether process %d is confined (%v); refused", cred.Pid, err)
	}
	// The process read must still be the one that connected, not a later one that
	// took its pid.
	if pidfd >= 0 && unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
		return fmt.Errorf("luft daemon: process %d exited as it connected; refused", cred.Pid)
	}
	if nnp {
		return fmt.Errorf("luft daemon: process %d runs confined (no_new_privs), as the commands luft's agents run do: "+
			"the socket refuses it; a client that runs so uses the TCP API (luft daemon start --listen) with the bearer token", cred.Pid)
	}
	return nil
}

// noNewPrivs reads whether process pid runs under no_new_privs.
func noNewPrivs(pid int) (bool, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("NoNewPrivs:")); ok {
			return string(bytes.TrimSpace(v)) != "0", nil
		}
	}
	return false, fmt.Errorf("no NoNewPrivs line in /proc/%d/status", pid)
}
