package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// marker as the first argument makes the process apply a Policy and exec a program
// (see the package doc). It is spelled so no one types it by chance.
const marker = "__luft_confined_exec__"

// Policy says what a confined command may read, change and reach.
type Policy struct {
	// Write are folders the command may create, change, remove and read files in, with
	// everything below them. Each must exist.
	Write []string `json:"write"`
	// Read are folders and files the command may read and execute, with everything below
	// a folder, besides Write and the system folders (SystemReadable). A path that does
	// not exist is skipped.
	Read []string `json:"read,omitempty"`
	// Hide are paths below Read or Write that the command must not reach at all (luft's
	// state dir and config, the user's credentials): in the command's own mount
	// namespace an empty read-only folder, or an unopenable file, lies over each. A path
	// that does not exist, or that no granted folder holds, needs no hiding.
	Hide []string `json:"hide,omitempty"`
	// Ports are the TCP ports the command may connect to; AnyPort lifts the rule. Without
	// either no TCP connection is allowed (binding, for a test's own server, is).
	Ports   []uint16 `json:"ports,omitempty"`
	AnyPort bool     `json:"any_port,omitempty"`
	// Procs caps the processes and threads the command and its children may run at once
	// (RLIMIT_NPROC, counted inside the command's user namespace); 0 = DefaultProcs.
	Procs uint64 `json:"procs,omitempty"`
	// FileSize caps the size of any file the command writes (RLIMIT_FSIZE); 0 =
	// DefaultFileSize.
	FileSize uint64 `json:"file_size,omitempty"`
	// Unconfined lets the command run where the kernel cannot confine it (see Check);
	// it still gets what can be had: dropped capabilities, no_new_privs, the limits.
	Unconfined bool `json:"unconfined,omitempty"`
}

// Default limits of a confined command.
const (
	DefaultProcs    = 1024
	DefaultFileSize = 4 << 30
)

// MinABI is the Landlock ABI that confines a command as Policy says: reads and writes
// (ABI 1–3) and TCP connections (ABI 4).
const MinABI = 4

// request is what the parent hands the re-executed child, as one JSON argument.
type request struct {
	Policy
	Path    string   `json:"path"` // the program, as exec.LookPath found it
	Argv    []string `json:"argv"` // its arguments, argv[0] included
	Newns   bool     `json:"newns,omitempty"`
	Confine bool     `json:"confine,omitempty"` // apply Landlock (false: the kernel has none and Unconfined is set)
	Root    bool     `json:"root,omitempty"`    // the caller is root (hide root-only files too)
	// Hop makes the helper start the namespace stage itself. A parent that is not
	// dumpable (Harden) cannot write a new user namespace's ID maps unless it is root,
	// so for other users a first helper, dumpable again after its exec, starts the
	// second in the namespace and waits for it.
	Hop bool `json:"hop,omitempty"`
	// Cgroup is the pids cgroup the helper joins before it execs (a root luft's
	// commands: the kernel does not apply RLIMIT_NPROC to root).
	Cgroup string `json:"cgroup,omitempty"`
}

func init() {
	if len(os.Args) > 2 && os.Args[1] == marker {
		os.Exit(childMain(os.Args[2], os.Stderr))
	}
}

// childMain applies the policy and execs the program; it returns only on failure, with
// the exit status a shell gives a program it cannot confine (126) or find (127).
func childMain(arg string, stderr io.Writer) int {
	switch arg {
	case nsProbeArg:
		return nsProbe()
	case nsProbeHopArg:
		return nsProbeHop()
	}
	var r request
	if err := json.Unmarshal([]byte(arg), &r); err != nil || r.Path == "" || len(r.Argv) == 0 {
		fmt.Fprintf(stderr, "luft sandbox: malformed request (this argument is luft's own, not for users): %v\n", err)
		return 126
	}
	if r.Hop {
		return hop(r, stderr)
	}
	err := confineAndExec(r)
	fmt.Fprintf(stderr, "luft sandbox: %v\n", err)
	var ee *execError
	if errors.As(err, &ee) && errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// execError is a failed exec of the program itself, after the rules were applied.
type execError struct {
	path string
	err  error
}

func (e *execError) Error() string { return fmt.Sprintf("cannot run %s: %v", e.path, e.err) }
func (e *execError) Unwrap() error { return e.err }

// ErrCannotConfine is what Check and Command return when the kernel cannot confine a
// command as its Policy says and the Policy does not allow running unconfined.
var ErrCannotConfine = errors.New("commands cannot be confined here")

// Check reports why a command under p cannot run here: the kernel offers no Landlock,
// or too old a one (MinABI), or p has paths to hide and the system lets no user
// namespace be made to hide them in. nil means Command confines it as p says, or p is
// Unconfined.
func Check(p Policy) error {
	if p.Unconfined {
		return nil
	}
	abi, err := Status()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v; set [tools] unconfined = true in luft.toml to run allowed commands without kernel confinement", ErrCannotConfine, err)
	case abi < MinABI:
		return fmt.Errorf("%w: this kernel's Landlock (ABI %d) cannot restrict network connections (ABI %d, Linux 6.7, can); set [tools] unconfined = true in luft.toml to run allowed commands anyway", ErrCannotConfine, abi, MinABI)
	}
	if hide := toHide(p, os.Geteuid() == 0); len(hide) > 0 {
		if err := Namespaces(); err != nil {
			return fmt.Errorf("%w: %s lies in a folder commands may read, and hiding it needs a user namespace, which this system refuses (%v); move it out of the workspace (luft's state dir: --state-dir or LUFT_HOME) or out of [tools] readable and writable ([tools] unconfined = true would let commands read it)",
				ErrCannotConfine, hide[0], err)
		}
	}
	return nil
}

