package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/host"
	luftmcp "github.com/luft-run/luft/mcp"
	"github.com/luft-run/luft/runtime"
	"github.com/spf13/cobra"
)

// goneWait bounds how long luft mcp serve waits for a daemon that no longer answers to
// release its lock before it starts another.
const goneWait = 5 * time.Second

// mcpSuspendWait bounds how long `luft mcp serve --standalone` waits for its runs to be
// suspended when its client goes away.
const mcpSuspendWait = 30 * time.Second

func newMCPCmd(e *env, g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp serve",
		Short: "Serve luft to MCP clients (Claude Code, Codex, ...): workflow and sub-agent tools",
		Long: `luft mcp serve speaks MCP on stdin and stdout. Runs live in the state dir's daemon, which
it starts when none runs, so they outlive the client; it relays the client to the daemon's
/mcp endpoint and survives a restart of the daemon. --standalone hosts the runs in this
process instead (they are suspended when the client goes away and resume with
luft run --resume). The daemon also serves MCP over streamable HTTP at /mcp.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("luft mcp needs a subcommand: luft mcp serve")
		},
	}
	var standalone bool
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Speak MCP on stdio (runs live in the daemon, started on demand; --standalone: in this process)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if standalone {
				return serveMCPStandalone(ctx, e, g)
			}
			return relayMCP(ctx, e, g)
		},
	}
	serve.Flags().BoolVar(&standalone, "standalone", false, "host runs in this process instead of the daemon")
	cmd.AddCommand(serve)
	return cmd
}

// mcpMounts is the MCP door of a daemon: streamable HTTP at /mcp, runs hosted by it.
func mcpMounts(d *daemon.Daemon, svc *runtime.Service, version string, logw io.Writer, cfg config.Config) []daemon.Mount {
	srv, err := luftmcp.New(luftmcp.Options{Service: svc, Host: d, Version: version, Resumes: true,
		Log: log.New(logw, "mcp: ", log.LstdFlags), Catalog: toolCatalog(cfg)})
	if err != nil {
		fmt.Fprintf(logw, "mcp: not served: %v\n", err)
		return nil
	}
	return []daemon.Mount{srv.Mount()}
}

// toolCatalog is what sub-agents may call under cfg, for the MCP tools tool.
func toolCatalog(cfg config.Config) func(context.Context) (luftmcp.ToolCatalog, error) {
	return func(context.Context) (luftmcp.ToolCatalog, error) { return luftmcp.CatalogFromConfig(cfg) }
}

// relayMCP relays stdio to the daemon's /mcp, starting the daemon when none runs.
func relayMCP(ctx context.Context, e *env, g *globalFlags) error {
	dir, err := filepath.Abs(stateDir(e, g))
	if err != nil {
		return err
	}
	wd, _ := os.Getwd()
	r := &luftmcp.Relay{
		Workdir: wd,
		Log:     log.New(e.stderr, "luft mcp: ", log.LstdFlags),
		Connect: func(ctx context.Context) (*http.Client, string, error) {
			c, err := ensureDaemon(ctx, e, g, dir)
			if err != nil {
				return nil, "", err
			}
			return c.HTTP(), "http://luft/mcp", nil
		},
	}
	sctx, stop := signalContext(ctx, e)
	defer stop()
	if err := r.Run(sctx, stdin(e), e.stdout); err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("mcp serve: %w", err)}
	}
	return nil
}

// ensureDaemon connects to the state dir's daemon, starting one when none answers, under
// a lock so that two clients starting at once start one.
func ensureDaemon(ctx context.Context, e *env, g *globalFlags, dir string) (*daemon.Client, error) {
	c, err := daemon.Dial(ctx, dir)
	if err == nil || !errors.Is(err, daemon.ErrNotRunning) {
		return c, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("mcp serve: create state dir %s: %w", dir, err)
	}
	release, err := daemon.LockStart(dir)
	if err != nil {
		return nil, fmt.Errorf("mcp serve: %w", err)
	}
	defer release()
	// Another client may have started it while this one waited for the lock.
	if c, err := daemon.Dial(ctx, dir); err == nil {
		return c, nil
	}
	// A daemon that was killed can hold its lock a moment after its socket stopped
	// answering (its threads are still exiting), and a new one would refuse to start: give
	// it a few seconds to be gone. One that lives and holds the lock is reported by the
	// spawn, as before.
	gctx, cancel := context.WithTimeout(ctx, goneWait)
	_ = daemon.WaitGone(gctx, dir)
	cancel()
	info, err := spawnDaemon(e, g, &daemonFlags{grace: 10 * time.Second}, dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(e.stderr, "luft mcp: started the luft daemon: pid %d, socket %s (log %s)\n", info.PID, info.Socket, filepath.Join(dir, daemon.LogFile))
	return daemon.Dial(ctx, dir)
}

// serveMCPStandalone serves MCP on stdio with runs hosted in this process. On PostgreSQL
// the process is the node "<state dir's node id>.mcp" (hostNode): a daemon of the database
// resumes its runs once it dies.
func serveMCPStandalone(ctx context.Context, e *env, g *globalFlags) error {
	logger := log.New(e.stderr, "luft mcp: ", log.LstdFlags)
	nd, err := hostNode(ctx, e, g, mcpNodeSuffix, logger.Printf)
	if err != nil {
		return err
	}
	o := host.ServeOptions{Caller: "mcp", AskApprovals: true}
	if nd != nil {
		cfg, err := loadConfig(e, g)
		if err != nil {
			nd.Close()
			return err
		}
		nd.serveOptions(&o, cfg)
	}
	h, err := serveHost(ctx, e, g, o)
	if err != nil {
		if nd != nil {
			nd.Close()
		}
		return err
	}
	defer h.Close()
	// Renewed until the runs the client left are suspended (their ends stored), or until
	// the wait for them gives up and leaves them to a daemon.
	defer nd.hold(h.Service)()
	cfg, svc := h.cfg, h.Service
	srv, err := luftmcp.New(luftmcp.Options{Service: svc, Version: buildVersion(),
		Host:    luftmcp.ServiceHost{Service: svc, NewSpec: hostedSpec(h.Registry, cfg)},
		Log:     logger,
		Catalog: toolCatalog(cfg)})
	if err != nil {
		return err
	}
	sctx, stop := signalContext(ctx, e)
	defer stop()
	serveErr := srv.ServeStdio(sctx, stdin(e), e.stdout, e.stderr)
	// The client is gone: suspend the runs it left so they resume later, as a daemon
	// does on shutdown.
	live := svc.Live()
	for _, r := range live {
		r.Suspend()
	}
	timeout := time.NewTimer(mcpSuspendWait)
	defer timeout.Stop()
	for _, r := range live {
		select {
		case <-r.Done():
		case <-timeout.C:
			return fmt.Errorf("mcp serve: runs still going %s after the client left", mcpSuspendWait)
		}
	}
	if n := len(live); n > 0 {
		ids := make([]string, 0, n)
		for _, r := range live {
			ids = append(ids, short(r.ID))
		}
		fmt.Fprintf(e.stderr, "luft mcp: suspended %d runs the client left (luft run --resume RUN resumes one): %s\n", n, strings.Join(ids, " "))
	}
	if serveErr != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("mcp serve: %w", serveErr)}
	}
	return nil
}

// signalContext ends with ctx or at SIGINT/SIGTERM.
func signalContext(ctx context.Context, e *env) (context.Context, func()) {
	sigs := make(chan os.Signal, 1)
	stopSigs := e.notify(sigs)
	sctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-sctx.Done():
		}
	}()
	return sctx, func() { cancel(); stopSigs() }
}

// stdin is where MCP messages come from.
func stdin(e *env) io.Reader {
	if e.stdin == nil {
		return strings.NewReader("")
	}
	return e.stdin
}
