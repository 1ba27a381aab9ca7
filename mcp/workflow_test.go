package mcp

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// Every workflow tool is listed with a strict input schema, an output schema and the
// annotations that tell a client which tools only read.
func TestToolsListed(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		res, err := e.c.ListTools(t.Context(), mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		tools := map[string]mcp.Tool{}
		for _, tool := range res.Tools {
			tools[tool.Name] = tool
		}
		readOnly := []string{"workflow_status", "workflow_events", "workflow_await", "workflow_list_runs", "workflow_list_files", "workflow_validate"}
		for _, name := range append([]string{"workflow_execute", "workflow_cancel"}, readOnly...) {
			tool, found := tools[name]
			if !found {
				t.Errorf("%s is not listed", name)
				continue
			}
			if in := tool.InputSchema; tool.Description == "" || in.Type != "object" || in.AdditionalProperties != false || len(in.Properties) == 0 && name != "workflow_list_runs" {
				t.Errorf("%s: description or strict input schema missing: %+v", name, in)
			}
			if tool.OutputSchema.Type != "object" && len(tool.RawOutputSchema) == 0 {
				t.Errorf("%s has no output schema", name)
			}
			a := tool.Annotations
			if ro := a.ReadOnlyHint != nil && *a.ReadOnlyHint; ro != slices.Contains(readOnly, name) {
				t.Errorf("%s: readOnlyHint %v", name, ro)
			}
		}
		if a := tools["workflow_cancel"].Annotations; a.DestructiveHint == nil || !*a.DestructiveHint {
			t.Error("workflow_cancel is not marked destructive")
		}
		if a := tools["workflow_execute"].Annotations; a.DestructiveHint == nil || *a.DestructiveHint || a.ReadOnlyHint == nil || *a.ReadOnlyHint {
			t.Error("workflow_execute: want neither read-only nor destructive")
		}
	})
}

// A run started with workflow_execute is awaited to its end and shown by status, events
// and the runs list; its args reach the script.
func TestExecuteAwaitStatusEvents(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		var ex ExecuteResult
		ok(t, e.c, "workflow_execute", map[string]any{"script": helloScript, "args": map[string]any{"name": "ada"}, "backend": "mock", "class": "batch"}, &ex)
		if ex.RunID == "" || ex.Status != "running" {
			t.Fatalf("execute: %+v", ex)
		}
		var done RunView
		txt := ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &done)
		if done.Status != "completed" || done.Agents.OK != 1 || fmt.Sprint(done.Report) != "map[name:ada ok:true]" {
			t.Fatalf("await: %+v\n%s", done, txt)
		}
		if !strings.Contains(txt, "completed") || !strings.Contains(txt, "report:") {
			t.Errorf("await text: %s", txt)
		}
		var st RunView
		ok(t, e.c, "workflow_status", map[string]any{"run_id": ex.RunID[:13]}, &st) // a unique prefix does
		if st.RunID != ex.RunID || st.Status != "completed" || len(st.Phases) != 1 || st.Phases[0].Label != "greet" {
			t.Errorf("status: %+v", st)
		}
		// Events page by page: two at a time until the end, then a type filter.
		var all []EventView
		since := int64(0)
		for range 100 {
			var page EventsResult
			ok(t, e.c, "workflow_events", map[string]any{"run_id": ex.RunID, "since_seq": since, "limit": 2}, &page)
			all = append(all, page.Events...)
			since = page.NextSeq
			if !page.More {
				break
			}
			if len(page.Events) != 2 {
				t.Fatalf("a page that is not the last holds %d events", len(page.Events))
			}
		}
		if len(all) < 5 || all[0].Type != "run_started" || all[len(all)-1].Type != "run_done" {
			t.Fatalf("events: %+v", all)
		}
		for i := 1; i < len(all); i++ {
			if all[i].Seq <= all[i-1].Seq {
				t.Fatalf("events out of order: %d after %d", all[i].Seq, all[i-1].Seq)
			}
		}
		var logs EventsResult
		ok(t, e.c, "workflow_events", map[string]any{"run_id": ex.RunID, "types": []string{"log", "run_done"}}, &logs)
		if len(logs.Events) != 2 || logs.Events[0].Type != "log" || logs.Events[1].Type != "run_done" || logs.More || logs.RunStatus != "completed" {
			t.Errorf("filtered events: %+v", logs)
		}
		// Cancelling a finished run changes nothing and says so.
		var cr CancelResult
		txt = ok(t, e.c, "workflow_cancel", map[string]any{"run_id": ex.RunID}, &cr)
		if cr.CancelRequested || cr.Status != "completed" || !strings.Contains(txt, "nothing to cancel") {
			t.Errorf("cancel of a finished run: %+v %s", cr, txt)
		}
	})
}

