//go:build !linux

package sandbox

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
)

// self is unused where nothing can be confined.
const self = ""

// SystemReadable is empty where nothing can be confined.
var SystemReadable []string

func probe() (int, error) {
	return 0, errors.New("Landlock is Linux's; on " + runtime.GOOS + " commands cannot be confined")
}

func probeNamespaces() error {
	return errors.New("user namespaces are Linux's")
}

func nsProbe() int { return 1 }

func nsProbeHop() int { return 1 }

func harden() {}

func userns() *syscall.SysProcAttr { return nil }

func confineAndExec(request) error {
	return errors.New("confinement is not available on " + runtime.GOOS)
}

func signalOf(*exec.ExitError) int { return 0 }

func newPidsCgroup(uint64) string { return "" }

var cgroups interface{ Store(any, any) } = noStore{}

type noStore struct{}

func (noStore) Store(any, any) {}

// Done ends what a command from Command left behind; there is nothing to end here.
func Done(*exec.Cmd) {}
