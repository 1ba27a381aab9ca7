//go:build !linux

package sandbox

import (
	"errors"
	"runtime"
)

// self is unused where nothing can be confined.
const self = ""

func probe() (int, error) {
	return 0, errors.New("Landlock is Linux's; on " + runtime.GOOS + " commands cannot be confined")
}

func confineAndExec(request) error {
	return errors.New("confinement is not available on " + runtime.GOOS)
}
