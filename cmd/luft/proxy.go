package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/spf13/cobra"
)

type proxyFlags struct {
	listen           string
	idle             time.Duration
	maxBody          int64
	idleSet, bodySet bool // given on the command line: they beat [proxy] in the config
}

func newProxyCmd(e *env, g *globalFlags) *cobra.Command {
	f := &proxyFlags{}
	cmd := &cobra.Command{
		Use:   "proxy serve",
		Short: "Serve an OpenAI-compatible endpoint whose turns luft schedules (for agents with their own loop)",
		Long: `luft proxy serve answers POST /v1/chat/completions (streamed or not), GET /v1/models and
DELETE /v1/runs/{id} for agents that keep their own tool loop: point their base_url at
http://ADDR/v1. Every turn is admitted by luft's scheduler on the lane of the backend that
serves the request's model ([backends.NAME] with type = "openai"), continuations first and
fair across callers, within the rate limits the backend's headers teach. Headers:
x-luft-run-id names a run (else runs are recognised by the tool_call ids a turn echoes),
x-luft-class (interactive|batch), x-luft-caller. Each run shows in luft list as proxy:<caller>.
The daemon serves the same endpoint at /v1/.

It listens on loopback by default. Any other address needs LUFT_TOKEN, which clients then
send as the x-luft-token header (their Authorization header goes to the backend).`,
	}
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the proxy until SIGTERM or Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.idleSet, f.bodySet = cmd.Flags().Changed("idle-timeout"), cmd.Flags().Changed("max-body")
			return serveProxy(cmd.Context(), e, g, f)
		},
	}
	serve.Flags().StringVar(&f.listen, "listen", "127.0.0.1:7879", "address to listen on; beyond loopback LUFT_TOKEN is required")
	serve.Flags().DurationVar(&f.idle, "idle-timeout", proxy.DefaultIdleTTL, "a run with no turn for this long ends (default [proxy] idle_timeout, else 15m)")
	serve.Flags().Int64Var(&f.maxBody, "max-body", proxy.DefaultMaxBody, "largest request body accepted, in bytes (default [proxy] max_body, else 32 MiB)")
	cmd.AddCommand(serve)
	return cmd
}

func serveProxy(ctx context.Context, e *env, g *globalFlags, f *proxyFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	host, _, err := net.SplitHostPort(f.listen)
	if err != nil {
		return usageErr("--listen %q: want HOST:PORT (e.g. 127.0.0.1:7879)", f.listen)
	}
	token := e.getenv("LUFT_TOKEN")
	if !isLoopback(host) && token == "" {
		return usageErr("--listen %s is not a loopback address: set LUFT_TOKEN (clients then send it as x-luft-token)", f.listen)
	}
	cfg, err := loadConfig(e, g)
	if err != nil {
		return err
	}
	if !f.idleSet && cfg.Proxy.IdleTimeout > 0 {
		f.idle = cfg.Proxy.IdleTimeout
	}
	if !f.bodySet && cfg.Proxy.MaxBody > 0 {
		f.maxBody = cfg.Proxy.MaxBody
	}
	if f.idle <= 0 {
		return usageErr("invalid --idle-timeout: must be positive (got %s)", f.idle)
	}
	if err := config.CheckRange(f.maxBody, 1, config.MaxProxyBody); err != nil {
		return usageErr("invalid --max-body: %v", err)
	}
	ups, def := proxy.FromConfig(cfg, e.getenv)
	if len(ups) == 0 {
		return usageErr("no backend for the proxy: configure [backends.NAME] with type = \"openai\" (chat completions, Responses) or \"anthropic\" (Messages), base_url and model (or set OPENAI_BASE_URL)")
	}
	st, err := openStore(ctx, e, g, false)
	if err != nil {
		return err
	}
	defer st.Close()
	// On PostgreSQL the proxy is the node "<state dir's node id>.proxy" (hostNode), holding
	// its runs under a lease: once it dies, a daemon of the database ends them (their loop
	// lived in the client; nothing can resume them).
	nd, err := hostNode(ctx, e, g, proxyNodeSuffix, log.New(e.stderr, "luft proxy: ", log.LstdFlags).Printf)
	if err != nil {
		return err
	}
	sched := scheduler.NewExecutor(schedulerConfig(cfg, 8, false), nil)
	// The service shows the proxy's runs as live in list and status; it runs no script.
	svc, err := newService(e, st, stateDir(e, g), adapters.NewRegistry("mock"), scheduler.Config{},
		func(o *runtime.Options) {
			o.Scheduler, o.Caller = sched, "proxy"
			if nd != nil {
				nd.options(o, cfg)
			}
		})
	if err != nil {
		if nd != nil {
			nd.Close()
		}
		return err
	}
	// Renewed until the proxy has closed (p.Close, deferred after this, stores its runs' ends).
	defer nd.hold(svc)()
	opts := proxy.Options{Upstreams: ups, Default: def, Scheduler: sched, Service: svc,
		IdleTTL: f.idle, MaxBody: f.maxBody, Log: e.stderr}
	if !isLoopback(host) {
		opts.Token = token
	}
	p, err := proxy.New(opts)
	if err != nil {
		return usageErr("%v", err)
	}
	defer p.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("proxy: listen on %s: %w", f.listen, err)}
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 256 << 10}
	fmt.Fprintf(e.stdout, "luft proxy listening on http://%s/v1 (%d backends)\n", ln.Addr(), len(ups))
	sigs := make(chan os.Signal, 1)
	stop := e.notify(sigs)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-sigs:
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// isLoopback reports whether host (a name or an IP) is this machine's loopback.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
