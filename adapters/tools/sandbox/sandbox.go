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

// Policy says what a confined command may change.
type Policy struct {
	// Write are folders the command may create, change and remove files in, with
	// everything below them. Each must exist.
	Write []string `json:"write"`
}

// request is what the parent hands the re-executed child, as one JSON argument.
type request struct {
	Policy
	Path string   `json:"path"` // the program, as exec.LookPath found it
	Argv []string `json:"argv"` // its arguments, argv[0] included
}

func init() {
	if len(os.Args) > 2 && os.Args[1] == marker {
		os.Exit(childMain(os.Args[2], os.Stderr))
	}
}

// childMain applies the policy and execs the program; it returns only on failure, with
// the exit status a shell gives a program it cannot confine (126) or find (127).
func childMain(arg string, stderr io.Writer) int {
	var r request
	if err := json.Unmarshal([]byte(arg), &r); err != nil || r.Path == "" || len(r.Argv) == 0 {
		fmt.Fprintf(stderr, "luft sandbox: malformed request (this argument is luft's own, not for users): %v\n", err)
		return 126
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

// Command returns a command that runs the program at path (exec.LookPath's answer) with
// argv (argv[0] included) confined by p. Where the kernel cannot confine (see Status)
// it runs the program directly. The caller sets Dir, Env, output and the rest as for
// any exec.Cmd; Env reaches the program unchanged.
func Command(ctx context.Context, p Policy, path string, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("sandbox: no program to run")
	}
	if _, err := Status(); err != nil {
		cmd := exec.CommandContext(ctx, path, argv[1:]...)
		cmd.Args[0] = argv[0]
		return cmd, nil
	}
	for _, dir := range p.Write {
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("sandbox: writable folder %q is not an absolute path", dir)
		}
	}
	req, err := json.Marshal(request{Policy: p, Path: path, Argv: argv})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %v", err)
	}
	cmd := exec.CommandContext(ctx, self, marker, string(req))
	cmd.Args[0] = argv[0]
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
