package mcp

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/luft-run/luft/runtime"
	"github.com/mark3labs/mcp-go/client"
)

// httpClient is a new client (a new MCP session) of srv over streamable HTTP.
func httpClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(context.Background(), initRequest()); err != nil {
		t.Fatal(err)
	}
	return c
}

// One MCP session may not cancel or approve another session's runs (workflow runs or
// sub-agents); it still reads them. Runs not started through MCP stay open to every
// session, and a session's own runs to it.
func TestSessionsControlOnlyTheirRuns(t *testing.T) {
	e := newEnv(t)
	hs := httptest.NewServer(e.srv.Handler())
	t.Cleanup(hs.Close)
	a, b := httpClient(t, hs.URL+"/mcp"), httpClient(t, hs.URL+"/mcp")

	var ex ExecuteResult
	ok(t, a, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-e.held.started
	var sp SpawnResult
	ok(t, a, "spawn", map[string]any{"prompt": "wait", "backend": "held"}, &sp)
	<-e.held.started

	refused := "was started by another MCP session"
	fails(t, b, "workflow_cancel", map[string]any{"run_id": ex.RunID}, refused, "only the runs it started")
	fails(t, b, "cancel", map[string]any{"handle": sp.Handle}, refused)
	fails(t, b, "approve", map[string]any{"handle": sp.Handle, "allow": true}, refused)
	fails(t, b, "approve", map[string]any{"run_id": ex.RunID, "allow": true}, refused)
	// Reading stays open.
	var v RunView
	ok(t, b, "workflow_status", map[string]any{"run_id": ex.RunID}, &v)
	if v.Status != "running" {
		t.Fatalf("after a refused cancel: %+v", v)
	}
	ok(t, b, "workflow_events", map[string]any{"run_id": ex.RunID}, nil)
	ok(t, b, "status", map[string]any{"handles": []string{sp.Handle}}, nil)

	// The session that started them may.
	res := callTool(t, a, "approve", map[string]any{"handle": sp.Handle, "allow": true})
	if strings.Contains(text(res), refused) {
		t.Errorf("the owner's approve was refused: %s", text(res))
	}
	var cr CancelResult
	ok(t, a, "workflow_cancel", map[string]any{"run_id": ex.RunID}, &cr)
	ok(t, a, "cancel", map[string]any{"handle": sp.Handle}, nil)
	if !cr.CancelRequested {
		t.Errorf("the owner's cancel: %+v", cr)
	}

	// A run not started through MCP (luft run, the API) is anyone's to cancel.
	run, err := e.svc.Start(context.Background(), runtime.Spec{Source: []byte(heldScript), Caller: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	<-e.held.started
	ok(t, b, "workflow_cancel", map[string]any{"run_id": run.ID}, &cr)
	<-run.Done()
}

// Through the stdio relay a session keeps its runs across a restart of the daemon (the
// relay opens a new daemon session, under the same session key), and another relay's
// client may not cancel them.
func TestSessionsSurviveTheRelay(t *testing.T) {
	d := newStandIn(t, nil)
	mine, other := relayClient(t, d), relayClient(t, d)
	var ex ExecuteResult
	ok(t, mine, "workflow_execute", map[string]any{"script": heldScript}, &ex)
	<-d.held.started
	fails(t, other, "workflow_cancel", map[string]any{"run_id": ex.RunID}, "was started by another MCP session")
	d.restart()
	fails(t, other, "workflow_cancel", map[string]any{"run_id": ex.RunID}, "was started by another MCP session")
	var cr CancelResult
	ok(t, mine, "workflow_cancel", map[string]any{"run_id": ex.RunID}, &cr)
	if !cr.CancelRequested {
		t.Errorf("cancel after the restart: %+v", cr)
	}
}
