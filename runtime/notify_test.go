package runtime

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/storage"
)

// pollOnly is a store that does not notify: the runtime falls back to polling.
type pollOnly struct{ storage.Store }

// noticeTrials is how many cancels and how many approval answers each mode measures.
const noticeTrials = 7

// A cancel and an approval answer given through another store (another process, another
// node) on one PostgreSQL database reach the run's owner at once with LISTEN/NOTIFY, and
// within the poll without it. The figures (median and spread) are what docs/scale-out.md
// quotes: go test ./runtime -run TestNoticesReachTheOwner -v.
func TestNoticesReachTheOwner(t *testing.T) {
	url := pgtest.URL(t)
	open := func() *storage.Postgres {
		st, err := storage.OpenPostgres(t.Context(), url, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	ownerSt, otherSt := open(), open()
	rules := []testkit.ToolRule{
		{Match: "keep a note", Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}}, Reply: "noted"},
		{Match: "", Reply: "plain answer"},
	}
	te := newToolEngine(t, rules)
	dir, ws := t.TempDir(), t.TempDir()
	b := askBackend(t, te.url, ws)
	other, err := New(Options{Store: otherSt, StateDir: dir, Backends: adapters.NewRegistry("fake", b)})
	if err != nil {
		t.Fatal(err)
	}
	approvals := writeScript(t, dir, "ask.lua", fmt.Sprintf(`function main()
  local n = 0
  for i = 1, %d do if agent{prompt = "keep a note " .. i, tools = {"write_file"}}.ok then n = n + 1 end end
  report(n)
end`, noticeTrials))
	long := writeScript(t, dir, "long.lua", `function main()
  for i = 1, 1000000 do agent{prompt = "step " .. i} end
end`)
	median := map[string]map[string]time.Duration{}
	for _, mode := range []string{"notify", "poll"} {
		var st storage.Store = ownerSt
		if mode == "poll" {
			st = pollOnly{ownerSt}
		}
		// The owner holds its runs under a lease, as a node does: the other store's
		// Service then sees them driven elsewhere and asks by the store.
		owner, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", b), AskApprovals: true,
			Node: "owner-" + mode, Lease: &fakeLease{}})
		if err != nil {
			t.Fatal(err)
		}
		median[mode] = map[string]time.Duration{}

		// Approvals: allowed and denied in turn, each timed from the answer's commit to
		// the owner's approval_decided.
		r, err := owner.Start(t.Context(), Spec{Path: approvals})
		if err != nil {
			t.Fatal(err)
		}
		if mode == "notify" {
			waitFor(t, 10*time.Second, "the owner's store to listen", ownerSt.Listening)
		}
		evs := r.Subscribe(t.Context(), 0)
		var took []time.Duration
		for i := range noticeTrials {
			for ev := range evs {
				if ev.Type == event.ApprovalRequested {
					break
				}
			}
			allow := i%2 == 0
			if _, err := other.Approve(t.Context(), r.ID, "", allow); err != nil {
				t.Fatal(err)
			}
			answered := time.Now()
			for ev := range evs {
				if ev.Type == event.ApprovalDecided {
					if ev.Data["allow"] != allow {
						t.Fatalf("approval %d: decided %v, want %v", i, ev.Data, allow)
					}
					break
				}
			}
			took = append(took, time.Since(answered))
		}
		if res := waitRun(t, r); res.Status != StatusCompleted {
			t.Fatalf("%s: the approvals' run ended %s: %v", mode, res.Status, res.Err)
		}
		median[mode]["approve"] = report(t, mode+": approval answer → owner", took)

		// Cancels: each timed from the request's commit to the run's end.
		took = took[:0]
		for range noticeTrials {
			r, err := owner.Start(t.Context(), Spec{Path: long})
			if err != nil {
				t.Fatal(err)
			}
			awaitEvent(t, r, event.AgentDone)
			if _, err := other.Cancel(t.Context(), r.ID); err != nil {
				t.Fatal(err)
			}
			asked := time.Now()
			res := waitRun(t, r)
			took = append(took, time.Since(asked))
			if res.Status != StatusCancelled {
				t.Fatalf("%s: cancelled run ended %s: %v", mode, res.Status, res.Err)
			}
		}
		median[mode]["cancel"] = report(t, mode+": cancel → owner", took)
	}
	for _, what := range []string{"approve", "cancel"} {
		if n := median["notify"][what]; n > time.Second {
			t.Errorf("%s with NOTIFY took %v (median), want well within 1 s", what, n)
		}
		if n, p := median["notify"][what], median["poll"][what]; n >= p {
			t.Errorf("%s: NOTIFY median %v is not below polling's %v", what, n, p)
		}
	}
}

