package mcptools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/config"
	buildinfo "github.com/luft-run/luft/internal/version"
)

// Server is one upstream MCP tool server: [mcp_servers.<Name>] in luft.toml. Exactly one
// of Command (a subprocess spoken to over stdio) and URL (streamable HTTP) is set.
type Server struct {
	Name    string
	Command string
	Args    []string
	// Env is added to the subprocess's environment, which is otherwise only
	// tools.BaseEnv taken from luft's (no API keys or tokens).
	Env map[string]string
	// PassEnv names variables of luft's environment the subprocess also gets (a token
	// the server needs, kept out of the config file); "NAME*" is a prefix.
	PassEnv []string
	URL     string
}

// ConnectTimeout bounds how long Open waits for one server to start, answer the MCP
// handshake and list its tools. It is generous because a server run through npx or uvx
// may first be downloaded. A caller that wants less gives Open a context with a deadline.
const ConnectTimeout = 60 * time.Second

// maxServerName leaves room in the 64-byte tool name for "__", some of the tool's name
// and a hash suffix.
const maxServerName = 48

// clientName is the client name luft gives in the MCP handshake.
const clientName = "luft"

var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Upstream is the set of connected upstream servers and the tools they offer.
type Upstream struct {
	conns []*conn
	tools []tools.Tool

	closeOnce sync.Once
	closeErr  error
}

// Open connects to every server (concurrently), performs the MCP handshake and lists
// each server's tools. On any failure it closes what it opened and returns an error
// naming each server that failed. Open with no servers returns an empty Upstream.
func Open(ctx context.Context, servers []Server) (*Upstream, error) {
	if err := validate(servers); err != nil {
		return nil, err
	}
	type outcome struct {
		conn  *conn
		tools []tools.Tool
		err   error
	}
	outcomes := make([]outcome, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			c, ts, err := connect(ctx, s)
			outcomes[i] = outcome{c, ts, err}
		})
	}
	wg.Wait()

	u := &Upstream{}
	var errs []error
	for _, o := range outcomes {
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		u.conns = append(u.conns, o.conn)
		u.tools = append(u.tools, o.tools...)
	}
	if len(errs) == 0 {
		errs = append(errs, checkUnique(u.tools))
	}
	if err := errors.Join(errs...); err != nil {
		_ = u.Close()
		return nil, err
	}
	return u, nil
}

// Tools returns the tools of every server, server by server in the order Open was
// given them, each server's tools in the order it listed them.
func (u *Upstream) Tools() []tools.Tool {
	return slices.Clone(u.tools)
}

// Close closes every client and ends every subprocess. It is safe to call more than
// once; later calls return the first call's result.
func (u *Upstream) Close() error {
	u.closeOnce.Do(func() {
		// Concurrently: a subprocess that ignores its closed stdin takes seconds to
		// be signalled and killed, and one must not hold up the others.
		errs := make([]error, len(u.conns))
		var wg sync.WaitGroup
		for i, c := range u.conns {
			wg.Go(func() { errs[i] = c.close() })
		}
		wg.Wait()
		u.closeErr = errors.Join(errs...)
	})
	return u.closeErr
}

