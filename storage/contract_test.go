package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/luft-run/luft/event"

	"github.com/luft-run/luft/internal/pgtest"
)

// kind is a database the store runs on. Every test in contract runs on each kind, as
// TestStore/<kind>/<test>: the two stores answer every call alike.
type kind struct {
	name string
	// place returns a fresh, empty place for a store: a state dir, or a database's URL.
	place func(t testing.TB) string
	// openErr opens a store on place.
	openErr func(ctx context.Context, place string, cfg config) (*sqlStore, error)
}

var kinds = []kind{
	{name: "sqlite",
		place: func(t testing.TB) string { return t.TempDir() },
		openErr: func(ctx context.Context, dir string, cfg config) (*sqlStore, error) {
			s, err := open(ctx, dir, cfg)
			if err != nil {
				return nil, err
			}
			return s.sqlStore, nil
		}},
	{name: "postgres",
		place: pgtest.URL,
		openErr: func(ctx context.Context, url string, cfg config) (*sqlStore, error) {
			return openPG(ctx, url, "", cfg)
		}},
}

func kindNamed(name string) kind {
	for _, k := range kinds {
		if k.name == name {
			return k
		}
	}
	panic("no store kind " + name)
}

// open opens a store on place with cfg (a fake clock when cfg.now is nil) and closes it
// when the test ends.
func (k kind) open(t testing.TB, place string, cfg config) *sqlStore {
	t.Helper()
	if cfg.now == nil {
		cfg.now = newClock().now
	}
	s, err := k.openErr(context.Background(), place, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// new opens a store on a fresh place.
func (k kind) new(t testing.TB) *sqlStore { return k.open(t, k.place(t), config{}) }

var contract = []struct {
	name string
	test func(t *testing.T, k kind)
}{
	{"RunsLifecycle", testRunsLifecycle},
	{"ResolveRun", testResolveRun},
	{"ListAndLatestResumable", testListAndLatestResumable},
	{"EventsAppendAndRead", testEventsAppendAndRead},
	{"AppendSeqUnderConcurrentAppenders", testAppendSeqUnderConcurrentAppenders},
	{"PhasesProjection", testPhasesProjection},
	{"CancelRequest", testCancelRequest},
	{"Files", testFiles},
	{"Journal", testJournal},
	{"CompletedSeqUnderConcurrentFinishes", testCompletedSeqUnderConcurrentFinishes},
	{"Approvals", testApprovals},
	{"ToolCalls", testToolCalls},
	{"DeleteFinished", testDeleteFinished},
	{"GroupCommitBatchesQueuedWrites", testGroupCommitBatchesQueuedWrites},
	{"GroupCommitBatchesConcurrentWrites", testGroupCommitBatchesConcurrentWrites},
	{"FailingOpDoesNotFailItsBatch", testFailingOpDoesNotFailItsBatch},
	{"CancelledWriteIsNotApplied", testCancelledWriteIsNotApplied},
	{"CloseCommitsQueuedWritesThenRefuses", testCloseCommitsQueuedWritesThenRefuses},
	{"AppendAsyncKeepsCallOrderAndBatches", testAppendAsyncKeepsCallOrderAndBatches},
	{"RecordRun", testRecordRun},
	{"TwoStoresOnOnePlace", testTwoStoresOnOnePlace},
	{"TwoProcesses", testTwoProcesses},
	{"ConcurrentOpenOfAFreshPlace", testConcurrentOpenOfAFreshPlace},
	{"ProcessesMigrateAFreshPlaceOnce", testProcessesMigrateAFreshPlaceOnce},
	{"PayloadsRoundTripByteForByte", testPayloadsRoundTripByteForByte},
	{"HostileText", testHostileText},
	{"HostileTextIsStored", testHostileTextIsStored},
	{"FencedWritesAfterATakeover", testFencedWritesAfterATakeover},
	{"NoStaleWriteLandsAfterAClaim", testNoStaleWriteLandsAfterAClaim},
	{"HeartbeatRenewsHeldLeases", testHeartbeatRenewsHeldLeases},
	{"ClaimableOrder", testClaimableOrder},
	{"ClaimOfALapsedLease", testClaimOfALapsedLease},
	{"RunWorkspace", testRunWorkspace},
}

// TestStore runs the contract on SQLite and on PostgreSQL (skipped when LUFT_TEST_POSTGRES
// is unset). Each PostgreSQL test has its own database, so those run in parallel.
func TestStore(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, c := range contract {
				t.Run(c.name, func(t *testing.T) {
					if k.name == "postgres" {
						t.Parallel()
					}
					c.test(t, k)
				})
			}
		})
	}
}

