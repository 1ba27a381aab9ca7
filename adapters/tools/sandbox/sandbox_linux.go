//go:build linux

package sandbox

import (
	"fmt"
	"runtime"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// self is the running binary as the kernel knows it, valid even if the file on disk
// was replaced since luft started.
const self = "/proc/self/exe"

func probe() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	if err == nil && v < 1 {
		err = fmt.Errorf("ABI version %d", v)
	}
	if err != nil {
		return 0, fmt.Errorf("this kernel offers no Landlock (it needs Linux 5.13 or later with landlock in the lsm= boot list): %v", err)
	}
	return v, nil
}

// devices are the device files any program may write: writing to them changes nothing.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full"}

// confineAndExec applies r's policy to this thread and execs the program on it. Only
// the calling thread is restricted (no all-threads machinery is needed): it is locked
// and never unlocked, and execve keeps its restrictions for the new program.
func confineAndExec(r request) error {
	cfg := landlock.V11.BestEffort()
	// Networking stays open: commands such as `go test` may need to fetch modules.
	cfg.HandledAccessNet = 0
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWFiles(devices...).IgnoreIfMissing(),
	}
	if len(r.Write) > 0 {
		rw := landlock.RWDirs(r.Write...)
		// Moving a file between folders needs "refer" (ABI 2); asking for it on ABI 1
		// would make best effort drop every rule, so it is asked for only where it exists.
		if v, _ := ll.LandlockGetABIVersion(); v >= 2 {
			rw = rw.WithRefer()
		}
		rules = append(rules, rw)
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("cannot build the Landlock rules for %v: %w", r.Write, err)
	}
	runtime.LockOSThread() // never unlocked: this thread execs
	if fd >= 0 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("cannot set no_new_privs: %w", err)
		}
		if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
			return fmt.Errorf("cannot apply the Landlock rules: %w", err)
		}
		unix.Close(fd)
	}
	return &execError{path: r.Path, err: syscall.Exec(r.Path, r.Argv, syscall.Environ())}
}