func validate(servers []Server) error {
	var errs []error
	seen := map[string]bool{}
	for i, s := range servers {
		where := fmt.Sprintf("mcp server %q", s.Name)
		switch {
		case s.Name == "":
			errs = append(errs, fmt.Errorf("mcp server #%d: no name (give it one: [mcp_servers.NAME] in luft.toml)", i+1))
			continue
		case !serverNameRE.MatchString(s.Name) || strings.Contains(s.Name, "__") || len(s.Name) > maxServerName:
			errs = append(errs, fmt.Errorf("%s: bad name: use letters, digits, '_' and '-', without \"__\", at most %d bytes "+
				"(the name prefixes its tools' names, as %s__TOOL)", where, maxServerName, s.Name))
			continue
		case seen[s.Name]:
			errs = append(errs, fmt.Errorf("%s: configured twice (give each [mcp_servers.NAME] its own name)", where))
			continue
		}
		seen[s.Name] = true
		switch {
		case s.Command == "" && s.URL == "":
			errs = append(errs, fmt.Errorf("%s: neither command nor url is set (set one in [mcp_servers.%s])", where, s.Name))
		case s.Command != "" && s.URL != "":
			errs = append(errs, fmt.Errorf("%s: both command and url are set (set only one in [mcp_servers.%s]: "+
				"command for a server luft starts, url for one already running)", where, s.Name))
		case s.URL != "":
			if config.CheckURL(s.URL) != nil {
				errs = append(errs, fmt.Errorf("%s: url %q is not an http:// or https:// URL (fix url in [mcp_servers.%s])",
					where, s.URL, s.Name))
			}
			if len(s.Args) > 0 || len(s.Env) > 0 || len(s.PassEnv) > 0 {
				errs = append(errs, fmt.Errorf("%s: args, env and pass_env apply to a command, not a url (remove them from [mcp_servers.%s])",
					where, s.Name))
			}
		}
		if err := tools.CheckEnvNames(fmt.Sprintf("%s: pass_env (fix it in [mcp_servers.%s])", where, s.Name), s.PassEnv); err != nil {
			errs = append(errs, err)
		}
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				errs = append(errs, fmt.Errorf("%s: env name %q is not a valid environment variable name (fix env in [mcp_servers.%s])",
					where, k, s.Name))
			}
		}
	}
	return errors.Join(errs...)
}

// checkUnique refuses two tools with one exposed name, which the naming rules make
// possible only in odd cases (a server "a_" with a tool "_b" and a server "a" with "__b").
func checkUnique(ts []tools.Tool) error {
	owner := map[string]*tool{}
	for _, t := range ts {
		t := t.(*tool)
		if other, ok := owner[t.spec.Name]; ok {
			return fmt.Errorf("mcp servers %q and %q both offer a tool named %s (tools %q and %q): rename one of the servers in luft.toml",
				other.conn.server.Name, t.conn.server.Name, t.spec.Name, other.remote, t.remote)
		}
		owner[t.spec.Name] = t
	}
	return nil
}

// conn is one connected server.
type conn struct {
	server Server
	client *client.Client
	// cmd is the stdio subprocess (nil over HTTP). The transport starts and waits for
	// it; Close returns only after it has been waited for.
	cmd    *exec.Cmd
	stderr *tail
	// end ends the context the transport serves server-to-client requests with.
	end context.CancelFunc
	// closed is set when luft closes the connection, so calls can say so rather than
	// report what the closed transport makes of them.
	closed atomic.Bool
}

// discard keeps mcp-go's transports from logging to luft's stderr: the process-wide
// streams belong to the CLI, and failures reach the caller as errors.
var discard = slog.New(slog.DiscardHandler)

func connect(ctx context.Context, s Server) (*conn, []tools.Tool, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("mcp server %q: not connected: %w", s.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	life, end := context.WithCancel(context.Background())
	c := &conn{server: s, end: end}

	if s.Command != "" {
		c.stderr = newTail(8 << 10)
		env := make([]string, 0, len(s.Env))
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			env = append(env, k+"="+s.Env[k])
		}
		tr := transport.NewStdioWithOptions(s.Command, env, s.Args,
			transport.WithCommandLogger(discard),
			// Our own command, not mcp-go's exec.CommandContext: the subprocess must
			// outlive Open's context, and its stderr is kept for error messages.
			transport.WithCommandFunc(func(_ context.Context, command string, env, args []string) (*exec.Cmd, error) {
				cmd := exec.Command(command, args...)
				// Not luft's environment, which holds API keys: the base variables and
				// the server's own env table (env is that table, as KEY=VALUE).
				cmd.Env = tools.ChildEnv(os.Environ(), s.PassEnv, nil)
				cmd.Env = append(cmd.Env, env...)
				cmd.Stderr = c.stderr
				// A grandchild holding stderr open must not stall Wait forever.
				cmd.WaitDelay = 2 * time.Second
				c.cmd = cmd
				return cmd, nil
			}))
		c.client = client.NewClient(tr)
		if err := c.client.Start(life); err != nil {
			end()
			return nil, nil, c.startError(err)
		}
	} else {
		cl, err := client.NewStreamableHttpClient(s.URL, transport.WithHTTPLogger(discard))
		if err != nil {
			end()
			return nil, nil, fmt.Errorf("mcp server %q: url %q: %v (fix url in [mcp_servers.%s])", s.Name, s.URL, err, s.Name)
		}
		c.client = cl
		if err := c.client.Start(life); err != nil {
			end()
			return nil, nil, fmt.Errorf("%s: start: %v (check [mcp_servers.%s] url)", c, err, s.Name)
		}
	}

	fail := func(err error) (*conn, []tools.Tool, error) {
		_ = c.close()
		return nil, nil, err
	}
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: clientName, Version: luftVersion()}
	if _, err := c.client.Initialize(ctx, req); err != nil {
		return fail(c.handshakeError(ctx, "initialize", err))
	}
	listed, err := c.client.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return fail(c.handshakeError(ctx, "list tools", err))
	}
	ts := make([]tools.Tool, 0, len(listed.Tools))
	for _, mt := range listed.Tools {
		t, err := newTool(c, mt)
		if err != nil {
			return fail(err)
		}
		ts = append(ts, t)
	}
	return c, ts, nil
}

