//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The kernel never applies RLIMIT_NPROC to root, so a root luft caps a command's
// processes with a pids cgroup of its own instead: the helper joins it before it execs
// the program, and Done kills whatever is left in it and removes it.

var (
	cgroupOnce sync.Once
	cgroupBase string // the folder new pids cgroups are made in; "" = none can be
	cgroupSeq  atomic.Uint64
	cgroups    sync.Map // *exec.Cmd → cgroup folder
)

// pidsBase finds where this process may make pids cgroups: below its own cgroup in the
// pids hierarchy (cgroup v1), or in the unified hierarchy where its cgroup delegates the
// pids controller (v2).
func pidsBase() string {
	cgroupOnce.Do(func() {
		own, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return
		}
		mounts, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		for line := range strings.Lines(string(own)) {
			parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(parts) != 3 {
				continue
			}
			ctrls, path := parts[1], parts[2]
			v1 := slices.Contains(strings.Split(ctrls, ","), "pids")
			if !v1 && !(parts[0] == "0" && ctrls == "") {
				continue
			}
			mnt := mountOf(mounts, v1)
			if mnt == "" {
				continue
			}
			dir := filepath.Join(mnt, path)
			if !v1 {
				sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
				if err != nil || !slices.Contains(strings.Fields(string(sub)), "pids") {
					continue
				}
			}
			if unixAccessW(dir) {
				cgroupBase = dir
				return
			}
		}
	})
	return cgroupBase
}

// mountOf is the mount point of the v1 pids hierarchy (v1) or of cgroup2. A mountinfo
// line is "ID PARENT DEV ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS".
func mountOf(mountinfo []byte, v1 bool) string {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || len(f) < sep+4 {
			continue
		}
		fstype, opts := f[sep+1], strings.Split(f[sep+3], ",")
		if v1 && fstype == "cgroup" && slices.Contains(opts, "pids") || !v1 && fstype == "cgroup2" {
			return f[4]
		}
	}
	return ""
}

// newPidsCgroup makes a pids cgroup that allows max tasks, or returns "".
func newPidsCgroup(max uint64) string {
	base := pidsBase()
	if base == "" {
		return ""
	}
	dir := filepath.Join(base, fmt.Sprintf("luft-cmd-%d-%d", os.Getpid(), cgroupSeq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatUint(max, 10)), 0o644); err != nil {
		os.Remove(dir)
		return ""
	}
	return dir
}

// joinCgroup moves this process into dir (the helper, before it execs).
func joinCgroup(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("cannot join the command's pids cgroup %s: %w", dir, err)
	}
	return nil
}

// removeCgroup kills what is left in dir and removes it.
func removeCgroup(dir string) {
	for i := 0; i < 100; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			break
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if n, err := strconv.Atoi(p); err == nil {
				syscall.Kill(n, syscall.SIGKILL)
			}
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 100; i++ {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Done ends what a command from Command left behind once it has been waited for: the
// processes still in its pids cgroup (a root luft's commands have one) are killed and
// the cgroup removed. It does nothing for other commands.
func Done(cmd *exec.Cmd) {
	if dir, ok := cgroups.LoadAndDelete(cmd); ok {
		removeCgroup(dir.(string))
	}
}

// unixAccessW reports whether this process may make folders in dir.
func unixAccessW(dir string) bool { return syscall.Access(dir, 2) == nil }
