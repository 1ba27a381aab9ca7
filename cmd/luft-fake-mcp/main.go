// Command luft-fake-mcp serves the test kit's fake MCP tool server (package
// internal/testkit/mcpfake) on stdin and stdout, for trying luft's [mcp_servers] by hand
// and for end-to-end tests outside Go's test binaries. It exits when stdin ends.
//
//	[mcp_servers.fake]
//	command = "luft-fake-mcp"
//	args = ["--log", "calls.jsonl"]
//
// With --log every tools/call it receives is appended to the file as one JSON line
// (mcpfake.Call), the ground truth of what a client sent.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "luft-fake-mcp:", err)
		stop()
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("luft-fake-mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	logPath := fs.String("log", "", "append the ground-truth log of every tools/call to this JSONL file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (the only flag is --log FILE)", fs.Args())
	}
	return mcpfake.Serve(ctx, stdin, stdout, *logPath)
}
