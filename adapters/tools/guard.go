package tools

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ProtectedNames are files and folders no agent writes wherever they are in a
// workspace: version control's own folders (a hook, or core.fsmonitor in .git/config,
// runs a command the next time someone — or an allowed `git status` — uses git there)
// and luft's own config and state (a planted luft.toml would choose the next run's
// backend and allowed commands). Names compare without regard to case, as they do on
// case-insensitive file systems.
var ProtectedNames = []string{".git", ".hg", ".svn", ".bzr", ".jj", "_darcs", ".luft", "luft.toml"}

// protectedName returns the protected name a path relative to the workspace goes
// through, or "".
func protectedName(rel string) string {
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		for _, n := range ProtectedNames {
			if strings.EqualFold(part, n) {
				return n
			}
		}
	}
	return ""
}

// ErrProtected is what a refused write to a protected file wraps.
var ErrProtected = errors.New("agents may not change it")

// RefusedError is a write the Guard refuses; its text names the file and why.
type RefusedError struct {
	msg       string
	protected bool // the file is a protected one (errors.Is(err, ErrProtected))
}

func (e *RefusedError) Error() string { return e.msg }

// Unwrap lets errors.Is find ErrProtected in a refusal for a protected file.
func (e *RefusedError) Unwrap() error {
	if e.protected {
		return ErrProtected
	}
	return nil
}

func refused(format string, args ...any) error {
	return &RefusedError{msg: fmt.Sprintf(format, args...)}
}

func refusedProtected(format string, args ...any) error {
	return &RefusedError{msg: fmt.Sprintf(format, args...), protected: true}
}

// Guard decides whether an agent may write a file of a workspace, and opens it so that
// what is checked is what gets written. The checks, in order:
//
//   - the path as given, and as its symbolic links resolve, must not go through a
//     ProtectedNames entry or lie in one of the protected paths (the active config file,
//     the state dir);
//   - the file is opened through an os.Root on the workspace (nothing outside is
//     reachable) and, where the system can say which file an open descriptor is
//     (Linux's /proc/self/fd), that file is checked again — a link swapped in between the
//     check and the open is caught;
//   - it must be a regular file with one link: a hard link made beforehand (to
//     .luft/luft.db, or to a file outside the workspace) would have the write land there.
type Guard struct {
	dir       string   // the workspace as configured, absolute
	real      string   // the workspace with symbolic links resolved
	protected []string // absolute, symbolic links resolved
}

// NewGuard returns the Guard of the workspace dir (absolute) with the protected paths.
func NewGuard(dir string, protected []string) Guard {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		real = dir
	}
	g := Guard{dir: dir, real: real}
	for _, p := range protected {
		if abs, err := filepath.Abs(p); err == nil {
			g.protected = append(g.protected, ResolveExisting(abs))
		}
	}
	return g
}

// Check refuses a write to rel (relative to the workspace) by its name: the path as
// given and with the symbolic links of its existing part resolved. A path that leads
// outside the workspace is left to the os.Root it is opened through, which refuses it.
func (g Guard) Check(rel string) error {
	if err := CheckPathLen(rel); err != nil {
		return err
	}
	if err := g.checkReal(ResolveExisting(filepath.Join(g.real, rel)), rel); err != nil {
		return err
	}
	return checkName(rel, rel)
}

// checkReal refuses the file at real (absolute, links resolved) when it is protected.
func (g Guard) checkReal(real, rel string) error {
	for _, p := range g.protected {
		if Within(p, real) {
			return refusedProtected("%s is luft's own config or state (%s), which agents may not change", rel, p)
		}
	}
	if r, err := filepath.Rel(g.real, real); err == nil && filepath.IsLocal(r) {
		return checkName(r, rel)
	}
	return nil
}

// checkName refuses r, a path relative to the workspace, when it goes through one of
// ProtectedNames; rel is the path as the agent gave it.
func checkName(r, rel string) error {
	what := "version control's own folder, whose hooks and config run commands"
	switch n := protectedName(r); n {
	case "":
		return nil
	case ".luft", "luft.toml":
		what = "luft's own config or state"
	default:
		what = n + ": " + what
	}
	if r != rel {
		return refusedProtected("%s leads to %s, %s, which agents may not change", rel, r, what)
	}
	return refusedProtected("%s is %s, which agents may not change", rel, what)
}

// Open opens rel in root (the workspace) for reading and writing, creating it (mode
// perm) when create is set and it does not exist, after the checks of the Guard doc.
// The file is not truncated. created says whether Open made it.
func (g Guard) Open(root *os.Root, rel string, create bool, perm os.FileMode) (f *os.File, created bool, err error) {
	if err := g.Check(rel); err != nil {
		return nil, false, err
	}
	// O_NONBLOCK: a FIFO swapped in for the file must not hold the open (it is refused
	// below, as not a regular file).
	f, err = root.OpenFile(rel, os.O_RDWR|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) && create {
		// A dangling symbolic link would be followed and its target created: refuse it.
		if fi, lerr := root.Lstat(rel); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
			return nil, false, refused("%s is a symbolic link to a file that does not exist; write to a real path", rel)
		}
		f, err = root.OpenFile(rel, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NONBLOCK, perm)
		created = err == nil
	}
	if err != nil {
		return nil, false, err
	}
	refuse := func(err error) (*os.File, bool, error) {
		f.Close()
		if created {
			_ = root.Remove(rel)
		}
		return nil, false, err
	}
	fi, err := f.Stat()
	if err != nil {
		return refuse(err)
	}
	if !fi.Mode().IsRegular() {
		return refuse(refused("%s is not a regular file (it is %s)", rel, fileKind(fi.Mode())))
	}
	if n := links(fi); n > 1 {
		return refuse(refused("%s has %d hard links, so a write would also change the file under its other names, which may be outside the workspace; "+
			"files with more than one link are not written (write a new file instead)", rel, n))
	}
	if real, ok := openedPath(f); ok {
		if !Within(g.real, real) {
			return refuse(refused("%s leads outside the workspace %s, to %s", rel, g.dir, real))
		}
		if err := g.checkReal(real, rel); err != nil {
			return refuse(err)
		}
	}
	return f, created, nil
}

// WriteFile replaces the content of rel in root with data, creating it (mode 0644) when
// missing, under the Guard's checks. existed says whether the file was there before.
func (g Guard) WriteFile(root *os.Root, rel string, data []byte) (existed bool, err error) {
	// Checked before the parent folders are made, so no folder appears in .git either.
	if err := g.Check(rel); err != nil {
		return false, err
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return false, err
		}
	}
	f, created, err := g.Open(root, rel, true, 0o644)
	if err != nil {
		return false, err
	}
	return !created, replace(f, data)
}

// replace makes data the whole content of f, and closes it.
func replace(f *os.File, data []byte) error {
	err := f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(data, 0)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readAll reads f from its start.
func readAll(f *os.File) ([]byte, error) {
	return io.ReadAll(io.NewSectionReader(f, 0, 1<<62))
}
