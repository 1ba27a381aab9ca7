//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// self is the running binary as the kernel knows it, valid even if the file on disk
// was replaced since luft started.
const self = "/proc/self/exe"

// SystemReadable are the folders every confined command may read and execute: the
// system's programs, libraries and settings, and the kernel's views (/proc, /sys, /dev).
// Another process's environment or memory under /proc stays closed: Landlock refuses a
// confined process ptrace-level access to any process outside its sandbox, and a
// confined command has no CAP_SYS_PTRACE to override it.
var SystemReadable = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	"/nix", "/snap", "/proc", "/sys", "/dev"}

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

func harden() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }

// userns starts the child in a user and mount namespace of its own, as the same user
// (mapped to itself), so it may mount over the paths it hides without any privilege
// outside. setgroups stays off, as an unprivileged user namespace requires.
func userns() *syscall.SysProcAttr {
	uid, gid := os.Getuid(), os.Getgid()
	a := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
	}
	if uid != 0 {
		// A user other than root keeps no capability across the helper's exec; these two,
		// held in the new namespace only, let the helper mount and then drop them all.
		a.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP}
	}
	return a
}

func probeNamespaces() error {
	cmd := exec.Command(self, marker, nsProbeArg)
	cmd.SysProcAttr = userns()
	if os.Getuid() != 0 {
		// As Command does for such a user: a first helper starts the probe.
		cmd = exec.Command(self, marker, nsProbeHopArg)
	}
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%s", msg)
		}
		return err
	}
	return nil
}

// nsProbe runs in the probe's namespace: mounting a tmpfs proves hiding works.
func nsProbe() int {
	dir, err := os.MkdirTemp("", "luft-nsprobe-")
	if err == nil {
		defer os.Remove(dir)
		if err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err == nil {
			err = unix.Mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0")
			if err == nil {
				unix.Unmount(dir, unix.MNT_DETACH)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot mount in a user namespace: %v", err)
		return 1
	}
	return 0
}

// nsProbeHop starts the namespace probe from this (dumpable) helper and exits as it does.
func nsProbeHop() int {
	cmd := exec.Command(self, marker, nsProbeArg)
	cmd.SysProcAttr = userns()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "%v", err)
		return 1
	}
	return 0
}

// devices are the device files any program may write: writing to them changes nothing.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full"}

// confineAndExec applies r's policy to this thread and execs the program on it. Only
// the calling thread is restricted (no all-threads machinery is needed): it is locked
// and never unlocked, and execve keeps its restrictions for the new program.
func confineAndExec(r request) error {
	runtime.LockOSThread() // never unlocked: this thread execs
	if r.Cgroup != "" {
		if err := joinCgroup(r.Cgroup); err != nil {
			return err
		}
	}
	if r.Newns {
		if err := hide(r); err != nil {
			return err
		}
	}
	if err := limit(r.Policy, r.Newns); err != nil {
		return err
	}
	if r.Confine {
		if err := landlockRules(r); err != nil {
			return err
		}
	} else if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("cannot set no_new_privs: %w", err)
	}
	if err := dropCaps(); err != nil {
		return err
	}
	return &execError{path: r.Path, err: syscall.Exec(r.Path, r.Argv, syscall.Environ())}
}

// hide lays an empty read-only folder over each hidden folder and an unopenable node
// (/dev/null on a nodev mount) over each hidden file, in this process's own mount
// namespace: the command sees them, cannot read, change, move or remove them, and
// nothing outside the namespace changes. Each folder between a granted one and a hidden
// path is bound onto itself first, so that renaming a parent cannot carry the hidden
// path out from under its cover for a later command (a mount point cannot be renamed).
// Every UNIX socket bound by path outside the writable folders (an ssh or gpg agent,
// the session bus, docker.sock, luft's daemon) gets the same unopenable node: Landlock
// before ABI 9 does not judge connect(2) by path, so the socket itself is covered.
func hide(r request) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("cannot make the command's mounts private: %w", err)
	}
	granted := append(append(append([]string{}, SystemReadable...), r.Write...), r.Read...)
	pinned := map[string]bool{}
	for _, p := range r.Hide {
		for _, a := range between(granted, p) {
			if pinned[a] {
				continue
			}
			pinned[a] = true
			if err := unix.Mount(a, a, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("cannot pin %s for the command: %w", a, err)
			}
		}
	}
	for _, p := range r.Hide {
		if err := cover(p); err != nil {
			return err
		}
	}
	for _, p := range sockets(r.Write) {
		_ = cover(p) // a socket gone since it was listed needs no cover
	}
	return nil
}

