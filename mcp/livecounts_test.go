package mcp

import (
	"strings"
	"testing"

	"github.com/luft-run/luft/storage"
)

// workflow_status counts a running run's finished calls and their tokens as they finish
// (not zeros until it ends), and a call the cancel cut off counts as cancelled, not
// failed.
func TestStatusLiveCountsAndCancelled(t *testing.T) {
	e := newEnv(t)
	script := `function main() agent{prompt = "quick", backend = "mock"} agent{prompt = "wait", backend = "held"} end`
	var ex ExecuteResult
	ok(t, e.c, "workflow_execute", map[string]any{"script": script}, &ex)
	<-e.held.started // the mock call is done, the held one runs
	var st RunView
	txt := ok(t, e.c, "workflow_status", map[string]any{"run_id": ex.RunID}, &st)
	if st.Status != "running" || st.Agents != (storage.AgentCounts{OK: 1}) || st.Usage.Input+st.Usage.Output == 0 {
		t.Errorf("workflow_status while it runs: %s, agents %+v, usage %+v; want running with 1 ok and its tokens", st.Status, st.Agents, st.Usage)
	}
	if !strings.Contains(txt, "agents 1 ok, 0 failed, 0 cached") {
		t.Errorf("workflow_status text while it runs: %s", txt)
	}
	ok(t, e.c, "workflow_cancel", map[string]any{"run_id": ex.RunID}, nil)
	var done RunView
	txt = ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &done)
	if done.Status != "cancelled" || done.Agents != (storage.AgentCounts{OK: 1, Cancelled: 1}) {
		t.Errorf("after the cancel: %s, agents %+v; want cancelled with 1 ok and 1 cancelled", done.Status, done.Agents)
	}
	if !strings.Contains(txt, "agents 1 ok, 0 failed, 0 cached, 1 cancelled") {
		t.Errorf("await text after the cancel: %s", txt)
	}
}