// What a caller stores comes back byte for byte: JSON with odd spacing, key order,
// escapes, non-ASCII text (and, since encoding/json lets them pass, invalid UTF-8 bytes in
// a string), and tool outputs and errors holding NUL bytes.
func testPayloadsRoundTripByteForByte(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	odd := []string{
		`{ "z" :1,"a":[ 1 ,2 ],  "ü":"\u00fc é 😀 \u0000 \" \\","n": 1.0e2 ,"m":{}}`,
		"[\n\t\"x\" ,\r\n 3 ]",
		`"plain"`,
		` null `,
		"{\"bad\":\"\xff\xfe\"}",
		`-0.000000000000000000001`,
	}
	for i, js := range odd {
		if !json.Valid([]byte(js)) {
			t.Fatalf("case %d is not valid JSON: %q", i, js)
		}
		id := fmt.Sprintf("run-%d", i)
		raw := json.RawMessage(js)
		mustCreate(t, s, Run{ID: id, Args: raw, Spec: raw, Report: raw, HasReport: true, Error: "err\x00\xff" + js})
		if _, err := s.JournalFinish(ctx, Entry{RunID: id, CallKey: "main/1", Status: EntryCompleted, Result: raw,
			Error: "e\x00" + js}); err != nil {
			t.Fatal(err)
		}
		tc := ToolCall{RunID: id, CallKey: "main/1", Conversation: "c", Turn: 1, ID: "t1", Name: "run_command",
			Output: "out\x00\xff\n" + js}
		if err := s.ToolDone(ctx, tc); err != nil {
			t.Fatal(err)
		}
		a, err := s.AskApproval(ctx, Approval{RunID: id, ID: "a1", CallKey: "main/1", Conversation: "c", Turn: 2,
			ToolCallID: "t2", Tool: "write_file", Arguments: js})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Args) != js || string(r.Spec) != js || string(r.Report) != js || r.Error != "err\x00\xff"+js {
			t.Errorf("case %d: run came back as args %q spec %q report %q error %q", i, r.Args, r.Spec, r.Report, r.Error)
		}
		j, err := s.Journal(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(j) != 1 || string(j[0].Result) != js || j[0].Error != "e\x00"+js {
			t.Errorf("case %d: journal came back as %+v", i, j)
		}
		tcs, err := s.ToolCalls(ctx, id, "main/1")
		if err != nil {
			t.Fatal(err)
		}
		if len(tcs) != 1 || tcs[0].Output != tc.Output {
			t.Errorf("case %d: tool calls came back as %+v", i, tcs)
		}
		if as, err := s.Approvals(ctx, ApprovalFilter{RunID: id}); err != nil || len(as) != 1 || as[0].Arguments != js || a.Arguments != js {
			t.Errorf("case %d: approvals came back as %+v (%v)", i, as, err)
		}
	}

	// Events are stored as the sorted-key JSON of their fields: what is read back
	// marshals to exactly what was appended.
	mustCreate(t, s, Run{ID: "ev"})
	data := map[string]any{"zeta": "ü 😀 \u0000 <>&", "alpha": []any{1.5, "x", nil, true}, "mid": map[string]any{"b": 1, "a": 2}}
	in := event.New(event.Log, data)
	stamped, err := s.Append(ctx, "ev", in)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, "ev", 0, 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("events: %v %v", evs, err)
	}
	want, _ := json.Marshal(stamped[0])
	got, _ := json.Marshal(evs[0])
	if !bytes.Equal(got, want) {
		t.Fatalf("event came back as\n%s\nwant\n%s", got, want)
	}
}

