package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Name is the server's name in the MCP handshake.
const Name = "luft"

// HeaderWorkdir carries the client's working directory from the stdio relay to the
// daemon: relative workflow paths and workflow_list_files resolve there, not in the
// daemon's own directory. Only an absolute path is taken.
const HeaderWorkdir = "Luft-Workdir"

// Host starts runs for the door: all the door needs of the process it is served in, so it
// depends on no host package. The daemon's Start is one (the run is hosted by the daemon
// and outlives the MCP client); ServiceHost starts them on a local Service.
type Host interface {
	Start(ctx context.Context, req door.StartRequest) (*runtime.Run, error)
}

// ServiceHost starts runs on a Service in this process (luft mcp serve --standalone).
type ServiceHost struct {
	Service *runtime.Service
	// NewSpec turns a request into what the Service runs (the CLI applies the config's
	// limits and defaults); nil uses the request as it is.
	NewSpec func(door.StartRequest) (runtime.Spec, error)
	// Backends, when set, checks a request's backend before the run starts.
	Backends runtime.BackendSource
}

// Start runs req on the Service; the run lives on after ctx ends.
func (h ServiceHost) Start(ctx context.Context, req door.StartRequest) (*runtime.Run, error) {
	if req.Class != "" && req.Class != string(agent.ClassInteractive) && req.Class != string(agent.ClassBatch) {
		return nil, fmt.Errorf("invalid class %q: use interactive or batch", req.Class)
	}
	if h.Backends != nil && req.Backend != "" {
		if _, err := h.Backends.Get(req.Backend); err != nil {
			return nil, fmt.Errorf("backend: %w", err)
		}
	}
	spec := req.Spec()
	if h.NewSpec != nil {
		var err error
		if spec, err = h.NewSpec(req); err != nil {
			return nil, err
		}
	}
	return h.Service.Start(context.WithoutCancel(ctx), spec)
}

// Options configure a Server.
type Options struct {
	Service *runtime.Service // required: status, events, cancel and list read it
	Host    Host             // starts runs; nil = ServiceHost{Service: Service}
	Version string
	// Dir is where relative workflow paths and workflow_list_files look when the
	// request names no workdir (HeaderWorkdir); "" = the process's working directory.
	Dir string
	// Resumes says the host resumes interrupted runs by itself (the daemon does on
	// start), so workflow_await keeps waiting on one instead of returning at once.
	Resumes bool
	// MaxAwait caps workflow_await's timeout_s; default 10 minutes.
	MaxAwait time.Duration
	// ProgressEvery is the longest gap between progress notifications of an await that
	// asked for them, so a client's request timeout does not fire; default 10 s.
	ProgressEvery time.Duration
	// Validate dry-runs a workflow for workflow_validate; default DryRun.
	Validate func(ctx context.Context, req door.StartRequest) (ValidateResult, error)
	Log      *log.Logger // nil = discarded
	// Catalog lists what sub-agents may call (the tools tool, and spawn's check of tool
	// names); nil = unknown (spawn passes names on, the agent call reports unknown ones).
	Catalog func(ctx context.Context) (ToolCatalog, error)

	// mcpOptions are further options of the mcp-go server (tests validate outputs).
	mcpOptions []server.ServerOption
}

// Server is luft's MCP server. Create it with New; serve it with Handler (streamable
// HTTP) or ServeStdio.
type Server struct {
	opts Options
	svc  *runtime.Service
	host Host
	mcp  *server.MCPServer
	log  *log.Logger

	// awaitHooks see every event of a run that workflow_await waits on (the sub-agent
	// tools use one to ask the client for approvals); see OnAwaitEvent.
	mu         sync.Mutex
	awaitHooks []AwaitHook
}

// AwaitHook is told of each event of a run while a tool call awaits it. It runs on the
// awaiting request's goroutine, so it may send requests to that client (Elicit) and its
// ctx ends with the request; it must return promptly when ctx ends.
type AwaitHook func(ctx context.Context, runID string, ev event.Event)

