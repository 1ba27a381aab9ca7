package mcpfake

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Call is one tools/call the fake received.
type Call struct {
	Tool string `json:"tool"`
	// Args are the arguments decoded from Raw (nil when the call had none).
	Args map[string]any `json:"args"`
	// Raw are the arguments exactly as they arrived on the wire.
	Raw json.RawMessage `json:"raw,omitempty"`
}

// PageSize is how many tools the fake lists per tools/list page.
const PageSize = 2

// FailMessage is the text of fail{}'s error result.
const FailMessage = "record store unavailable"

// tinyPNG is a 1×1 transparent PNG, the image snapshot{} returns.
const tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="

// Fake is a fake MCP tool server. It is safe for concurrent use.
type Fake struct {
	srv *server.MCPServer

	mu      sync.Mutex
	calls   []Call
	log     io.Writer
	waiting chan struct{}
}

// New returns a fake with the tools listed in the package documentation.
func New() *Fake {
	f := &Fake{waiting: make(chan struct{}, 64)}
	f.srv = server.NewMCPServer("luft-fake-mcp", "1.0.0",
		server.WithToolCapabilities(false),
		server.WithPaginationLimit(PageSize),
	)
	// mcp.NewTool presets every hint (destructiveHint true among them), so each tool
	// states its annotations in full: what the fake sends is what the tool table says.
	f.srv.AddTool(mcp.NewTool("lookup",
		mcp.WithDescription("Look up the value stored under a key."),
		mcp.WithString("key", mcp.Required(), mcp.Description("the key to look up")),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{ReadOnlyHint: mcp.ToBoolPtr(true)}),
	), f.lookup)
	f.srv.AddTool(mcp.NewTool("add",
		mcp.WithDescription("Add two numbers."),
		mcp.WithNumber("a", mcp.Required()),
		mcp.WithNumber("b", mcp.Required()),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{}),
	), f.add)
	f.srv.AddTool(mcp.NewTool("delete_record",
		mcp.WithDescription("Delete a record for good."),
		mcp.WithString("id", mcp.Required(), mcp.Description("the record's id")),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{DestructiveHint: mcp.ToBoolPtr(true)}),
	), f.deleteRecord)
	f.srv.AddTool(mcp.NewTool("fail",
		mcp.WithDescription("Always fails: the record store is down."),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{}),
	), f.fail)
	f.srv.AddTool(mcp.NewTool("wait",
		mcp.WithDescription("Block until the call is cancelled."),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{ReadOnlyHint: mcp.ToBoolPtr(true)}),
	), f.wait)
	f.srv.AddTool(mcp.NewTool("env",
		mcp.WithDescription("Show the server's environment, one NAME=value a line."),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{ReadOnlyHint: mcp.ToBoolPtr(true)}),
	), f.env)
	f.srv.AddTool(mcp.NewTool("snapshot",
		mcp.WithDescription("Take a snapshot: text, an image and resources."),
		mcp.WithToolAnnotation(mcp.ToolAnnotation{ReadOnlyHint: mcp.ToBoolPtr(true)}),
	), f.snapshot)
	return f
}

// LogTo makes the fake also write every call it receives to w, one JSON line each, before
// answering it. Call it before serving.
func (f *Fake) LogTo(w io.Writer) {
	f.mu.Lock()
	f.log = w
	f.mu.Unlock()
}

// Calls returns the calls received so far, in arrival order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Waiting receives one value each time a wait{} call starts blocking, so a test can
// cancel it knowing the server has it.
func (f *Fake) Waiting() <-chan struct{} { return f.waiting }

// ServeStdio serves the fake on in and out until in ends (nil) or ctx is cancelled.
// Diagnostics go nowhere: a stdio server's stdout belongs to the protocol.
func (f *Fake) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	s := server.NewStdioServer(f.srv)
	s.SetErrorLogger(log.New(io.Discard, "", 0))
	return s.Listen(ctx, in, out)
}

// StartHTTP serves the fake over streamable HTTP on a fresh loopback port and returns
// the endpoint URL and a function that stops the server (idempotent; also run at the
// test's cleanup). After stop, connections to the URL are refused.
func (f *Fake) StartHTTP(tb testing.TB) (url string, stop func()) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("mcpfake: listen on 127.0.0.1:0: %v", err)
	}
	httpSrv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	streamable := server.NewStreamableHTTPServer(f.srv, server.WithStreamableHTTPServer(httpSrv))
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamable)
	httpSrv.Handler = mux
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = httpSrv.Serve(ln)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			// Close, not Shutdown: a wait{} call in flight would hold a graceful
			// shutdown forever, and closing its connection is what ends it.
			_ = httpSrv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = streamable.Shutdown(ctx)
			<-served
		})
	}
	tb.Cleanup(stop)
	return "http://" + ln.Addr().String() + "/mcp", stop
}