// String names the server for messages: its name and how it is reached.
func (c *conn) String() string {
	if c.server.Command != "" {
		return fmt.Sprintf("mcp server %q (command %s)", c.server.Name, c.server.Command)
	}
	return fmt.Sprintf("mcp server %q (%s)", c.server.Name, c.server.URL)
}

func (c *conn) startError(err error) error {
	s := c.server
	if errors.Is(err, exec.ErrNotFound) {
		return fmt.Errorf("mcp server %q: command %q not found (install it, or fix command in [mcp_servers.%s]: "+
			"a program on PATH or an absolute path)", s.Name, s.Command, s.Name)
	}
	return fmt.Errorf("%s: start: %v (check command and args in [mcp_servers.%s])", c, err, s.Name)
}

// handshakeError explains a failed initialize or tools/list.
func (c *conn) handshakeError(ctx context.Context, step string, err error) error {
	s := c.server
	check := fmt.Sprintf("check url in [mcp_servers.%s] and that the server is running", s.Name)
	if s.Command != "" {
		check = fmt.Sprintf("check command and args in [mcp_servers.%s]: is it an MCP server that speaks stdio?", s.Name)
	}
	var stderr string
	if t := c.stderrTail(); t != "" {
		stderr = "; its stderr ends: " + t
	}
	var urlErr *url.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s: %s failed: no answer in time (%w; %s)%s", c, step, ctx.Err(), check, stderr)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %s: %w", c, step, ctx.Err())
	case errors.Is(err, transport.ErrTransportClosed):
		return fmt.Errorf("%s: %s failed: the command exited or closed its stdout (%s)%s", c, step, check, stderr)
	case errors.As(err, &urlErr):
		return fmt.Errorf("%s: %s failed: cannot reach the server: %v (%s)", c, step, urlErr.Err, check)
	}
	return fmt.Errorf("%s: %s failed: %v (%s)%s", c, step, unwrapTransport(err), check, stderr)
}

// unwrapTransport drops mcp-go's "transport error: " wrapper, which says nothing to a user.
func unwrapTransport(err error) error {
	var te *transport.Error
	if errors.As(err, &te) && te.Err != nil {
		return te.Err
	}
	return err
}

func (c *conn) stderrTail() string {
	if c.stderr == nil {
		return ""
	}
	return c.stderr.last(400)
}

func (c *conn) close() error {
	c.closed.Store(true)
	defer c.end()
	if err := c.client.Close(); err != nil {
		// A subprocess that had to be signalled, or exited non-zero once its stdin
		// closed, is still gone: that is all Close promises.
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return nil
		}
		return fmt.Errorf("%s: close: %w", c, err)
	}
	return nil
}

// luftVersion is the version luft gives in the MCP handshake: the release's, else the
// module's, else "dev".
func luftVersion() string { return buildinfo.Get().Version }

// tail keeps the last bytes written to it. It is safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// last returns at most n bytes of the end of what was written, on one line.
func (t *tail) last(n int) string {
	t.mu.Lock()
	s := strings.TrimSpace(string(t.buf))
	t.mu.Unlock()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.Join(strings.Fields(s), " ")
}
