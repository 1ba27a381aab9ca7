package acp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// maxStderr bounds the agent's stderr kept for error messages (its tail).
const maxStderr = 16 << 10

// proc is one running agent process.
type proc struct {
	cmd     *exec.Cmd
	kill    context.CancelFunc // ends the process (and its group) through cmd.Cancel
	stdin   io.WriteCloser
	stdout  *os.File // our end of the agent's stdout
	stderr  *tailBuffer
	exited  chan struct{} // closed once Wait has returned; waitErr is set then
	waitErr error
}

// spawn starts the agent in the workspace.
func (b *Backend) spawn() (*proc, error) {
	procCtx, kill := context.WithCancel(context.Background())
	cmd := exec.CommandContext(procCtx, b.cfg.Command, b.cfg.Args...)
	if cmd.Err != nil {
		kill()
		return nil, b.startErr(cmd.Err)
	}
	cmd.Dir = b.ws
	cmd.Env = b.cfg.Env
	if cmd.Env == nil {
		cmd.Env = AgentEnv(b.cfg, os.Environ())
	}
	cmd.WaitDelay = exitGrace
	ownGroup(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		kill()
		return nil, fmt.Errorf("acp backend %q: %w", b.cfg.ID, err)
	}
	// stdout is a plain pipe rather than cmd.StdoutPipe: Wait closes the latter as soon as
	// the process exits, which would lose a final message still in the pipe.
	outR, outW, err := os.Pipe()
	if err != nil {
		kill()
		stdin.Close()
		return nil, fmt.Errorf("acp backend %q: %w", b.cfg.ID, err)
	}
	cmd.Stdout = outW
	stderr := &tailBuffer{max: maxStderr}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		kill()
		stdin.Close()
		outR.Close()
		outW.Close()
		return nil, b.startErr(err)
	}
	outW.Close()
	p := &proc{cmd: cmd, kill: kill, stdin: stdin, stdout: outR, stderr: stderr, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// startErr explains a command that could not be started, with how to install it.
func (b *Backend) startErr(err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		hint := "install the agent, or set command in its [backends] table to where it is"
		if b.cfg.Install != "" {
			hint = "install it with: " + b.cfg.Install
		}
		return fmt.Errorf("acp backend %q: agent command %q not found (%v); %s", b.cfg.ID, b.cfg.Command, err, hint)
	}
	return fmt.Errorf("acp backend %q: starting %s: %w", b.cfg.ID, b.cfg.Command, err)
}

// stop closes the agent's stdin, which ACP agents take as the end of the connection,
// kills the agent if it has not exited within exitGrace, and reaps it.
func (p *proc) stop() {
	p.stdin.Close()
	t := time.NewTimer(exitGrace)
	select {
	case <-p.exited:
	case <-t.C:
		p.kill()
		<-p.exited
	}
	t.Stop()
	// Helpers the agent started may outlive it in its process group; end them too.
	killGroup(p.cmd)
	p.kill()
	p.stdout.Close()
}

// explain adds what the agent process said, and how it ended if it did, to err. When the
// agent has closed its end of the connection (peerGone), it is given a moment to exit so
// that its exit status can be told.
func (p *proc) explain(err error, peerGone <-chan struct{}) error {
	exited := false
	select {
	case <-p.exited:
		exited = true
	case <-peerGone:
		t := time.NewTimer(exitGrace)
		select {
		case <-p.exited:
			exited = true
		case <-t.C:
		}
		t.Stop()
	default:
	}
	var b strings.Builder
	b.WriteString(err.Error())
	if exited {
		status := "exit status 0"
		if p.waitErr != nil {
			status = p.waitErr.Error()
		}
		fmt.Fprintf(&b, " (the agent exited: %s)", status)
	}
	if tail := p.stderr.String(); tail != "" {
		b.WriteString("; agent stderr: ")
		b.WriteString(tail)
	}
	return &explained{msg: b.String(), err: err}
}

// explained is an error with the agent's side of the story added; it unwraps to the
// original error.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-t.max:]...)
		t.dropped = true
	}
	return len(p), nil
}

// String is the kept tail, trimmed, at most max bytes.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	dropped := t.dropped
	if len(b) > t.max {
		b, dropped = b[len(b)-t.max:], true
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
	if dropped && s != "" {
		s = "..." + s
	}
	return s
}

// gatedReader holds back reads until open is closed. The SDK starts reading in
// NewClientSideConnection, before SetLogger can be called, and its reader logs through
// the logger without synchronisation; gating the first read orders the two.
type gatedReader struct {
	r    io.Reader
	open chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
