package mcpfake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

// testTimeout bounds each test's MCP exchanges so a broken fake fails instead of hanging.
const testTimeout = 30 * time.Second

func connectHTTP(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	initialize(t, c)
	return c
}

func initialize(t *testing.T, c *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ClientInfo = mcp.Implementation{Name: "mcpfake-test", Version: "1"}
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatalf("initialize: %v", err)
	}
}

func callTool(t *testing.T, c *client.Client, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func TestToolsArePagedAndAnnotated(t *testing.T) {
	url, _ := mcpfake.New().StartHTTP(t)
	c := connectHTTP(t, url)

	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var all []mcp.Tool
	req := mcp.ListToolsRequest{}
	for pages := 1; ; pages++ {
		page, err := c.ListToolsByPage(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Tools) > mcpfake.PageSize {
			t.Fatalf("page %d has %d tools, want at most %d", pages, len(page.Tools), mcpfake.PageSize)
		}
		all = append(all, page.Tools...)
		if page.NextCursor == "" {
			if pages < 2 {
				t.Fatalf("tools fit on %d page; the fake must make clients follow cursors", pages)
			}
			break
		}
		req.Params.Cursor = page.NextCursor
	}

	// readOnlyHint/destructiveHint as sent; "-" is absent.
	hint := func(b *bool) string {
		if b == nil {
			return "-"
		}
		return strconv.FormatBool(*b)
	}
	want := map[string]string{
		"add":           "-/-",
		"delete_record": "-/true",
		"fail":          "-/-",
		"lookup":        "true/-",
		"snapshot":      "true/-",
		"wait":          "true/-",
		"env":           "true/-",
	}
	got := map[string]string{}
	for _, tl := range all {
		got[tl.Name] = hint(tl.Annotations.ReadOnlyHint) + "/" + hint(tl.Annotations.DestructiveHint)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tools and readOnly/destructive hints:\n got %v\nwant %v", got, want)
	}
}

// exchange runs the same calls against a connected client and checks the answers and
// the fake's ground truth.
func exchange(t *testing.T, c *client.Client, calls func() []mcpfake.Call) {
	t.Helper()
	cases := []struct {
		tool    string
		args    any
		want    string
		isError bool
	}{
		{"lookup", map[string]any{"key": "alpha"}, "value-of-alpha", false},
		{"add", map[string]any{"a": 2, "b": 3.5}, "5.5", false},
		{"delete_record", map[string]any{"id": "r-9"}, "deleted record r-9", false},
		{"fail", nil, mcpfake.FailMessage, true},
		{"add", map[string]any{"a": "two", "b": 1}, "add: a and b must be numbers", true},
	}
	for _, tc := range cases {
		res := callTool(t, c, tc.tool, tc.args)
		if got := text(res); got != tc.want || res.IsError != tc.isError {
			t.Errorf("%s(%v) = %q (isError %v), want %q (isError %v)", tc.tool, tc.args, got, res.IsError, tc.want, tc.isError)
		}
	}
	got := calls()
	if len(got) != len(cases) {
		t.Fatalf("fake recorded %d calls, want %d: %+v", len(got), len(cases), got)
	}
	for i, tc := range cases {
		var want map[string]any
		if tc.args != nil {
			b, _ := json.Marshal(tc.args)
			_ = json.Unmarshal(b, &want)
		}
		if got[i].Tool != tc.tool || !reflect.DeepEqual(got[i].Args, want) {
			t.Errorf("call %d recorded as %s %v, want %s %v", i, got[i].Tool, got[i].Args, tc.tool, want)
		}
	}
}

func TestHTTPAnswersAndRecords(t *testing.T) {
	f := mcpfake.New()
	var log bytes.Buffer
	var logMu sync.Mutex
	f.LogTo(lockedWriter{&logMu, &log})
	url, _ := f.StartHTTP(t)
	exchange(t, connectHTTP(t, url), f.Calls)

	logMu.Lock()
	defer logMu.Unlock()
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	if err := os.WriteFile(path, log.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	fromLog, err := mcpfake.ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromLog, f.Calls()) {
		t.Errorf("the JSON log and Calls disagree:\n log %+v\ncalls %+v", fromLog, f.Calls())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestStdioInProcess serves the fake over a pair of pipes. It must not run in
// parallel with another in-process stdio test (see the package documentation).
func TestStdioInProcess(t *testing.T) {
	f := mcpfake.New()
	serverIn, clientOut := io.Pipe()
	clientIn, serverOut := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- f.ServeStdio(t.Context(), serverIn, serverOut)
		serverOut.Close()
	}()

	c := client.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
	initialize(t, c)
	exchange(t, c, f.Calls)

	// Closing the client closes the fake's stdin, which ends ServeStdio cleanly.
	if err := clientOut.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdio after stdin ended: %v, want nil", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("ServeStdio did not return after its stdin ended")
	}
	_ = c.Close()
}

func TestStopRefusesConnections(t *testing.T) {
	url, stop := mcpfake.New().StartHTTP(t)
	stop()
	stop() // idempotent
	c, err := client.NewStreamableHttpClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("initialize after stop: %v, want connection refused", err)
	}
}

func TestWaitEndsWhenCancelled(t *testing.T) {
	f := mcpfake.New()
	url, _ := f.StartHTTP(t)
	c := connectHTTP(t, url)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "wait"
		_, err := c.CallTool(ctx, req)
		done <- err
	}()
	select {
	case <-f.Waiting():
	case <-time.After(testTimeout):
		t.Fatal("wait{} never started")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled wait{}: %v, want context.Canceled", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("cancelled wait{} did not return")
	}
	// The connection is still good after a cancelled call.
	if got := text(callTool(t, c, "lookup", map[string]any{"key": "k"})); got != "value-of-k" {
		t.Errorf("lookup after a cancelled call = %q", got)
	}
}

func TestCallsAreSafeForConcurrentUse(t *testing.T) {
	f := mcpfake.New()
	url, _ := f.StartHTTP(t)
	c := connectHTTP(t, url)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprint("k", i)
			if got := text(callTool(t, c, "lookup", map[string]any{"key": key})); got != "value-of-"+key {
				t.Errorf("lookup %s = %q", key, got)
			}
			_ = f.Calls()
		})
	}
	wg.Wait()
	if got := len(f.Calls()); got != n {
		t.Errorf("recorded %d calls, want %d", got, n)
	}
}

func TestReadLog(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name    string
		path    string
		want    []mcpfake.Call
		wantErr string
	}{
		{"missing file is an empty log", filepath.Join(dir, "none.jsonl"), nil, ""},
		{"two calls", write("two.jsonl", `{"tool":"fail","args":null}`+"\n"+`{"tool":"lookup","args":{"key":"k"},"raw":{"key":"k"}}`+"\n"),
			[]mcpfake.Call{{Tool: "fail"}, {Tool: "lookup", Args: map[string]any{"key": "k"}, Raw: json.RawMessage(`{"key":"k"}`)}}, ""},
		{"bad line is named", write("bad.jsonl", `{"tool":"fail"}`+"\nnot json\n"), nil, "line 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mcpfake.ReadLog(tc.path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