// New builds the server with every tool and resource.
func New(opts Options) (*Server, error) {
	if opts.Service == nil {
		return nil, errors.New("mcp: Options.Service is required")
	}
	if opts.Host == nil {
		opts.Host = ServiceHost{Service: opts.Service}
	}
	if opts.MaxAwait <= 0 {
		opts.MaxAwait = 10 * time.Minute
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 10 * time.Second
	}
	if opts.Validate == nil {
		opts.Validate = DryRun
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{opts: opts, svc: opts.Service, host: opts.Host, log: opts.Log}
	if s.log == nil {
		s.log = log.New(io.Discard, "", 0)
	}
	s.mcp = server.NewMCPServer(Name, opts.Version, append([]server.ServerOption{
		server.WithToolCapabilities(false),
		server.WithResourceCapabilities(false, false),
		server.WithInstructions(instructions),
		server.WithRecovery(),
		server.WithResourceRecovery(),
	}, opts.mcpOptions...)...)
	s.addWorkflowTools()
	s.addResources()
	s.addSubagentTools()
	return s, nil
}

const instructions = `luft runs multi-agent workflows written as Lua scripts. Read the luft://skill/SKILL.md
resource before writing one; luft://examples lists working examples. Check a script with
workflow_validate, start it with workflow_execute, then wait with workflow_await (it returns when
the run ends or its timeout passes; call it again while the run is running) instead of polling
workflow_status.`

// MCPServer is the underlying mcp-go server (to add tools, or serve it in-process).
func (s *Server) MCPServer() *server.MCPServer { return s.mcp }

// AddTool registers a tool. The handler's failures that the caller can fix should be
// tool results made with ToolError; a returned error becomes a protocol error.
func (s *Server) AddTool(t mcp.Tool, h server.ToolHandlerFunc) {
	s.mcp.AddTool(t, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := h(ctx, req)
		// Nothing of the call may follow its result: progress it sent goes out first.
		progressOrderOf(ctx).drain(ctx)
		return res, err
	})
}

// OnAwaitEvent adds a hook told of each event of a run a tool call awaits.
func (s *Server) OnAwaitEvent(h AwaitHook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaitHooks = append(s.awaitHooks, h)
}

func (s *Server) hooks() []AwaitHook {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]AwaitHook(nil), s.awaitHooks...)
}

// Handler serves the MCP streamable HTTP transport (mount it at /mcp). Sessions are
// stateful: a session id the server does not know (after a restart) gets 404, so a
// client initializes again. The daemon in front checks Host, Origin and the token.
func (s *Server) Handler() http.Handler {
	h := server.NewStreamableHTTPServer(s.mcp,
		server.WithStateful(true),
		// Sessions are callers and carry the client's capabilities (elicitation): keep
		// clients on a revision with sessions.
		server.WithStreamableHTTPProtocolVersions(mcp.LegacyProtocolVersions()...),
		server.WithSessionIdleTTL(time.Hour),
		// The daemon checks Host and Origin for every listener, including the unix
		// socket where mcp-go's own check cannot tell a loopback connection.
		server.WithDisableLocalhostProtection(true),
		server.WithStreamableHTTPLogger(slog.New(slog.NewTextHandler(s.log.Writer(), nil))),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			if d := r.Header.Get(HeaderWorkdir); d != "" && filepath.IsAbs(d) {
				ctx = context.WithValue(ctx, workdirKey{}, filepath.Clean(d))
			}
			return withSessionKey(ctx, r.Header.Get(HeaderSession))
		}),
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		// A message over MaxBody is answered with a JSON-RPC error for its id, read to
		// its end without being kept, so the client's request fails at once and its
		// connection and session stay usable.
		if r.ContentLength > MaxBody {
			answerTooLarge(w, r.Body)
			return
		}
		var body bytes.Buffer
		if _, err := body.ReadFrom(io.LimitReader(r.Body, MaxBody+1)); err != nil {
			http.Error(w, fmt.Sprintf("reading the request: %v", err), http.StatusBadRequest)
			return
		}
		if body.Len() > MaxBody {
			answerTooLarge(w, io.MultiReader(&body, r.Body))
			return
		}
		r.Body = io.NopCloser(&body)
		h.ServeHTTP(w, r)
	})
}

