package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

func TestRunRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{{"--no-such-flag"}, {"extra"}, {"--log"}} {
		if err := run(t.Context(), args, strings.NewReader(""), io.Discard, io.Discard); err == nil {
			t.Errorf("%s: want an error", strings.Join(args, " "))
		}
	}
}

func TestRunServesAndLogs(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "calls.jsonl")
	serverIn, clientOut := io.Pipe()
	clientIn, serverOut := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(t.Context(), []string{"--log", logPath}, serverIn, serverOut, io.Discard)
		serverOut.Close()
	}()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := client.NewClient(transport.NewIO(clientIn, clientOut, io.NopCloser(strings.NewReader(""))))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		t.Fatal(err)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "lookup"
	req.Params.Arguments = map[string]any{"key": "k"}
	if _, err := c.CallTool(ctx, req); err != nil {
		t.Fatal(err)
	}
	clientOut.Close() // stdin ends: the command returns
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("run did not return after stdin ended")
	}
	calls, err := mcpfake.ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].Tool != "lookup" || calls[0].Args["key"] != "k" {
		t.Errorf("log = %+v, want one lookup{key: k}", calls)
	}
	_ = c.Close()
}
