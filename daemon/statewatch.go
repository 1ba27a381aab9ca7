package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/luft-run/luft/storage"
)

// ErrStateDirGone is returned by Run when the state dir it was started on was moved,
// deleted or replaced while it ran.
var ErrStateDirGone = errors.New("the daemon's state dir was moved or deleted while it ran")

// defaultWatchEvery is how often a daemon checks that its state dir is still where it
// was started.
const defaultWatchEvery = 2 * time.Second

// A daemon whose state dir is moved away (or deleted) keeps its open files and goes on
// running, but no client finds it any more: its socket is not at the path clients dial,
// and a new daemon for that path would host the same runs a second time if the dir came
// back. So the daemon compares, every Options.WatchEvery, the state dir, its lock file,
// its socket and luft.db at the paths it started on with the files it opened (device and
// inode, os.SameFile); any difference shuts it down as SIGTERM does.

type watched struct {
	path string
	fi   os.FileInfo
}

// watchList is what the daemon watches: dir itself, the lock file it holds, the socket it
// listens on and, when there is one, the SQLite database.
func watchList(dir string, lock *os.File, sock string) ([]watched, error) {
	var list []watched
	add := func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return fmt.Errorf("daemon: stat %s: %w", path, err)
		}
		list = append(list, watched{path, fi})
		return nil
	}
	fi, err := os.Stat(dir)
	if err := add(dir, fi, err); err != nil {
		return nil, err
	}
	fi, err = lock.Stat() // the file the daemon holds, not whatever is at the path now
	if err := add(lock.Name(), fi, err); err != nil {
		return nil, err
	}
	fi, err = os.Stat(sock)
	if err := add(sock, fi, err); err != nil {
		return nil, err
	}
	db := filepath.Join(dir, storage.DBFile)
	if fi, err := os.Stat(db); err == nil {
		list = append(list, watched{db, fi})
	}
	return list, nil
}

// stateDirChange says what no longer is where it was, or "" when everything is.
func stateDirChange(list []watched) string {
	for _, w := range list {
		fi, err := os.Stat(w.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return w.path + " is gone"
		case err != nil:
			// Not a sign of a move (a permission change, say): the next check sees more.
			continue
		case !os.SameFile(fi, w.fi):
			return w.path + " is no longer the one the daemon started with (moved or replaced)"
		}
	}
	return ""
}

// watchStateDir sends what changed once the state dir is no longer where it was.
func watchStateDir(ctx context.Context, list []watched, every time.Duration) <-chan string {
	gone := make(chan string, 1)
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if why := stateDirChange(list); why != "" {
					gone <- why
					return
				}
			}
		}
	}()
	return gone
}