// record appends a call to the log before the tool answers it.
func (f *Fake) record(req mcp.CallToolRequest) {
	c := Call{Tool: req.Params.Name}
	switch raw := req.GetRawArguments().(type) {
	case json.RawMessage:
		c.Raw = append(json.RawMessage(nil), raw...)
	case nil:
	default:
		c.Raw, _ = json.Marshal(raw)
	}
	if len(c.Raw) > 0 {
		_ = json.Unmarshal(c.Raw, &c.Args)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	if f.log != nil {
		line, _ := json.Marshal(c)
		_, _ = f.log.Write(append(line, '\n'))
	}
}

func (f *Fake) lookup(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.record(req)
	key, ok := req.GetArguments()["key"].(string)
	if !ok {
		return mcp.NewToolResultError("lookup: key must be a string"), nil
	}
	return mcp.NewToolResultText("value-of-" + key), nil
}

func (f *Fake) add(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.record(req)
	args := req.GetArguments()
	a, okA := args["a"].(float64)
	b, okB := args["b"].(float64)
	if !okA || !okB {
		return mcp.NewToolResultError("add: a and b must be numbers"), nil
	}
	return mcp.NewToolResultText(strconv.FormatFloat(a+b, 'g', -1, 64)), nil
}

func (f *Fake) deleteRecord(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.record(req)
	id, ok := req.GetArguments()["id"].(string)
	if !ok {
		return mcp.NewToolResultError("delete_record: id must be a string"), nil
	}
	return mcp.NewToolResultText("deleted record " + id), nil
}

func (f *Fake) fail(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.record(req)
	return mcp.NewToolResultError(FailMessage), nil
}

func (f *Fake) wait(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.record(req)
	select {
	case f.waiting <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return mcp.NewToolResultError("wait: cancelled"), nil
}

// env is what a careless server hands a model: its whole environment. It shows what
// the client let the server have.
func (f *Fake) env(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.record(req)
	vars := os.Environ()
	slices.Sort(vars)
	return mcp.NewToolResultText(strings.Join(vars, "\n")), nil
}

func (f *Fake) snapshot(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	f.record(req)
	return &mcp.CallToolResult{Content: []mcp.Content{
		mcp.NewTextContent("snapshot taken"),
		mcp.NewImageContent(tinyPNG, "image/png"),
		mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: "mem://notes/1", MIMEType: "text/plain", Text: "note one"}),
		mcp.NewResourceLink("mem://records/7", "record 7", "", "application/json"),
	}}, nil
}

// Environment variables of a test binary re-run as a stdio fake (see ChildCommand).
const (
	EnvStdio = "LUFT_MCPFAKE_STDIO" // "1": serve the fake on stdin/stdout and exit
	EnvLog   = "LUFT_MCPFAKE_LOG"   // file the child appends its calls to (JSON lines)
)

// ServeChildIfRequested turns the current process into a stdio fake when EnvStdio is
// "1": it serves until stdin ends and exits. Call it first in a test package's TestMain.
// Otherwise it returns at once.
func ServeChildIfRequested() {
	if os.Getenv(EnvStdio) != "1" {
		return
	}
	if err := Serve(context.Background(), os.Stdin, os.Stdout, os.Getenv(EnvLog)); err != nil {
		fmt.Fprintln(os.Stderr, "mcpfake child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Serve serves a new fake on in and out until in ends (nil) or ctx is cancelled,
// appending every call to the file logPath when it is not empty (see ReadLog).
func Serve(ctx context.Context, in io.Reader, out io.Writer, logPath string) error {
	f := New()
	if logPath != "" {
		file, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open the call log: %w", err)
		}
		defer file.Close()
		f.LogTo(file)
	}
	return f.ServeStdio(ctx, in, out)
}

// ChildCommand returns the command, arguments and environment that re-run the current
// test binary as a stdio fake; the package's TestMain must call ServeChildIfRequested.
// logPath, when not empty, names the file the child appends its calls to.
func ChildCommand(logPath string) (command string, args []string, env map[string]string) {
	// A -race child would otherwise sleep a second at exit (atexit_sleep_ms), which
	// every Close would wait out.
	env = map[string]string{EnvStdio: "1", "GORACE": strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")}
	if logPath != "" {
		env[EnvLog] = logPath
	}
	// -test.run=^$ would run nothing should the child ever get past TestMain.
	return os.Args[0], []string{"-test.run=^$"}, env
}

// ReadLog reads a call log written through LogTo (or by a child's EnvLog).
func ReadLog(path string) ([]Call, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("read mcp fake call log: %w", err)
	}
	var calls []Call
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("read mcp fake call log %s line %d: %w", path, n, err)
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}