// A run from a workflow file: a path relative to the server's dir; and the runs list
// pages with a cursor and filters by status.
func TestExecutePathAndListRuns(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		if err := os.WriteFile(filepath.Join(e.dir, "hello.lua"), []byte(helloScript), 0o600); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for range 3 {
			var ex ExecuteResult
			ok(t, e.c, "workflow_execute", map[string]any{"path": "hello.lua"}, &ex)
			if ex.Workflow != filepath.Join(e.dir, "hello.lua") {
				t.Errorf("workflow %q", ex.Workflow)
			}
			ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID}, nil)
			ids = append(ids, ex.RunID)
		}
		var ex ExecuteResult
		ok(t, e.c, "workflow_execute", map[string]any{"script": heldScript}, &ex)
		<-e.held.started
		var page RunsPage
		ok(t, e.c, "workflow_list_runs", map[string]any{"limit": 2}, &page)
		if len(page.Runs) != 2 || page.Runs[0].RunID != ex.RunID || page.NextCursor != page.Runs[1].RunID {
			t.Fatalf("first page: %+v", page)
		}
		var next RunsPage
		ok(t, e.c, "workflow_list_runs", map[string]any{"limit": 2, "cursor": page.NextCursor}, &next)
		if len(next.Runs) != 2 || next.Runs[0].RunID != ids[1] || next.Runs[1].RunID != ids[0] || next.NextCursor != "" {
			t.Fatalf("second page: %+v", next)
		}
		var running RunsPage
		ok(t, e.c, "workflow_list_runs", map[string]any{"status": "running"}, &running)
		if len(running.Runs) != 1 || running.Runs[0].RunID != ex.RunID {
			t.Errorf("running runs: %+v", running)
		}
		var completed RunsPage
		ok(t, e.c, "workflow_list_runs", map[string]any{"status": "completed"}, &completed)
		if len(completed.Runs) != 3 {
			t.Errorf("completed runs: %+v", completed)
		}
		// Cancel the held run; await shows it cancelled.
		var cr CancelResult
		ok(t, e.c, "workflow_cancel", map[string]any{"run_id": ex.RunID}, &cr)
		if !cr.CancelRequested {
			t.Errorf("cancel: %+v", cr)
		}
		var v RunView
		ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID, "timeout_s": 60}, &v)
		if v.Status != "cancelled" {
			t.Errorf("after cancel: %+v", v)
		}
	})
}

// Bad input to workflow_execute is a tool error that says what to fix; nothing starts.
func TestExecuteErrors(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		dir := filepath.Join(e.dir, "adir.lua")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		big := filepath.Join(e.dir, "big.lua")
		if err := os.WriteFile(big, make([]byte, MaxScript+1), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			args map[string]any
			want []string
		}{
			{"nothing", map[string]any{}, []string{"give the workflow as script"}},
			{"both", map[string]any{"script": helloScript, "path": "x.lua"}, []string{"not both"}},
			{"syntax", map[string]any{"script": "function main(\n  oops"}, []string{"does not compile", "syntax error", "Fix the script"}},
			{"big script", map[string]any{"script": strings.Repeat("-", MaxScript+1)}, []string{"more than the 8388608"}},
			{"big file", map[string]any{"path": big}, []string{"more than the 8388608"}},
			{"missing file", map[string]any{"path": "nope.lua"}, []string{"nope.lua", "workflow_list_files"}},
			{"a dir", map[string]any{"path": dir}, []string{"not a regular file"}},
			{"device", map[string]any{"path": "/dev/zero"}, []string{"not a .lua file"}},
			{"outside", map[string]any{"path": "/etc/x.lua"}, []string{"outside the server's workspace"}},
			{"class", map[string]any{"script": helloScript, "class": "urgent"}, []string{`class "urgent"`, "interactive or batch"}},
			{"concurrency", map[string]any{"script": helloScript, "concurrency": -1}, []string{"concurrency -1"}},
			{"unknown arg", map[string]any{"script": helloScript, "scirpt": "x"}, []string{`unknown argument "scirpt"`}},
			{"wrong type", map[string]any{"script": 42}, []string{`"script" must be a string`}},
			{"args not object", map[string]any{"script": helloScript, "args": []any{1}}, []string{`"args" must be an object`}},
			{"huge args", map[string]any{"script": helloScript, "args": map[string]any{"x": strings.Repeat("a", MaxArgsBytes)}}, []string{"args are", "files"}},
			{"deep args", map[string]any{"script": helloScript, "args": nested(5000)}, []string{"deeper than the limit of 64 levels"}},
			{"unknown backend", map[string]any{"script": helloScript, "backend": "nope"}, []string{"nope"}},
		} {
			t.Run(tc.name, func(t *testing.T) { fails(t, e.c, "workflow_execute", tc.args, tc.want...) })
		}
		var page RunsPage
		ok(t, e.c, "workflow_list_runs", nil, &page)
		for _, r := range page.Runs {
			if r.Status == "running" {
				t.Errorf("a refused execute left run %s running", r.RunID)
			}
		}
	})
}

