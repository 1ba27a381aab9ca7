package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// daemonStandIn is what a daemon is to the relay: an HTTP server of a Server's Handler
// over a Service that outlives it, so the test can "restart the daemon" (a new Server,
// hence no sessions, on a new listener) while runs go on.
type daemonStandIn struct {
	t    *testing.T
	svc  *runtime.Service
	held *held
	mu   sync.Mutex
	hs   *httptest.Server
	n    int // servers started
	tool func(*Server)
}

func newStandIn(t *testing.T, tool func(*Server)) *daemonStandIn {
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHeld()
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir,
		Backends: adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{}), h)})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonStandIn{t: t, svc: svc, held: h, tool: tool}
	t.Cleanup(func() {
		d.mu.Lock()
		if d.hs != nil {
			d.hs.Close()
		}
		d.mu.Unlock()
		for _, r := range svc.Live() {
			r.Cancel()
			<-r.Done()
		}
	})
	d.restart()
	return d
}

// restart drops every connection of the current server and serves a new one.
func (d *daemonStandIn) restart() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hs != nil {
		d.hs.CloseClientConnections()
		d.hs.Close()
	}
	srv, err := New(Options{Service: d.svc, Resumes: true, ProgressEvery: 5 * time.Millisecond,
		mcpOptions: []server.ServerOption{server.WithOutputSchemaValidation()}})
	if err != nil {
		d.t.Fatal(err)
	}
	if d.tool != nil {
		d.tool(srv)
	}
	d.hs = httptest.NewServer(srv.Handler())
	d.n++
}

func (d *daemonStandIn) connect(context.Context) (*http.Client, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hs.Client(), d.hs.URL + "/mcp", nil
}

// relayClient runs a Relay to d and connects an mcp-go client to its stdio.
func relayClient(t *testing.T, d *daemonStandIn, opts ...client.ClientOption) *client.Client {
	return relayClientInit(t, d, initRequest(), opts...)
}

// relayClientInit is relayClient with the client's own initialize request.
func relayClientInit(t *testing.T, d *daemonStandIn, init mcp.InitializeRequest, opts ...client.ClientOption) *client.Client {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &Relay{Connect: d.connect, Workdir: t.TempDir()}
	done := make(chan error, 1)
	go func() {
		done <- r.Run(context.Background(), inR, outW)
		outW.Close()
	}()
	c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(strings.NewReader(""))), opts...)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		inW.Close()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
		c.Close()
	})
	return c
}

// Through the relay a run is started, the daemon "restarts" (its sessions are gone), and
// the run is awaited to its end on a new session the relay made by replaying the
// client's handshake; progress notifications pass through.
func TestRelaySurvivesRestart(t *testing.T) {
	d := newStandIn(t, nil)
	c := relayClient(t, d)
	progress := make(chan struct{}, 100)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == "notifications/progress" {
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	})
	var ex ExecuteResult
	ok(t, c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-d.held.started
	d.restart()
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "workflow_await"
		req.Params.Arguments = map[string]any{"run_id": ex.RunID, "timeout_s": 3600}
		req.Params.Meta = &mcp.Meta{ProgressToken: 7}
		res, err := c.CallTool(context.Background(), req)
		if err != nil {
			t.Errorf("await: %v", err)
		}
		done <- res
	}()
	<-progress // the await is in the new session and reports progress
	close(d.held.release)
	res := <-done
	if res == nil || res.IsError || !strings.Contains(text(res), "completed") {
		t.Fatalf("await after restart: %+v", res)
	}
	if d.n != 2 {
		t.Errorf("%d servers", d.n)
	}
}

// A request in flight when the connection drops is answered with an error that says the
// run goes on; the next request works on a new session.
func TestRelayAnswersRequestsCutOff(t *testing.T) {
	d := newStandIn(t, nil)
	c := relayClient(t, d)
	var ex ExecuteResult
	ok(t, c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-d.held.started
	errc := make(chan error, 1)
	progress := make(chan struct{}, 100)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		select {
		case progress <- struct{}{}:
		default:
		}
	})
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "workflow_await"
		req.Params.Arguments = map[string]any{"run_id": ex.RunID, "timeout_s": 3600}
		req.Params.Meta = &mcp.Meta{ProgressToken: "p"}
		_, err := c.CallTool(context.Background(), req)
		errc <- err
	}()
	<-progress // the await is in flight
	d.restart()
	err := <-errc
	if err == nil || !strings.Contains(err.Error(), "runs go on in the daemon") {
		t.Fatalf("cut-off await: %v", err)
	}
	var v RunView
	ok(t, c, "workflow_status", map[string]any{"run_id": ex.RunID}, &v)
	if v.Status != "running" {
		t.Errorf("status after the drop: %+v", v)
	}
	close(d.held.release)
	ok(t, c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 3600}, &v)
	if v.Status != "completed" {
		t.Errorf("await: %+v", v)
	}
}

