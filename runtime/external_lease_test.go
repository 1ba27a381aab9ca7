package runtime

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// On a node with a lease an external run is held under it: its row records the lease and
// is marked external, Held returns it while its door has it open, and once another node
// ended it (EndTakenOver: a claim on its attempt) the door's records of it are fenced out.
// A second end of the same attempt loses the claim.
func TestExternalRunHeldUnderTheLeaseAndEndedByAnotherNode(t *testing.T) {
	dir := t.TempDir()
	a, st := leaseEnv(t, dir, &scripted{}, &fakeLease{})
	b, _ := leaseEnv(t, dir, &scripted{}, &fakeLease{})
	b.opts.Node = "host-b"
	id := uuid.Must(uuid.NewV7()).String()
	x, err := a.OpenExternal(ExternalSpec{ID: id, Workflow: "proxy:test", Spec: json.RawMessage(`{"proxy":{"caller":"test"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if held := a.Held(); len(held) != 0 {
		t.Errorf("held before its first record %v, want none (it has no row yet)", held)
	}
	turn := []event.Event{event.New(event.AgentStarted, map[string]any{"call_key": "turn-1"})}
	if err := x.Record(t.Context(), turn, ExternalUpdate{Spec: json.RawMessage(`{"proxy":{"caller":"test"},"idle":true}`)}); err != nil {
		t.Fatal(err)
	}
	row := record(t, st, id).row
	if row.LeaseUntil.IsZero() || row.Node != "host-a" || !IsExternal(row) {
		t.Fatalf("the external run's row: node %q lease %v spec %s, want host-a's, under its lease, marked external", row.Node, row.LeaseUntil, row.Spec)
	}
	if held := a.Held(); !slices.Contains(held, storage.Lease{RunID: id, Attempt: 1}) {
		t.Errorf("held %v, want the external run at attempt 1", held)
	}

	reason := "ended: the proxy that hosted it died"
	if err := b.EndTakenOver(t.Context(), row, reason); err != nil {
		t.Fatal(err)
	}
	ended := record(t, st, id)
	if ended.row.Status != storage.StatusCompleted || ended.row.Error != reason || ended.row.Attempt != 2 || ended.row.Node != "host-b" {
		t.Fatalf("ended: status %s error %q attempt %d node %s", ended.row.Status, ended.row.Error, ended.row.Attempt, ended.row.Node)
	}
	if err := x.Record(t.Context(), turn, ExternalUpdate{}); !errors.Is(err, storage.ErrOwnershipLost) {
		t.Errorf("a record of the door after the end: %v, want ErrOwnershipLost", err)
	}
	if err := x.Close(t.Context(), ExternalEnd{Status: StatusCompleted}); !errors.Is(err, storage.ErrOwnershipLost) {
		t.Errorf("the door's close after the end: %v, want ErrOwnershipLost", err)
	}
	if after := record(t, st, id); after.events != ended.events || after.row.Status != storage.StatusCompleted || after.row.Error != reason {
		t.Errorf("the door wrote after the end: %d events → %d, status %s error %q", ended.events, after.events, after.row.Status, after.row.Error)
	}
	if held := a.Held(); len(held) != 0 {
		t.Errorf("held after the door closed %v, want none", held)
	}
	if err := b.EndTakenOver(t.Context(), row, reason); !errors.Is(err, ErrStillRunning) {
		t.Errorf("a second end of the same attempt: %v, want ErrStillRunning", err)
	}
}

// Without a lease (SQLite, a single node) an external run is held by its process as
// before: no lease on its row, none held. A run that is not external is never ended as one.
func TestExternalRunWithoutLeaseAndEndOfAScriptRun(t *testing.T) {
	dir := t.TempDir()
	svc, st := leaseEnv(t, dir, &scripted{}, nil)
	svc.opts.Lease = nil
	id := uuid.Must(uuid.NewV7()).String()
	x, err := svc.OpenExternal(ExternalSpec{ID: id, Workflow: "proxy:test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Record(t.Context(), nil, ExternalUpdate{}); err != nil {
		t.Fatal(err)
	}
	row := record(t, st, id).row
	if !row.LeaseUntil.IsZero() || len(svc.Held()) != 0 {
		t.Errorf("without a lease: row lease %v, held %v; want none", row.LeaseUntil, svc.Held())
	}
	row.Spec = json.RawMessage(`{"path":"wf.lua"}`)
	if err := svc.EndTakenOver(t.Context(), row, "x"); err == nil || !strings.Contains(err.Error(), "not an external run") {
		t.Errorf("EndTakenOver of a script's run: %v, want a refusal", err)
	}
}

// A run is external by its marker, or, recorded before the marker, by the proxy's spec; a
// workflow's spec is not.
func TestIsExternal(t *testing.T) {
	for _, c := range []struct {
		spec string
		want bool
	}{
		{`{"external":true}`, true},
		{`{"proxy":{"caller":"c","model":"m","run":""}}`, true},
		{`{"proxy":{"caller":"c"},"idle":true}`, true},
		{`{"path":"wf.lua","args":{}}`, false},
		{`{"proxy":"x"}`, false},
		{`not json`, false},
		{``, false},
	} {
		if got := IsExternal(storage.Run{Spec: json.RawMessage(c.spec)}); got != c.want {
			t.Errorf("IsExternal(%s) = %v, want %v", c.spec, got, c.want)
		}
	}
}
