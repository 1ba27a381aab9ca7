package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

func TestIDScanner(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{`{"jsonrpc":"2.0","id":7,"method":"ping"}`, `7`},
		{`{"method":"tools/call","params":{"id":"inner","arguments":{"id":9}},"jsonrpc":"2.0","id":"last"}`, `"last"`},
		{` { "id" : "a\"b,}" , "x": 1}`, `"a\"b,}"`},
		{`{"params":{"s":"\"id\":5"},"id":-3.5}`, `-3.5`},
		{`{"method":"notifications/x"}`, ``},
		{`{"id":{"not":"an id"}}`, ``},
		{`{"id":null}`, ``},
		{`[{"id":1}]`, ``},
		{`{"id":"` + strings.Repeat("x", 1000) + `"}`, ``},
		{`not json`, ``},
	} {
		var sc idScanner
		// Fed a byte at a time, as the pieces of a stream may cut it anywhere.
		for i := range len(tc.msg) {
			sc.Write([]byte{tc.msg[i]})
		}
		if got := string(sc.ID()); got != tc.want {
			t.Errorf("%.80s: id %q, want %q", tc.msg, got, tc.want)
		}
	}
}

// hugeCall calls workflow_validate with a script of n bytes; it must fail with the
// JSON-RPC error that names the limit, at once.
func hugeCall(t *testing.T, c *client.Client, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var req mcp.CallToolRequest
	req.Params.Name = "workflow_validate"
	req.Params.Arguments = map[string]any{"script": strings.Repeat("-", n)}
	res, err := c.CallTool(ctx, req)
	if err == nil {
		t.Fatalf("a %d-byte call was answered: %s", n, text(res))
	}
	if !strings.Contains(err.Error(), "more than 33554432 bytes refused") {
		t.Fatalf("a %d-byte call: %v (want the JSON-RPC error naming the limit)", n, err)
	}
}

// A 40 MiB argument is answered with a JSON-RPC error for its request, over HTTP, through
// the stdio relay and over stdio standalone, and the session goes on.
func TestOversizedMessageAnswered(t *testing.T) {
	const huge = 40 << 20
	t.Run("http", func(t *testing.T) {
		e := newEnv(t)
		hs := httptest.NewServer(e.srv.Handler())
		t.Cleanup(hs.Close)
		c := httpClient(t, hs.URL+"/mcp")
		hugeCall(t, c, huge)
		ok(t, c, "workflow_list_runs", nil, nil)
	})
	t.Run("relay", func(t *testing.T) {
		c := relayClient(t, newStandIn(t, nil))
		hugeCall(t, c, huge)
		ok(t, c, "workflow_list_runs", nil, nil)
	})
	t.Run("stdio", func(t *testing.T) {
		e := newEnv(t)
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- e.srv.ServeStdio(context.Background(), inR, outW, nil)
			outW.Close()
		}()
		c := client.NewClient(transport.NewIO(outR, inW, io.NopCloser(strings.NewReader(""))))
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Initialize(context.Background(), initRequest()); err != nil {
			t.Fatal(err)
		}
		hugeCall(t, c, huge)
		ok(t, c, "workflow_list_runs", nil, nil)
		inW.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
		c.Close()
	})
}

// spaces is a reader of n spaces, made as they are read.
func spaces(n int64) io.Reader { return io.LimitReader(zeros{}, n) }

// The HTTP door reads an oversized body to its end without keeping it: a request that
// says its length, and one sent chunked, are answered with the JSON-RPC error for their
// id (found at the end of the body, where the TypeScript SDK writes it); one without an
// id gets HTTP 413 with the error. The connection stays open for the next request.
func TestHTTPBodyBounded(t *testing.T) {
	d := newStandIn(t, nil)
	_, url, _ := d.connect(context.Background())
	body := func() io.Reader {
		return io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"workflow_validate","arguments":{"script":"`),
			spaces(MaxBody+1), strings.NewReader(`"}},"id":41}`))
	}
	tr := &http.Transport{MaxConnsPerHost: 1}
	hc := &http.Client{Transport: tr}
	post := func(r io.Reader, length int64) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, r)
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	wantErr := func(what string, status int, b []byte, id string) {
		t.Helper()
		var m struct {
			ID    json.RawMessage
			Error struct {
				Code    int
				Message string
			}
		}
		if err := json.Unmarshal(b, &m); err != nil || string(m.ID) != id || m.Error.Code != codeTooLarge || !strings.Contains(m.Error.Message, "33554432 bytes") {
			t.Errorf("%s: HTTP %d: %s", what, status, b)
		}
	}
	st, b := post(body(), int64(len(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"workflow_validate","arguments":{"script":"`))+MaxBody+1+int64(len(`"}},"id":41}`)))
	wantErr("with a length", st, b, "41")
	st, b = post(body(), -1)
	wantErr("chunked", st, b, "41")
	st, b = post(spaces(MaxBody+10), -1)
	if st != http.StatusRequestEntityTooLarge {
		t.Errorf("without an id: HTTP %d", st)
	}
	wantErr("without an id", st, b, "null")
	// The same connection answers the next request.
	st, b = post(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`), -1)
	if st != http.StatusOK || !strings.Contains(string(b), "serverInfo") {
		t.Errorf("after the refusals: HTTP %d: %s", st, b)
	}
}

// Over stdio an oversized line is read without being kept: memory does not grow with it.
func TestStdioOversizedLineBounded(t *testing.T) {
	e := newEnv(t)
	const line = 200 << 20
	in := io.MultiReader(strings.NewReader(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"workflow_validate","arguments":{"script":"`),
		spaces(line), strings.NewReader(`"}},"id":7}`+"\n"+`{"jsonrpc":"2.0","id":8,"method":"ping"}`+"\n"))
	outR, outW := io.Pipe()
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	done := make(chan error, 1)
	go func() {
		done <- e.srv.ServeStdio(context.Background(), in, outW, nil)
		outW.Close()
	}()
	sc := bufio.NewScanner(outR)
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	goruntime.ReadMemStats(&after)
	if len(got) != 2 || !strings.Contains(got[0], `"id":7`) || !strings.Contains(got[0], "more than 33554432 bytes refused") || !strings.Contains(got[1], `"id":8`) {
		t.Fatalf("answers: %.500q", got)
	}
	// The line is kept up to the limit (32 MiB) and no further; mcp-go alone would hold
	// it whole, several times over.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 3*MaxBody {
		t.Errorf("a %d MiB line allocated %d MiB", line>>20, alloc>>20)
	}
}