// A run id that names no run, or more than one, and bounds on the other arguments are
// tool errors that say what to do.
func TestRunArgumentErrors(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		var a, b ExecuteResult
		ok(t, e.c, "workflow_execute", map[string]any{"script": helloScript}, &a)
		ok(t, e.c, "workflow_execute", map[string]any{"script": helloScript}, &b)
		ok(t, e.c, "workflow_await", map[string]any{"run_id": a.RunID}, nil)
		ok(t, e.c, "workflow_await", map[string]any{"run_id": b.RunID}, nil)
		common := a.RunID[:1] // both ids are UUIDv7s of the same millisecond range
		for _, tool := range []string{"workflow_status", "workflow_events", "workflow_await", "workflow_cancel"} {
			fails(t, e.c, tool, map[string]any{"run_id": "0000-no-such-run"}, `no run "0000-no-such-run"`, "workflow_list_runs")
			fails(t, e.c, tool, map[string]any{}, "run_id is required")
			fails(t, e.c, tool, map[string]any{"run_id": strings.Repeat("x", 10000)}, "run_id is 10000 characters")
			fails(t, e.c, tool, map[string]any{"run_id": common}, "more than one run", a.RunID, b.RunID) // it names them
			fails(t, e.c, tool, map[string]any{"run_id": 7}, `"run_id" must be a string`)
		}
		for _, tc := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{"workflow_events", map[string]any{"run_id": a.RunID, "limit": 501}, "limit 501: use 1 to 500"},
			{"workflow_events", map[string]any{"run_id": a.RunID, "limit": -1}, "limit -1"},
			{"workflow_events", map[string]any{"run_id": a.RunID, "since_seq": -5}, "since_seq -5"},
			{"workflow_events", map[string]any{"run_id": a.RunID, "types": make([]string, 65)}, "65 types"},
			{"workflow_events", map[string]any{"run_id": a.RunID, "types": []string{strings.Repeat("t", 100)}}, "event type names"},
			{"workflow_await", map[string]any{"run_id": a.RunID, "timeout_s": -1}, "timeout_s -1"},
			{"workflow_await", map[string]any{"run_id": a.RunID, "timeout_s": 1e9}, "use 0 to 3600"},
			{"workflow_list_runs", map[string]any{"limit": 1000}, "limit 1000"},
			{"workflow_list_runs", map[string]any{"status": "done"}, `status "done": use one of running, awaiting_approval, idle, completed`},
			{"workflow_list_runs", map[string]any{"cursor": "nope"}, "start again without cursor"},
			{"workflow_list_files", map[string]any{"dir": "no/such/dir"}, "is not a directory"},
			{"workflow_list_files", map[string]any{"dir": "/no/such/dir"}, "is outside the server's workspace"},
			{"workflow_validate", map[string]any{}, "give the workflow"},
			{"workflow_validate", map[string]any{"script": helloScript, "args": nested(65)}, "deeper than the limit of 64 levels"},
		} {
			fails(t, e.c, tc.tool, tc.args, tc.want)
		}
	})
}