// cover lays the cover of hide over p.
func cover(p string) error {
	const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	fi, err := os.Lstat(p)
	if err != nil {
		return nil // gone since the parent looked: nothing to hide
	}
	if fi.IsDir() {
		err = unix.Mount("tmpfs", p, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0")
	} else if err = unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err == nil {
		err = unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|flags, "")
	}
	if err != nil {
		return fmt.Errorf("cannot hide %s from the command: %w", p, err)
	}
	return nil
}

// between are the folders strictly between the innermost granted folder that holds p
// and p, outermost first.
func between(granted []string, p string) []string {
	root := ""
	for _, g := range granted {
		if g != p && within(g, p) && len(g) > len(root) {
			root = g
		}
	}
	if root == "" {
		return nil
	}
	var out []string
	for a := filepath.Dir(p); a != root && within(root, a) && a != "/"; a = filepath.Dir(a) {
		out = append([]string{a}, out...)
	}
	return out
}

// sockets are the paths of the UNIX sockets bound on this system (/proc/net/unix)
// outside the folders in write.
func sockets(write []string) []string {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 8 || !strings.HasPrefix(f[7], "/") || seen[f[7]] {
			continue
		}
		p := f[7]
		seen[p] = true
		if slices.ContainsFunc(write, func(w string) bool { return within(w, p) }) {
			continue
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			out = append(out, p)
		}
	}
	return out
}

// limit sets the policy's resource limits. RLIMIT_NPROC is set only inside the
// command's own user namespace, where it counts the command's processes alone (outside,
// it would count every process of the user). The kernel does not apply it to root.
func limit(p Policy, newns bool) error {
	procs, fsize := p.Procs, p.FileSize
	if procs == 0 {
		procs = DefaultProcs
	}
	if fsize == 0 {
		fsize = DefaultFileSize
	}
	for _, l := range []struct {
		res  int
		name string
		max  uint64
	}{{unix.RLIMIT_NPROC, "processes", procs}, {unix.RLIMIT_FSIZE, "file size", fsize}, {unix.RLIMIT_CORE, "core size", 0}} {
		if l.res == unix.RLIMIT_NPROC && !newns {
			continue
		}
		var cur unix.Rlimit
		if err := unix.Getrlimit(l.res, &cur); err != nil {
			return fmt.Errorf("cannot read the %s limit: %w", l.name, err)
		}
		v := min(l.max, cur.Max)
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("cannot limit %s to %d: %w", l.name, v, err)
		}
	}
	return nil
}

// landlockRules restricts this thread to r's reads, writes and ports, and scopes
// signals and abstract UNIX sockets to the sandbox; no_new_privs comes with it.
func landlockRules(r request) error {
	cfg := landlock.V11.BestEffort()
	if r.AnyPort {
		cfg.HandledAccessNet = 0
	} else {
		cfg.HandledAccessNet = landlock.AccessNetSet(ll.AccessNetConnectTCP)
	}
	rules := []landlock.Rule{landlock.RWFiles(devices...).IgnoreIfMissing()}
	for _, p := range append(append([]string{}, SystemReadable...), r.Read...) {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			rules = append(rules, landlock.RODirs(p))
		} else if err == nil {
			rules = append(rules, landlock.ROFiles(p))
		}
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
	for _, port := range r.Ports {
		rules = append(rules, landlock.ConnectTCP(port))
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("cannot build the Landlock rules (write %v, read %v): %w", r.Write, r.Read, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("cannot set no_new_privs: %w", err)
	}
	if fd < 0 {
		return fmt.Errorf("cannot apply the Landlock rules: the kernel handles none of them")
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("cannot apply the Landlock rules: %w", err)
	}
	unix.Close(fd)
	return nil
}

// dropCaps leaves the program no capability: none in the bounding, ambient and
// inheritable sets, so even a program run as root gets none at exec. Without
// CAP_SYS_PTRACE a root command cannot read another process's memory or environment
// past Landlock. A process that has no CAP_SETPCAP has no capabilities to drop.
func dropCaps() error {
	last := 63
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			if err == unix.EPERM && !hasCaps() {
				break
			}
			return fmt.Errorf("cannot drop capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("cannot drop capabilities: %w", err)
	}
	return nil
}

// hasCaps reports whether this thread holds any effective capability.
func hasCaps() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if unix.Capget(&hdr, &data[0]) != nil {
		return true
	}
	return data[0].Effective != 0 || data[1].Effective != 0
}

// signalOf is the signal that ended a process, as a shell's 128+N counts it.
func signalOf(ee *exec.ExitError) int {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return int(ws.Signal())
	}
	return 0
}
