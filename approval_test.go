package luft_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/luft-run/luft"
)

// noteEngine is an Engine over a fresh state dir whose default backend is noteModel,
// with the file tools confined to ws.
func noteEngine(t *testing.T, o luft.Options) (eng *luft.Engine, ws string) {
	t.Helper()
	ws = t.TempDir()
	cfg, stop := noteModel(ws)
	t.Cleanup(stop)
	o.Config = cfg
	return newEngine(t, o), ws
}

func noteWritten(t *testing.T, ws string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(ws, "note.txt"))
	return err == nil
}

// Without Approvals or Approve no run waits: the write fails its agent call, and when
// that stops the run the error matches *ApprovalError (naming the tool, the call and
// what to set) besides the *ScriptError the script raised. A script that goes on
// completes.
func TestApprovalErrorWithoutAnAnswerer(t *testing.T) {
	eng, ws := noteEngine(t, luft.Options{})
	_, err := eng.Run(t.Context(), luft.Script{Source: `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}}
  assert(r.ok, r.error)
end`})
	var ae *luft.ApprovalError
	if !errors.As(err, &ae) {
		t.Fatalf("Run: %v; want an *ApprovalError", err)
	}
	if ae.Tool != "write_file" || ae.CallKey == "" || ae.RunID == "" {
		t.Errorf("ApprovalError %+v", ae)
	}
	for _, want := range []string{"write_file is destructive", `[tools] approval = "allow"`, "Options.Approvals"} {
		if !strings.Contains(ae.Error(), want) {
			t.Errorf("ApprovalError %q lacks %q", ae.Error(), want)
		}
	}
	var se *luft.ScriptError
	if !errors.As(err, &se) || se.Kind != "runtime" || !strings.Contains(err.Error(), "needs approval") {
		t.Errorf("the run's own error is lost: %v", err)
	}
	if noteWritten(t, ws) {
		t.Error("the write ran without approval")
	}

	res, err := eng.Run(t.Context(), luft.Script{Source: noteScript})
	if err != nil || res.Status != luft.StatusCompleted || res.Agents.Failed != 1 {
		t.Fatalf("a script that goes on: %+v, %v", res, err)
	}
	var needed string
	for ev, err := range eng.Events(t.Context(), res.RunID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == luft.EventAgentDone {
			needed = ev.Field("approval_needed")
		}
	}
	if needed != "write_file" {
		t.Errorf("agent_done approval_needed = %q", needed)
	}
}

// Options.Approve decides each call; an error or a panic of it declines (nothing runs
// without a yes, and the run does not hang). Several calls waiting at once are each
// asked.
func TestApproveFunc(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    func() (bool, error)
		wantWrite bool
	}{
		{"yes", func() (bool, error) { return true, nil }, true},
		{"no", func() (bool, error) { return false, nil }, false},
		{"error", func() (bool, error) { return true, errors.New("the UI went away") }, false},
		{"panic", func() (bool, error) { panic("boom") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var asked []luft.Approval
			eng, ws := noteEngine(t, luft.Options{Approve: func(ctx context.Context, a luft.Approval) (bool, error) {
				mu.Lock()
				asked = append(asked, a)
				mu.Unlock()
				return tc.answer()
			}})
			res, err := eng.Run(t.Context(), luft.Script{Source: `function main()
  local rs = parallel({"keep a note", "keep a note too"}, function(p) return agent{prompt = p, tools = {"write_file"}} end)
  report(rs[1].text .. "|" .. rs[2].text)
end`})
			if err != nil || res.Status != luft.StatusCompleted || res.Report != "noted|noted" {
				t.Fatalf("run: %+v, %v", res, err)
			}
			if len(asked) != 2 || asked[0].Tool != "write_file" || asked[0].ID == asked[1].ID ||
				asked[0].Status != luft.ApprovalPending || asked[0].RunID != res.RunID || !strings.Contains(asked[0].Arguments, "note.txt") {
				t.Fatalf("asked %+v", asked)
			}
			if noteWritten(t, ws) != tc.wantWrite {
				t.Fatalf("note written = %v, want %v", !tc.wantWrite, tc.wantWrite)
			}
		})
	}
}