// Ids no store can hold (a NUL byte, invalid UTF-8: PostgreSQL's text refuses both) are
// runs that do not exist, not failed queries.
func testHostileText(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	mustCreate(t, s, Run{ID: "0198a1b2-0000-7000-8000-000000000001"})
	for _, id := range []string{"\x00", "0198\x00", "\xff", "0198\xff\xfe", "0198a1b2-0000-7000-8000-000000000001\x00"} {
		if _, err := s.GetRun(ctx, id); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("GetRun(%q): %v, want ErrRunNotFound", id, err)
		}
		if _, err := s.ResolveRun(ctx, id); !errors.Is(err, ErrRunNotFound) {
			t.Errorf("ResolveRun(%q): %v, want ErrRunNotFound", id, err)
		}
	}
}

// Text a script or a model chooses — a workflow path, phase labels, script positions,
// file paths, tool names and tool call ids — is stored and read back byte for byte, NUL
// bytes and invalid UTF-8 included, on both stores.
func testHostileTextIsStored(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	odd := "a\x00b\xff\xfe é"
	mustCreate(t, s, Run{ID: "r", Workflow: "flows/" + odd + ".lua"})
	if _, err := s.Append(ctx, "r",
		event.New(event.PhaseStarted, map[string]any{"phase_id": 1, "label": odd, "description": odd}),
		event.New(event.PhaseDone, map[string]any{"phase_id": 1, "label": odd, "ok": 1})); err != nil {
		t.Fatal(err)
	}
	if err := s.JournalScheduled(ctx, Entry{RunID: "r", CallKey: "main/1", WherePos: odd + ":3"}); err != nil {
		t.Fatal(err)
	}
	tc := ToolCall{RunID: "r", CallKey: "main/1", Conversation: "c", Turn: 1, ID: odd, Name: odd, Output: odd}
	if err := s.ToolDone(ctx, tc); err != nil {
		t.Fatal(err)
	}
	ask := Approval{RunID: "r", ID: "a1", CallKey: "main/1", Conversation: "c", Turn: 1, ToolCallID: odd, Tool: odd, Arguments: odd}
	if _, err := s.AskApproval(ctx, ask); err != nil {
		t.Fatal(err)
	}
	again, err := s.AskApproval(ctx, Approval{RunID: "r", ID: "a2", CallKey: "main/1", Conversation: "c", Turn: 1, ToolCallID: odd, Tool: odd})
	if err != nil || again.ID != "a1" {
		t.Fatalf("the same tool call asked again: %+v %v, want a1 returned", again, err)
	}
	if _, err := s.SaveFile(ctx, "r", odd+".lua", []byte(odd)); err != nil {
		t.Fatal(err)
	}

	r, err := s.GetRun(ctx, "r")
	if err != nil || r.Workflow != "flows/"+odd+".lua" {
		t.Errorf("workflow %q (%v)", r.Workflow, err)
	}
	if ps, err := s.Phases(ctx, "r"); err != nil || len(ps) != 1 || ps[0].Label != odd || ps[0].Description != odd {
		t.Errorf("phases %+v (%v)", ps, err)
	}
	if j, err := s.Journal(ctx, "r"); err != nil || len(j) != 1 || j[0].WherePos != odd+":3" {
		t.Errorf("journal %+v (%v)", j, err)
	}
	if tcs, err := s.ToolCalls(ctx, "r", "main/1"); err != nil || len(tcs) != 1 || tcs[0].ID != odd || tcs[0].Name != odd || tcs[0].Output != odd {
		t.Errorf("tool calls %+v (%v)", tcs, err)
	}
	if as, err := s.Approvals(ctx, ApprovalFilter{RunID: "r"}); err != nil || len(as) != 1 || as[0].ToolCallID != odd || as[0].Tool != odd {
		t.Errorf("approvals %+v (%v)", as, err)
	}
	if fs, err := s.Files(ctx, "r"); err != nil || len(fs) != 1 || fs[0].Path != odd+".lua" {
		t.Errorf("files %+v (%v)", fs, err)
	}
}
