package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// paced answers a call at once with 7 tokens in and 3 out, except one prompted "hold",
// which says it started and waits until its run is stopped.
type paced struct{ holding chan struct{} }

func (p *paced) ID() string { return "paced" }

func (p *paced) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	if req.Prompt == "hold" {
		p.holding <- struct{}{}
		<-ctx.Done()
		return agent.Result{}, context.Cause(ctx)
	}
	return agent.Result{Status: agent.StatusOK, Text: "ok", Usage: agent.Usage{Input: 7, Output: 3}}, nil
}

// GET /api/runs/{id} (what the dashboard's run header shows) and GET /api/runs count a
// running run's finished calls and tokens as they finish, not only once it ends, and a
// call the cancel cut off counts as cancelled, not failed.
func TestAPILiveCountsAndCancelled(t *testing.T) {
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b := &paced{holding: make(chan struct{}, 1)}
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("paced", b)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{StateDir: dir, Service: svc, Store: st, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	d.token = "secret"
	h := d.handler(false)
	run, err := d.start(context.Background(), StartRequest{Path: "three.lua",
		Script: `function main() agent{prompt = "a"} agent{prompt = "b"} agent{prompt = "hold"} end`})
	if err != nil {
		t.Fatal(err)
	}
	<-b.holding // a and b are done, the third call runs
	get := func(path string) string {
		t.Helper()
		code, body := call(t, h, "GET", path, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d %s", path, code, body)
		}
		return body
	}
	var one RunJSON
	if err := json.Unmarshal([]byte(get("/api/runs/"+run.ID)), &one); err != nil {
		t.Fatal(err)
	}
	want := storage.AgentCounts{OK: 2}
	if one.Status != "running" || one.Agents != want || one.Tokens != 20 || one.Usage.Input != 14 {
		t.Errorf("GET /api/runs/{id} while it runs: status %s, agents %+v, tokens %d, usage %+v; want running, %+v, 20 tokens",
			one.Status, one.Agents, one.Tokens, one.Usage, want)
	}
	var page RunPage
	if err := json.Unmarshal([]byte(get("/api/runs")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Runs) != 1 || page.Runs[0].Agents != want || page.Runs[0].Tokens != 20 {
		t.Errorf("GET /api/runs while it runs: %+v; want one run with %+v and 20 tokens", page.Runs, want)
	}
	if code, body := call(t, h, "POST", "/api/runs/"+run.ID+"/cancel", ""); code >= 300 {
		t.Fatalf("cancel: HTTP %d %s", code, body)
	}
	run.Wait()
	one = RunJSON{}
	if err := json.Unmarshal([]byte(get("/api/runs/"+run.ID)), &one); err != nil {
		t.Fatal(err)
	}
	want = storage.AgentCounts{OK: 2, Cancelled: 1}
	if one.Status != "cancelled" || one.Agents != want || one.Tokens != 20 {
		t.Errorf("GET /api/runs/{id} after the cancel: status %s, agents %+v, tokens %d; want cancelled, %+v, 20 tokens",
			one.Status, one.Agents, one.Tokens, want)
	}
}