// MaxBody bounds one MCP message, over HTTP (a request to /mcp) and over stdio (a line):
// room for the largest script, JSON-escaped.
const MaxBody = 4 * MaxScript

// Mount is the Handler as a daemon door at /mcp (it needs the daemon's token over HTTP).
func (s *Server) Mount() door.Mount { return door.Mount{Pattern: "/mcp", Handler: s.Handler()} }

// ServeStdio serves one client on in/out (newline-delimited JSON-RPC) until in ends or
// ctx is done.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer, errLog io.Writer) error {
	st := server.NewStdioServer(s.mcp)
	// Awaits long-poll: enough workers that they never starve the quick tools.
	server.WithWorkerPoolSize(100)(st)
	server.WithQueueSize(1000)(st)
	if errLog == nil {
		errLog = io.Discard
	}
	st.SetErrorLogger(log.New(errLog, "luft mcp: ", log.LstdFlags))
	// One process, one client: its runs are its own (owner) under a key of this process
	// (mcp-go names every stdio session "stdio").
	ctx = withSessionKey(ctx, newSessionKey())
	// Lines over MaxBody are answered here with a JSON-RPC error and never reach mcp-go,
	// which would read a line of any length into memory.
	order := newProgressOrder()
	ctx = withProgressOrder(ctx, order)
	lw := &lineWriter{w: out, order: order}
	lines := boundLines(in, MaxBody, lw)
	defer lines.Close()
	err := st.Listen(ctx, lines, lw)
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type workdirKey struct{}

// Workdir is where the request's relative paths resolve: the client's directory sent by
// the relay, else Options.Dir, else the process's working directory.
func (s *Server) Workdir(ctx context.Context) string {
	if d, ok := ctx.Value(workdirKey{}).(string); ok {
		return d
	}
	if s.opts.Dir != "" {
		return s.opts.Dir
	}
	d, err := os.Getwd()
	if err != nil {
		return "."
	}
	return d
}

// CanElicit reports whether the request's client declared the elicitation capability.
func CanElicit(ctx context.Context) bool {
	cs, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return ok && cs.GetClientCapabilities().Elicitation != nil
}

// Elicit asks the request's client for input with a form (a JSON schema of flat
// properties); it fails with server.ErrElicitationNotSupported when the client cannot
// be asked. Call it only from a tool handler (or an AwaitHook) of that request.
func (s *Server) Elicit(ctx context.Context, message string, schema map[string]any) (*mcp.ElicitationResult, error) {
	if !CanElicit(ctx) {
		return nil, server.ErrElicitationNotSupported
	}
	return s.mcp.RequestElicitation(ctx, mcp.ElicitationRequest{
		Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)},
		Params:  mcp.ElicitationParams{Message: message, RequestedSchema: schema},
	})
}

// Progress sends a progress notification for req when its caller asked for them (a
// progressToken); total <= 0 leaves the total unknown.
func (s *Server) Progress(ctx context.Context, req mcp.CallToolRequest, progress, total float64, message string) {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return
	}
	p := map[string]any{"progressToken": req.Params.Meta.ProgressToken, "progress": progress}
	if total > 0 {
		p["total"] = total
	}
	if message != "" {
		p["message"] = message
	}
	o := progressOrderOf(ctx)
	if o != nil {
		o.sent.Add(1) // before the send: the writer may count it at once
	}
	if err := s.mcp.SendNotificationToClient(ctx, "notifications/progress", p); err != nil {
		if o != nil {
			o.sent.Add(-1)
		}
		s.log.Printf("progress for %s: %v", req.Params.Name, err)
	}
}

// ToolError is a tool result with isError set: the caller (a model) reads what went
// wrong and what to do.
func ToolError(format string, args ...any) *mcp.CallToolResult {
	return mcp.NewToolResultError(fmt.Sprintf(format, args...))
}

// Result is a tool result with structured content and a readable text.
func Result(structured any, text string) *mcp.CallToolResult {
	return mcp.NewToolResultStructured(structured, text)
}
