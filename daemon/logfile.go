package daemon

import (
	"fmt"
	"os"
	"sync"
)

// RotatingLog is the daemon's log file: when a write would take it past Max bytes, the
// file becomes <path>.1 (replacing the previous one) and a new one starts, so the log
// never holds more than about twice Max.
type RotatingLog struct {
	path string
	max  int64

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenLog opens (appends to) the log at path, rotated at max bytes.
func OpenLog(path string, max int64) (*RotatingLog, error) {
	l := &RotatingLog{path: path, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *RotatingLog) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("daemon log %s: %w", l.path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("daemon log %s: %w", l.path, err)
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Write appends p, rotating first when it would not fit.
func (l *RotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, os.ErrClosed
	}
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		l.f.Close()
		l.f = nil
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return 0, fmt.Errorf("daemon log %s: rotate: %w", l.path, err)
		}
		if err := l.open(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

// Close closes the file.
func (l *RotatingLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
