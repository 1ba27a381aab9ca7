package runtime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// A process killed after it stored run_done but before it updated the run's row leaves a
// row saying running; resume settles it from run_done instead of running it again.
func TestResumeSettlesARunWhoseRunDoneIsStored(t *testing.T) {
	svc := newEngine(t, &scripted{reply: echo})
	st := svc.opts.Store
	ctx := t.Context()
	spec, _ := json.Marshal(Spec{Path: "gone.lua"})
	if err := st.CreateRun(ctx, storage.Run{ID: "run-a", Workflow: "gone.lua", Status: storage.StatusRunning, PID: deadPID, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, "run-a",
		event.New(event.RunStarted, map[string]any{"attempt": 1}),
		event.New(event.RunDone, map[string]any{"status": "completed", "report": "done", "usage": map[string]any{"input": 3, "output": 4}, "agents": map[string]any{"ok": 2}, "cost": 0.5}),
	); err != nil {
		t.Fatal(err)
	}
	r, err := svc.Resume(ctx, ResumeSpec{Run: "run-a"})
	if err != nil || !r.AlreadyCompleted() {
		t.Fatalf("resume: %v", err)
	}
	if res := r.Wait(); res.Status != StatusCompleted || res.Report != "done" {
		t.Fatalf("result of the settled run: %+v", res)
	}
	row, _ := st.GetRun(ctx, "run-a")
	if row.Status != storage.StatusCompleted || string(row.Report) != `"done"` || row.Usage.Output != 4 || row.Agents.OK != 2 || row.Cost != 0.5 {
		t.Fatalf("row not settled: %+v", row)
	}
}

// A process killed between recording a run and pinning its script ran no call; resume
// takes the script from disk.
func TestResumeARunWhoseScriptWasNeverPinned(t *testing.T) {
	svc := newEngine(t, &scripted{reply: echo})
	st := svc.opts.Store
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "wf.lua")
	if err := os.WriteFile(path, []byte(`function main() report(agent{prompt="x"}.output) end`), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(Spec{Path: path})
	if err := st.CreateRun(ctx, storage.Run{ID: "run-b", Workflow: path, Status: storage.StatusRunning, PID: deadPID, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	r, err := svc.Resume(ctx, ResumeSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if res := r.Wait(); res.Status != StatusCompleted || res.Report != "re: x" {
		t.Fatalf("%s %v %v", res.Status, res.Report, res.Err)
	}
	if files, _ := st.Files(ctx, "run-b"); len(files) != 1 {
		t.Fatalf("the script was not pinned on resume: %d files", len(files))
	}
}