// report logs the median and spread of took and returns the median.
func report(t *testing.T, what string, took []time.Duration) time.Duration {
	t.Helper()
	s := slices.Clone(took)
	slices.Sort(s)
	t.Logf("%s: median %v (%v–%v) over %d", what, s[len(s)/2].Round(100*time.Microsecond),
		s[0].Round(100*time.Microsecond), s[len(s)-1].Round(100*time.Microsecond), len(s))
	return s[len(s)/2]
}

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("no %s within %v", what, within)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// fakeNotifier is a store whose notices the test delivers by hand.
type fakeNotifier struct {
	storage.Store
	mu sync.Mutex
	fn func(storage.Notice)
}

func (f *fakeNotifier) Notices(fn func(storage.Notice)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
	return func() {}
}

func (f *fakeNotifier) Listening() bool { return true }

func (f *fakeNotifier) send(t *testing.T, n storage.Notice) {
	t.Helper()
	f.mu.Lock()
	fn := f.fn
	f.mu.Unlock()
	if fn == nil {
		t.Fatal("the Service did not subscribe to the store's notices when it started a run")
	}
	fn(n)
}

// With a poll too slow to matter (4 h while the listener is up), a notice alone makes
// the owner act: a cancel notice cancels the run whose request is stored (and only
// then), a resync looks at every run, an approval notice wakes the parked call.
func TestNoticesWakeTheRunWithoutPolling(t *testing.T) {
	te := newToolEngine(t, noteRules)
	dir, ws := t.TempDir(), t.TempDir()
	sq, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	st := &fakeNotifier{Store: sq}
	svc, err := New(Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("fake", askBackend(t, te.url, ws)),
		AskApprovals: true, CancelPoll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	long := writeScript(t, dir, "long.lua", `function main()
  for i = 1, 1000000 do agent{prompt = "step " .. i} end
end`)
	for _, kind := range []storage.NoticeKind{storage.NoticeCancel, storage.NoticeResync} {
		r, err := svc.Start(t.Context(), Spec{Path: long})
		if err != nil {
			t.Fatal(err)
		}
		ev := awaitEvent(t, r, event.AgentDone)
		// A notice with no request stored (a stale one) changes nothing.
		st.send(t, storage.Notice{Kind: kind, RunID: r.ID})
		awaitEventAfter(t, r, event.AgentDone, ev.Seq+20)
		if err := sq.RequestCancel(t.Context(), r.ID); err != nil {
			t.Fatal(err)
		}
		st.send(t, storage.Notice{Kind: kind, RunID: r.ID})
		if res := waitRun(t, r); res.Status != StatusCancelled {
			t.Fatalf("%s notice: the run ended %s (%v), want cancelled", kind, res.Status, res.Err)
		}
	}
	r, err := svc.Start(t.Context(), Spec{Path: writeScript(t, dir, "wf.lua", noteFlow)})
	if err != nil {
		t.Fatal(err)
	}
	req := awaitEvent(t, r, event.ApprovalRequested)
	id := req.Data["approval_id"].(string)
	st.send(t, storage.Notice{Kind: storage.NoticeApproval, RunID: "another-run", ApprovalID: id})
	if _, err := sq.DecideApproval(t.Context(), r.ID, id, true); err != nil {
		t.Fatal(err)
	}
	st.send(t, storage.Notice{Kind: storage.NoticeApproval, RunID: r.ID, ApprovalID: id})
	if res := waitRun(t, r); res.Status != StatusCompleted || res.Report != "noted|plain answer" {
		t.Fatalf("after the approval notice: %s %v, report %v", res.Status, res.Err, res.Report)
	}
}