// With Approvals a run parks: Status shows it awaiting_approval with the pending call,
// List finds it, Engine.Approve answers (once), and its errors name what is wrong.
func TestEngineApprove(t *testing.T) {
	eng, ws := noteEngine(t, luft.Options{Approvals: true})
	ctx := t.Context()
	run, err := eng.Start(ctx, luft.Script{Source: noteScript})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	evs := run.Events()
	for ev := range evs {
		if ev.Type == luft.EventApprovalRequested {
			id = ev.Field("approval_id")
			break
		}
	}
	info, err := eng.Status(ctx, run.ID())
	if err != nil || info.Status != luft.StatusAwaitingApproval || len(info.PendingApprovals) != 1 ||
		info.PendingApprovals[0].ID != id || info.PendingApprovals[0].Tool != "write_file" {
		t.Fatalf("Status: %+v, %v", info, err)
	}
	runs, err := eng.List(ctx, luft.ListOptions{Status: luft.StatusAwaitingApproval})
	if err != nil || len(runs) != 1 || runs[0].ID != run.ID() {
		t.Fatalf("List awaiting_approval: %+v, %v", runs, err)
	}

	var nf *luft.NotFoundError
	if _, err := eng.Approve(ctx, "no-such-run", "", true); !errors.As(err, &nf) {
		t.Errorf("unknown run: %v", err)
	}
	if _, err := eng.Approve(ctx, "", id, true); err == nil || !strings.Contains(err.Error(), "run id is empty") {
		t.Errorf("empty run id: %v", err)
	}
	if _, err := eng.Approve(ctx, run.ID(), "ap-nope", true); !errors.Is(err, luft.ErrNoApproval) || !strings.Contains(err.Error(), id) {
		t.Errorf("unknown approval: %v", err)
	}
	if _, err := eng.Approve(ctx, run.ID(), strings.Repeat("x", 1<<20), true); !errors.Is(err, luft.ErrNoApproval) || len(err.Error()) > 300 {
		t.Errorf("huge approval id: %.300v", err)
	}
	a, err := eng.Approve(ctx, run.ID()[:13], "", true)
	if err != nil || a.ID != id || a.Status != luft.ApprovalAllowed || a.DecidedAt.IsZero() {
		t.Fatalf("Approve: %+v, %v", a, err)
	}
	if _, err := eng.Approve(ctx, run.ID(), id, false); !errors.Is(err, luft.ErrApprovalDecided) {
		t.Errorf("answered twice: %v", err)
	}
	for range evs {
	}
	res, err := run.Wait()
	if err != nil || res.Report != "noted" || !noteWritten(t, ws) {
		t.Fatalf("after the yes: %+v, %v, written %v", res, err, noteWritten(t, ws))
	}
	if _, err := eng.Approve(ctx, run.ID(), "", true); !errors.Is(err, luft.ErrNoApproval) {
		t.Errorf("a finished run: %v", err)
	}
}

// A question still open when the Engine closes ends with it: Approve's ctx is done, Close
// returns, and the run, suspended, asks again (the same approval) when resumed.
func TestApproveAcrossClose(t *testing.T) {
	ws := t.TempDir()
	cfg, stop := noteModel(ws)
	t.Cleanup(stop)
	dir := t.TempDir()
	asked := make(chan luft.Approval, 1)
	eng, err := luft.New(luft.Options{StateDir: dir, Config: cfg, Getenv: func(string) string { return "" },
		Approve: func(ctx context.Context, a luft.Approval) (bool, error) {
			asked <- a
			<-ctx.Done()
			return true, ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := eng.Start(t.Context(), luft.Script{Source: noteScript})
	if err != nil {
		t.Fatal(err)
	}
	first := <-asked
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if res, err := run.Wait(); !errors.Is(err, luft.ErrShutdown) || res.Status != luft.StatusSuspended {
		t.Fatalf("after Close: %+v, %v", res, err)
	}
	if noteWritten(t, ws) {
		t.Fatal("the write ran without an answer")
	}

	eng = newEngine(t, luft.Options{StateDir: dir, Config: cfg, Approve: func(ctx context.Context, a luft.Approval) (bool, error) {
		asked <- a
		return true, nil
	}})
	again, err := eng.Resume(t.Context(), run.ID())
	if err != nil {
		t.Fatal(err)
	}
	res, err := again.Wait()
	if second := <-asked; second.ID != first.ID {
		t.Errorf("asked again as %s, first as %s", second.ID, first.ID)
	}
	if err != nil || res.Report != "noted" || !noteWritten(t, ws) {
		t.Fatalf("resumed: %+v, %v", res, err)
	}
}
