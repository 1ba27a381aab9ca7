package tools

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// workspace is the directory the file tools are confined to.
type workspace struct {
	dir   string // absolute, as configured
	real  string // dir with symbolic links resolved, so /private/var/… matches /var/…
	guard Guard  // what agents may write (Config.Protected and ProtectedNames)
}

// Within reports whether path is dir or lies below it (both clean and absolute).
func Within(dir, path string) bool {
	r, err := filepath.Rel(dir, path)
	return err == nil && (r == "." || filepath.IsLocal(r))
}

// MaxPathBytes is the longest path the tools and the coding agents' requests may name:
// Linux's PATH_MAX. A longer path cannot be opened anyway, and resolving one (ResolveExisting
// tries each leading part in turn) would take time quadratic in its length.
const MaxPathBytes = 4096

// CheckPathLen refuses a path longer than MaxPathBytes.
func CheckPathLen(p string) error {
	if len(p) > MaxPathBytes {
		return fmt.Errorf("the path is %d bytes long, more than the %d a file may have", len(p), MaxPathBytes)
	}
	return nil
}

// ResolveExisting resolves the symbolic links of the longest existing leading part of
// path, so that a path through a link compares as where it leads.
func ResolveExisting(path string) string {
	rest := ""
	for p := filepath.Clean(path); ; {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// rel turns a path the model gave into one relative to the workspace, refusing the ones
// that lead outside by their spelling. Symbolic links that lead outside are refused
// later, by the os.Root the path is opened through.
func (w workspace) rel(tool, p string) (string, error) {
	if err := CheckPathLen(p); err != nil {
		return "", fmt.Errorf("%s: %w", tool, err)
	}
	if filepath.IsAbs(p) {
		p = filepath.Clean(p)
		for _, base := range []string{w.dir, w.real} {
			if r, err := filepath.Rel(base, p); err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				return r, nil
			}
		}
		return "", w.outside(tool, p)
	}
	r := filepath.Clean(p)
	if r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", w.outside(tool, p)
	}
	return r, nil
}

func (w workspace) outside(tool, p string) error {
	return fmt.Errorf("%s: path %q is outside the workspace %s; only files inside it can be used (give a path relative to the workspace)",
		tool, p, w.dir)
}

// openPath turns the path the model gave into one relative to the workspace (see rel),
// refuses a protected one when the tool writes, and opens the workspace as the os.Root to
// reach it through; the caller closes the root. The root is opened per call rather than
// held, so a Set owns no file descriptor and needs no Close.
func (w workspace) openPath(tool, p string, write bool) (root *os.Root, rel string, err error) {
	rel, err = w.rel(tool, p)
	if err != nil {
		return nil, "", err
	}
	if write {
		if err := w.guard.Check(rel); err != nil {
			return nil, "", fmt.Errorf("%s: %v", tool, err)
		}
	}
	root, err = os.OpenRoot(w.dir)
	if err != nil {
		return nil, "", fmt.Errorf("%s: cannot open the workspace %s: %v", tool, w.dir, err)
	}
	return root, rel, nil
}

// openRead opens rel in root for reading and says what the descriptor is on. It does
// not wait: opening a FIFO for reading blocks until a writer comes, and a name that a
// Stat found to be a file or a folder may be a FIFO by the time it is opened. The
// caller checks the FileInfo, which is the descriptor's, before reading.
func openRead(root *os.Root, rel string) (*os.File, os.FileInfo, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// pathErr explains a failed operation on the path the model gave.
func (w workspace) pathErr(tool, p string, err error) error {
	switch {
	case escapes(err):
		return fmt.Errorf("%s: path %q is outside the workspace %s: it leads out through \"..\" or a symbolic link; only files inside the workspace can be used",
			tool, p, w.dir)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: %q does not exist in the workspace %s (list_dir shows what is there)", tool, p, w.dir)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s: %q: permission denied", tool, p)
	case errors.Is(err, syscall.ELOOP):
		// os.Root opens each part without following links and follows them itself, so
		// this is a loop of links, or a part replaced by a link while it was opened.
		return fmt.Errorf("%s: %q goes through a loop of symbolic links, or a part of it was replaced by a symbolic link while it was being opened; "+
			"nothing was read or written (use a path without symbolic links)", tool, p)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s: %q: a part of the path is not a directory (or was replaced while it was being used)", tool, p)
	}
	var refused *RefusedError
	if errors.As(err, &refused) {
		return fmt.Errorf("%s: %v", tool, err)
	}
	// The innermost error: os.Root's MkdirAll wraps a PathError in another.
	var pe *os.PathError
	for errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: %q: %v", tool, p, err)
}

// escapes reports whether err is os.Root's refusal of a path that leaves the root. The
// os package does not export that error, so it is recognised by its text.
func escapes(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if err.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}
