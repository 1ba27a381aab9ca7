package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/door"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

const twoPhases = `
function main()
  phase{label = "scan", planned = 2, description = "look around"}
  agent{prompt = "a"}
  agent{prompt = "b"}
  phase("fix")
  agent{prompt = "c"}
  report({ done = true })
end
`

// The same run read at the three doors, `luft status --json`, the daemon's GET
// /api/runs/{id} and MCP's workflow_status, decodes into the one door.Run and says the
// same thing; only what one door alone shows differs (the CLI's resume hint, args and
// script hash, the daemon's hosted flag, the report the daemon serves apart).
func TestOneShapeOfARunAtEveryDoor(t *testing.T) {
	dt := newDaemonTest(t)
	info := dt.start("--listen", "127.0.0.1:0")
	tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	bearer := "Bearer " + strings.TrimSpace(string(tok))
	c, err := client.NewStreamableHttpClient("http://"+info.Addr+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": bearer}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var init mcp.InitializeRequest
	init.Params.ClientInfo = mcp.Implementation{Name: "shape-test", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	var ex, done mcpRun
	mcpCall(t, c, "workflow_execute", map[string]any{"script": twoPhases}, &ex)
	mcpCall(t, c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &done)
	if done.Status != "completed" {
		t.Fatalf("the run: %+v", done)
	}

	raw := map[string][]byte{}
	var fromMCP map[string]any
	mcpCall(t, c, "workflow_status", map[string]any{"run_id": ex.RunID}, &fromMCP)
	raw["mcp"], _ = json.Marshal(fromMCP)
	req, _ := http.NewRequest(http.MethodGet, "http://"+info.Addr+"/api/runs/"+ex.RunID, nil)
	req.Header.Set("Authorization", bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/runs/%s: HTTP %d\n%s", ex.RunID, resp.StatusCode, body.Bytes())
	}
	raw["daemon"] = body.Bytes()
	out, stderr, code := dt.luft("status", "--json", ex.RunID)
	if code != 0 {
		t.Fatalf("luft status --json: exit %d\n%s", code, stderr)
	}
	raw["cli"] = []byte(out)

	runs := map[string]door.Run{}
	for name, b := range raw {
		// Both keys of the run's id, with the same value, at every door.
		var keys struct {
			RunID string `json:"run_id"`
			ID    string `json:"id"`
		}
		if err := json.Unmarshal(b, &keys); err != nil || keys.RunID != ex.RunID || keys.ID != ex.RunID {
			t.Errorf("%s: run_id %q and id %q, want both %q (%v)\n%s", name, keys.RunID, keys.ID, ex.RunID, err, b)
		}
		var r door.Run
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields() // every key a door sends is a field of the one shape
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		runs[name] = r
	}

	// What one door alone shows.
	cli, dmn, mc := runs["cli"], runs["daemon"], runs["mcp"]
	if cli.ScriptHash == "" {
		t.Error("cli: no script_hash")
	}
	if dmn.Hosted == nil || cli.Hosted != nil || mc.Hosted != nil {
		t.Errorf("hosted: daemon %v, cli %v, mcp %v; want only the daemon's", dmn.Hosted, cli.Hosted, mc.Hosted)
	}
	want := map[string]any{"done": true}
	for name, r := range map[string]door.Run{"cli": cli, "mcp": mc} {
		if got, _ := json.Marshal(r.Report); string(got) != `{"done":true}` {
			t.Errorf("%s: report %s, want %v", name, got, want)
		}
	}
	if dmn.Report != nil || !dmn.HasReport {
		t.Errorf("daemon: report %v, has_report %v; want it served at /api/runs/{id}/report", dmn.Report, dmn.HasReport)
	}
	if len(cli.Phases) != 2 || cli.Phases[0].PhaseID != 1 || cli.Phases[0].ID != 1 || cli.Phases[0].Description != "look around" || cli.Phases[1].Label != "fix" {
		t.Errorf("cli: phases %+v", cli.Phases)
	}

	// The rest is one and the same.
	norm := func(r door.Run) string {
		r.ScriptHash, r.ResumeWith, r.Args, r.Hosted, r.Report = "", "", nil, nil, nil
		b, _ := json.MarshalIndent(r, "", "  ")
		return string(b)
	}
	if a, b := norm(cli), norm(dmn); a != b {
		t.Errorf("luft status --json and GET /api/runs/{id} differ:\n%s\n--- daemon:\n%s", a, b)
	}
	if a, b := norm(cli), norm(mc); a != b {
		t.Errorf("luft status --json and workflow_status differ:\n%s\n--- mcp:\n%s", a, b)
	}
}
