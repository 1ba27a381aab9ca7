//go:build !unix

package daemon

import (
	"errors"
	"os"
)

var errNoLock = errors.New("the luft daemon needs a unix system (Linux, macOS, BSD)")

func lockFile(*os.File) (bool, error) { return false, errNoLock }

func waitLock(*os.File) error { return errNoLock }

func ownedByMe(os.FileInfo) bool { return true }

func lockWait(*os.File) error { return errNoLock }

func unlock(*os.File) {}
