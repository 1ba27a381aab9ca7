package luft

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/internal/version"
	"github.com/luft-run/luft/mcp"
	"github.com/luft-run/luft/proxy"
	"github.com/luft-run/luft/runtime"
)

// MCPHandler returns luft's MCP server over this Engine as a streamable-HTTP handler
// (the one `luft daemon` serves at /mcp): the workflow tools, the sub-agent tools
// (spawn, await, run, status, cancel, approve, tools) and the resources. Runs it starts
// are the Engine's, started with its defaults (backend, concurrency, limits); each MCP
// session is their fair-share caller. A destructive tool call parks for the client's
// answer only with Options.Approvals (or Approve); without, it fails as in Run.
//
// Mount it where the program likes (http.Handle("/mcp", h)). The handler checks no
// token and no Origin: bind it to loopback, or put the program's own authentication in
// front of it, since a client can start runs and so spend the backends' budgets, and
// can name any file this process may read as a workflow (workflow_execute's path; a
// file that is not Lua fails with a syntax error that quotes a token of it).
func (e *Engine) MCPHandler() (http.Handler, error) {
	if err := e.use(context.Background(), "MCPHandler"); err != nil {
		return nil, err
	}
	srv, err := mcp.New(mcp.Options{
		Service: e.svc,
		Host:    mcp.ServiceHost{Service: e.svc, NewSpec: e.mcpSpec},
		Version: version.Get().Version,
		Catalog: func(context.Context) (mcp.ToolCatalog, error) { return mcp.CatalogFromConfig(e.cfg) },
	})
	if err != nil {
		return nil, fmt.Errorf("luft: MCPHandler: %w", err)
	}
	return srv.Handler(), nil
}

// mcpSpec is an MCP start request as the Engine's Start would run it.
func (e *Engine) mcpSpec(req daemon.StartRequest) (runtime.Spec, error) {
	spec, err := e.spec(Script{Source: req.Script, Path: req.Path, Args: req.Args, Backend: req.Backend,
		Model: req.Model, Class: req.Class, Timeout: req.Timeout, MaxAgentCalls: req.MaxAgentCalls})
	if err != nil {
		return runtime.Spec{}, err
	}
	if req.Concurrency > 0 {
		spec.Concurrency = req.Concurrency
	}
	spec.Caller = req.Caller
	return spec, nil
}

// ProxyHandler returns luft's proxy over this Engine (the one `luft proxy serve` runs
// and the daemon serves at /v1/): POST /v1/chat/completions, /v1/responses and
// /v1/messages (with /v1/messages/count_tokens), GET /v1/models and DELETE
// /v1/runs/{id}, for agents that keep their own tool loop. Every
// turn passes the Engine's one scheduler beside its runs' own turns (continuations
// first, fair shares by x-luft-caller, rate limits learned and kept), and each proxied
// run is recorded in the state dir (List and Status show it as proxy:<caller>). The
// upstreams are the config's [backends.NAME] of type openai (and OPENAI_BASE_URL's); a
// request's model picks one.
//
// Mount it at the root of a server or under a prefix with http.StripPrefix, so that
// its paths start with /v1/. The client's own Authorization goes upstream unless the
// backend names api_key_env; the handler checks no token of its own: bind it to
// loopback or authenticate in front of it. Close ends the runs it tracks.
func (e *Engine) ProxyHandler() (http.Handler, error) {
	if err := e.use(context.Background(), "ProxyHandler"); err != nil {
		return nil, err
	}
	ups, def := proxy.FromConfig(e.cfg, e.opts.Getenv)
	if len(ups) == 0 {
		return nil, fmt.Errorf("luft: ProxyHandler: no backend for the proxy: configure [backends.NAME] with type = \"openai\" (chat completions, Responses) or \"anthropic\" (Messages), base_url and model (or set OPENAI_BASE_URL)")
	}
	p, err := proxy.New(proxy.Options{Upstreams: ups, Default: def, Scheduler: e.sched, Service: e.svc,
		Clock: e.opts.Clock, IdleTTL: e.cfg.Proxy.IdleTimeout, MaxBody: e.cfg.Proxy.MaxBody})
	if err != nil {
		return nil, fmt.Errorf("luft: ProxyHandler: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		p.Close()
		return nil, ErrClosed
	}
	e.proxies = append(e.proxies, io.Closer(p))
	return p, nil
}