// Command returns a command that runs the program at path (exec.LookPath's answer) with
// argv (argv[0] included) confined by p. It fails with ErrCannotConfine where Check does.
// The caller sets Dir, Env, output and the rest as for any exec.Cmd, and may set
// SysProcAttr fields besides those Command sets (Setpgid, say); Env reaches the program
// unchanged.
func Command(ctx context.Context, p Policy, path string, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("sandbox: no program to run")
	}
	Harden()
	for _, list := range [][]string{p.Write, p.Read, p.Hide} {
		for _, dir := range list {
			if !filepath.IsAbs(dir) {
				return nil, fmt.Errorf("sandbox: folder %q is not an absolute path", dir)
			}
		}
	}
	if err := Check(p); err != nil {
		return nil, err
	}
	if self == "" { // nothing can be confined on this system, and p says run anyway
		cmd := exec.CommandContext(ctx, path, argv[1:]...)
		cmd.Args[0] = argv[0]
		return cmd, nil
	}
	_, lerr := Status()
	r := request{Policy: p, Path: path, Argv: argv, Confine: lerr == nil, Root: os.Geteuid() == 0}
	r.Newns = Namespaces() == nil
	r.Hide = toHide(p, r.Root)
	if !r.Newns {
		r.Hide = nil // Check allowed it: p is Unconfined
	}
	if r.Root {
		procs := p.Procs
		if procs == 0 {
			procs = DefaultProcs
		}
		r.Cgroup = newPidsCgroup(procs)
	}
	req, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %v", err)
	}
	cmd := exec.CommandContext(ctx, self, marker, string(req))
	cmd.Args[0] = argv[0]
	switch {
	case r.Newns && os.Getuid() == 0:
		cmd.SysProcAttr = userns()
	case r.Newns:
		r.Hop = true
		if req, err = json.Marshal(r); err != nil {
			return nil, fmt.Errorf("sandbox: %v", err)
		}
		cmd = exec.CommandContext(ctx, self, marker, string(req))
		cmd.Args[0] = argv[0]
	}
	if r.Cgroup != "" {
		cgroups.Store(cmd, r.Cgroup)
	}
	return cmd, nil
}

var (
	statusOnce sync.Once
	statusABI  int
	statusErr  error
)

// Status reports the Landlock ABI version the kernel offers, or why commands cannot be
// confined here. It probes the kernel once per process.
func Status() (abi int, err error) {
	statusOnce.Do(func() { statusABI, statusErr = probe() })
	return statusABI, statusErr
}

var (
	nsOnce sync.Once
	nsErr  error
)

// Namespaces reports whether this process may start a command in a user and mount
// namespace of its own, where Policy.Hide is hidden; nil means it may. It tries once
// per process.
func Namespaces() error {
	nsOnce.Do(func() { nsErr = probeNamespaces() })
	return nsErr
}

// nsProbeArg makes the re-executed child check that it may mount in its namespace.
const nsProbeArg = "probe-namespaces"

// nsProbeHopArg makes it start that probe in a namespace itself, as a hop does (a user
// other than root cannot start it from a non-dumpable process).
const nsProbeHopArg = "probe-namespaces-hop"

var hardenOnce sync.Once

// Harden makes this process's memory and environment unreadable to other processes of
// its user (PR_SET_DUMPABLE 0: /proc/PID/environ and /proc/PID/mem need CAP_SYS_PTRACE
// then, which confined commands never have). luft holds API keys in its environment
// from its start; a command it runs, or a program a coding agent runs, must not read
// them. Command calls it; luft's main calls it first thing.
func Harden() { hardenOnce.Do(harden) }

// rootOnly are files only root may read; a command luft runs as root must not read them
// either (a root command has no capabilities, but owns these files). Globs allowed.
var rootOnly = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
	"/etc/ssh/ssh_host_*_key", "/root/.ssh"}

// toHide is p.Hide (and, for root, rootOnly) narrowed to what needs hiding: paths that
// exist and that a folder the command may read or write holds. Links are resolved, since
// a mount lands on what a path leads to.
func toHide(p Policy, root bool) []string {
	granted := append(append(append([]string{}, SystemReadable...), p.Write...), p.Read...)
	cands := append([]string{}, p.Hide...)
	if root {
		for _, g := range rootOnly {
			m, _ := filepath.Glob(g)
			cands = append(cands, m...)
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, h := range cands {
		r, err := filepath.EvalSymlinks(h)
		if err != nil || seen[r] {
			continue
		}
		for _, g := range granted {
			if within(g, r) {
				seen[r] = true
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// within reports whether path is dir or lies below it (both clean and absolute).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// hop is the first helper of a Hop request: it starts the second in a new user and
// mount namespace with the same streams and environment, and exits as it exits.
func hop(r request, stderr io.Writer) int {
	r.Hop = false
	req, err := json.Marshal(r)
	if err != nil {
		fmt.Fprintf(stderr, "luft sandbox: %v\n", err)
		return 126
	}
	cmd := exec.Command(self, marker, string(req))
	cmd.Args[0] = r.Argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = userns()
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if code := ee.ExitCode(); code >= 0 {
			return code
		}
		return 128 + signalOf(ee)
	default:
		fmt.Fprintf(stderr, "luft sandbox: cannot start the command in a namespace of its own: %v\n", err)
		return 126
	}
}
