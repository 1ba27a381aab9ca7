package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// TestStdioProgressBeforeResult: over stdio, every progress notification of a tool call
// is written before the call's result; nothing of the call follows it. mcp-go writes
// notifications from a goroutine of its own, so without luft's ordering a progress sent
// just before a tool returns (as await's last one is) can come after the result.
func TestStdioProgressBeforeResult(t *testing.T) {
	e := newEnv(t)
	e.srv.AddTool(mcp.NewTool("pulse", mcp.WithDescription("sends progress, then returns")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for i := 1; i <= 3; i++ {
			e.srv.Progress(ctx, req, float64(i), 3, "pulse")
		}
		return mcp.NewToolResultText("done"), nil
	})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	t.Cleanup(func() { inW.Close() })
	done := make(chan error, 1)
	go func() {
		done <- e.srv.ServeStdio(context.Background(), inR, outW, nil)
		outW.Close()
	}()
	const calls = 200
	// One call at a time, as a client awaiting a run makes them.
	next := make(chan int, 1)
	go func() {
		w := bufio.NewWriter(inW)
		fmt.Fprintln(w, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		fmt.Fprintln(w, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		w.Flush()
		for i := range next {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"pulse","arguments":{},"_meta":{"progressToken":%d}}}`+"\n", i, i)
			w.Flush()
		}
	}()
	defer close(next)
	answered := map[int]bool{}
	progress := map[int]int{}
	sc := bufio.NewScanner(outR)
	for len(answered) < calls+1 && sc.Scan() {
		var m struct {
			ID     *int   `json:"id"`
			Method string `json:"method"`
			Params struct {
				ProgressToken int `json:"progressToken"`
			} `json:"params"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		switch {
		case m.Method == "notifications/progress":
			tok := m.Params.ProgressToken
			if answered[tok] {
				t.Fatalf("a progress notification of call %d came after its result", tok)
			}
			progress[tok]++
		case m.ID != nil:
			answered[*m.ID] = true
			if *m.ID > 0 && progress[*m.ID] != 3 {
				t.Fatalf("call %d answered after %d of its 3 progress notifications", *m.ID, progress[*m.ID])
			}
			if *m.ID < calls {
				next <- *m.ID + 1
			}
		}
	}
	if len(answered) != calls+1 {
		t.Fatalf("%d of %d calls answered", len(answered)-1, calls)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