type answerElicit struct{ asked chan string }

func (a answerElicit) Elicit(_ context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	a.asked <- req.Params.Message
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept,
		Content: map[string]any{"allow": true}}}, nil
}

// A tool that asks the client (elicitation) works through the relay: the server's
// request reaches the client and its answer goes back to the daemon.
func TestRelayElicitation(t *testing.T) {
	d := newStandIn(t, func(s *Server) {
		s.AddTool(mcp.NewTool("ask", mcp.WithDescription("asks")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := s.Elicit(ctx, "allow write_file?", map[string]any{"type": "object",
				"properties": map[string]any{"allow": map[string]any{"type": "boolean"}}, "required": []string{"allow"}})
			if err != nil {
				return ToolError("ask: %v", err), nil
			}
			b, _ := json.Marshal(res.Content)
			return mcp.NewToolResultText(string(res.Action) + " " + string(b)), nil
		})
	})
	asked := make(chan string, 1)
	c := relayClient(t, d, client.WithElicitationHandler(answerElicit{asked}))
	res := callTool(t, c, "ask", nil)
	if res.IsError || text(res) != `accept {"allow":true}` {
		t.Fatalf("ask: %s", text(res))
	}
	if q := <-asked; q != "allow write_file?" {
		t.Errorf("asked %q", q)
	}
}

// Hostile input from the client: a line that is not JSON and one over the size limit
// get JSON-RPC errors (the latter for its id); the relay goes on.
func TestRelayBadInput(t *testing.T) {
	d := newStandIn(t, nil)
	inR, inW := io.Pipe()
	var out syncBuffer
	r := &Relay{Connect: d.connect, MaxMessage: 1 << 10}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background(), inR, &out) }()
	io.WriteString(inW, "not json\n")
	io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"`+strings.Repeat("a", 5000)+`"}}`+"\n")
	io.WriteString(inW, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "parse error") || !strings.Contains(lines[1], "more than 1024 bytes") || !strings.Contains(lines[1], `"id":1`) ||
		!strings.Contains(lines[2], `"id":2`) || !strings.Contains(lines[2], `"serverInfo"`) {
		t.Errorf("relay wrote:\n%s", out.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// A call of a read-only tool in flight when the connection drops is sent again on a new
// session (the client listed the tools, so the relay knows which are safe): the await
// goes on and answers when the run ends.
func TestRelayResendsSafeCalls(t *testing.T) {
	d := newStandIn(t, nil)
	c := relayClient(t, d)
	if _, err := c.ListTools(context.Background(), mcp.ListToolsRequest{}); err != nil {
		t.Fatal(err)
	}
	var ex ExecuteResult
	ok(t, c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-d.held.started
	progress := make(chan struct{}, 100)
	c.OnNotification(func(mcp.JSONRPCNotification) {
		select {
		case progress <- struct{}{}:
		default:
		}
	})
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var req mcp.CallToolRequest
		req.Params.Name = "workflow_await"
		req.Params.Arguments = map[string]any{"run_id": ex.RunID, "timeout_s": 3600}
		req.Params.Meta = &mcp.Meta{ProgressToken: "p"}
		res, err := c.CallTool(context.Background(), req)
		done <- answer{res, err}
	}()
	<-progress // in flight on the first server
	d.restart()
	for len(progress) > 0 {
		<-progress
	}
	<-progress // sent again: the new server reports progress
	close(d.held.release)
	a := <-done
	if a.err != nil || a.res.IsError || !strings.Contains(text(a.res), "completed") {
		t.Fatalf("await across the drop: %v %+v", a.err, a.res)
	}
}

// A client that pipes its requests in and closes stdin still gets the answers to them:
// the relay waits for those before it leaves.
func TestRelayAnswersAfterStdinCloses(t *testing.T) {
	d := newStandIn(t, nil)
	var out syncBuffer
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"workflow_execute","arguments":{"script":"function main() report(agent{prompt = \"x\"}.output) end"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":3,"method":"tools/list"}` + "\n")
	r := &Relay{Connect: d.connect}
	if err := r.Run(context.Background(), in, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{`"id":1,`, `"id":2,`, `"id":3,`, `"run_id"`, `"workflow_await"`} {
		if !strings.Contains(got, want) {
			t.Errorf("relay output lacks %s:\n%s", want, got)
		}
	}
}
