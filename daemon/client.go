package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ErrNotRunning is returned by Dial when no daemon serves the state dir.
var ErrNotRunning = errors.New("no luft daemon runs for this state dir")

// Client talks to the daemon of a state dir over its unix socket.
type Client struct {
	dir  string
	http *http.Client
}

// Dial connects to the daemon of dir. It refuses a socket other users could open or one
// that belongs to someone else: a request to it would go to whoever put it there.
func Dial(ctx context.Context, dir string) (*Client, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(abs, SocketFile)
	fi, err := os.Lstat(sock)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (start one with luft daemon start)", ErrNotRunning, abs)
	}
	if err != nil {
		return nil, fmt.Errorf("daemon socket %s: %w", sock, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return nil, fmt.Errorf("daemon socket %s: refused: it is not a socket (remove it, then luft daemon start)", sock)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("daemon socket %s: refused: mode %04o lets other users connect (want 0600); stop that daemon and start it again", sock, fi.Mode().Perm())
	}
	if !ownedByMe(fi) {
		return nil, fmt.Errorf("daemon socket %s: refused: it belongs to another user", sock)
	}
	c := &Client{dir: abs, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
	if _, err := c.Status(ctx); err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s (its socket is left from a daemon that is gone; luft daemon start)", ErrNotRunning, abs)
		}
		// A daemon that dies while it accepts the connection resets it or closes it
		// unanswered (net/http words that several ways): no answer at all is a daemon that
		// is gone as well. One that still lives answers the next Dial, and a second daemon
		// started meanwhile refuses to start while it holds the lock.
		var ue *url.Error
		if errors.As(err, &ue) && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: %s (its socket gave no answer: %v; luft daemon start)", ErrNotRunning, abs, err)
		}
		return nil, err
	}
	return c, nil
}

// HTTP is the client's http.Client: every request goes to the daemon's socket, which Dial
// checked (for a door that speaks its own protocol, such as /mcp).
func (c *Client) HTTP() *http.Client { return c.http }

// Close releases idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// APIError is an error answer of the API.
type APIError struct {
	Status int
	Msg    string
}

func (e *APIError) Error() string { return e.Msg }

// do sends a request and decodes a JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://luft"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("daemon %s: %w", c.dir, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("daemon %s: read its answer: %w", c.dir, err)
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		}
		return &APIError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Status is GET /api/daemon.
func (c *Client) Status(ctx context.Context) (StatusJSON, error) {
	var st StatusJSON
	err := c.do(ctx, http.MethodGet, "/api/daemon", nil, &st)
	return st, err
}

// Start starts a run in the daemon and returns its id.
func (c *Client) Start(ctx context.Context, req StartRequest) (string, error) {
	var out struct {
		RunID string `json:"run_id"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/runs", req, &out); err != nil {
		return "", err
	}
	return out.RunID, nil
}

// Resume resumes a stopped run in the daemon ("" = the newest unfinished one) and returns
// its id.
func (c *Client) Resume(ctx context.Context, ref string, req ResumeRequest) (string, error) {
	if ref == "" {
		ref = "-"
	}
	var out struct {
		RunID string `json:"run_id"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/runs/"+ref+"/resume", req, &out); err != nil {
		return "", err
	}
	return out.RunID, nil
}

// Cancel asks the daemon to cancel a run.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/runs/"+id+"/cancel", nil, nil)
}

// Approve answers a tool call a hosted run waits on (approvalID "" = its only one).
func (c *Client) Approve(ctx context.Context, id, approvalID string, allow bool) error {
	return c.do(ctx, http.MethodPost, "/api/runs/"+id+"/approve", ApproveRequest{ApprovalID: approvalID, Allow: &allow}, nil)
}

// Shutdown asks the daemon to stop (req.GraceMS: with that grace period instead of its
// own), then waits until its process has exited (it holds the state dir's lock until
// then): at most the grace period the daemon answers with plus margin, or until ctx ends.
func (c *Client) Shutdown(ctx context.Context, req ShutdownRequest, margin time.Duration) error {
	lock, err := os.OpenFile(filepath.Join(c.dir, LockFile), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("daemon %s: open its lock file: %w", c.dir, err)
	}
	defer lock.Close()
	var reply ShutdownReply
	if err := c.do(ctx, http.MethodPost, "/api/daemon/shutdown", req, &reply); err != nil {
		return err
	}
	wait := time.Duration(reply.GraceMS)*time.Millisecond + margin
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- waitLock(lock) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("daemon %s: still stopping after %s (its grace period plus %s): %w", c.dir, wait, margin, ctx.Err())
	}
}

// WaitGone blocks until no process holds dir's daemon lock, or ctx ends.
func WaitGone(ctx context.Context, dir string) error {
	lock, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	done := make(chan error, 1)
	go func() { done <- waitLock(lock) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