// A page of events is bounded by its limit and by its size: events of 1 MiB each come a
// few at a time, the first one always.
func TestEventsPageBounded(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		var ex ExecuteResult
		ok(t, e.c, "workflow_execute", map[string]any{"script": `function main()
  for i = 1, 12 do log(string.rep("x", 900000)) end
  report("done")
end`}, &ex)
		ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID}, nil)
		seen, since := 0, int64(0)
		for range 50 {
			var page EventsResult
			ok(t, e.c, "workflow_events", map[string]any{"run_id": ex.RunID, "types": []string{"log"}, "limit": 500, "since_seq": since}, &page)
			if len(page.Events) == 0 || len(page.Events) > maxEventPageBytes/900000 {
				t.Fatalf("a page of %d big events", len(page.Events))
			}
			seen += len(page.Events)
			since = page.NextSeq
			if !page.More {
				break
			}
		}
		if seen != 12 {
			t.Errorf("read %d of 12 log events", seen)
		}
	})
}

// workflow_list_files lists .lua files below the dir, skipping hidden folders and
// node_modules, at most 3 levels down and 200 files.
func TestListFiles(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		root := filepath.Join(e.dir, "ws")
		for _, p := range []string{"a.lua", "notes.txt", "sub/b.lua", "sub/deeper/c.lua", "sub/deeper/too/deep.lua", ".hidden/h.lua", "node_modules/m.lua"} {
			full := filepath.Join(root, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte("--"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var got FilesResult
		ok(t, e.c, "workflow_list_files", map[string]any{"dir": root}, &got)
		var paths []string
		for _, f := range got.Files {
			paths = append(paths, f.Path)
		}
		if want := []string{"a.lua", "sub/b.lua", "sub/deeper/c.lua"}; !slices.Equal(paths, want) || got.Truncated {
			t.Errorf("files %v (truncated %v), want %v", paths, got.Truncated, want)
		}
		// The server's dir is the default.
		var def FilesResult
		ok(t, e.c, "workflow_list_files", nil, &def)
		if def.Dir != e.dir {
			t.Errorf("default dir %s, want %s", def.Dir, e.dir)
		}
		many := filepath.Join(e.dir, "many")
		if err := os.Mkdir(many, 0o700); err != nil {
			t.Fatal(err)
		}
		for i := range maxFiles + 5 {
			if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("w%03d.lua", i)), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var capped FilesResult
		txt := ok(t, e.c, "workflow_list_files", map[string]any{"dir": many}, &capped)
		if len(capped.Files) != maxFiles || !capped.Truncated || !strings.Contains(txt, "cut short") {
			t.Errorf("%d files, truncated %v", len(capped.Files), capped.Truncated)
		}
	})
}

// workflow_validate dry-runs a script on the mock backend: a good one is ok, a broken one
// says what and where, as a result (the check worked).
func TestValidate(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		var good ValidateResult
		ok(t, e.c, "workflow_validate", map[string]any{"script": helloScript, "args": map[string]any{"name": "x"}}, &good)
		if !good.OK || good.AgentCalls != 1 {
			t.Errorf("good script: %+v", good)
		}
		for _, tc := range []struct{ script, want string }{
			{"function main(", "syntax error"},
			{"x = 1", "main"},
			{"function main() error('boom at the end') end", "boom at the end"},
			{"function main() local x = nil; return x.y end", "nil"},
		} {
			var bad ValidateResult
			txt := ok(t, e.c, "workflow_validate", map[string]any{"script": tc.script}, &bad)
			if bad.OK || !strings.Contains(bad.Error, tc.want) || !strings.HasPrefix(txt, "invalid: ") {
				t.Errorf("%q: %+v", tc.script, bad)
			}
		}
		if err := os.WriteFile(filepath.Join(e.dir, "ok.lua"), []byte(helloScript), 0o600); err != nil {
			t.Fatal(err)
		}
		var byPath ValidateResult
		ok(t, e.c, "workflow_validate", map[string]any{"path": "ok.lua"}, &byPath)
		if !byPath.OK {
			t.Errorf("by path: %+v", byPath)
		}
	})
}

// nested is a JSON object n+1 levels deep: {"x": {"x": ... {"x": 1}}}.
func nested(n int) map[string]any {
	v := map[string]any{"x": 1}
	for range n {
		v = map[string]any{"x": v}
	}
	return v
}
