package storage

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/luft-run/luft/event"
)

// A run record (RecordRun) is one transaction: the run created, its events appended and
// its row updated together, and nothing of it stored when a part fails.
func testRecordRun(t *testing.T, k kind) {
	ctx := t.Context()
	s := k.new(t)
	spec := []byte(`{"proxy":{"caller":"c"}}`)
	before := s.Stats()
	got, err := s.RecordRun(ctx, "r1", RunRecord{
		Create: &Run{ID: "r1", Workflow: "proxy:c", Spec: spec},
		Events: []event.Event{event.New(event.RunStarted, map[string]any{"workflow": "proxy:c"}),
			event.New(event.AgentStarted, map[string]any{"call_key": "turn/1"})},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 || got[1].RunID != "r1" || got[1].TS.IsZero() {
		t.Fatalf("stamped events: %+v", got)
	}
	if d := s.Stats().Ops - before.Ops; d != 1 {
		t.Errorf("a run record took %d write ops, want 1", d)
	}
	r, err := s.GetRun(ctx, "r1")
	if err != nil || r.Workflow != "proxy:c" || r.Status != StatusRunning || string(r.Spec) != string(spec) {
		t.Fatalf("the created run: %+v %v", r, err)
	}

	// Events and the row's totals of an existing run.
	cost, usage, counts := 0.25, Usage{Input: 10, Output: 5}, AgentCounts{OK: 1}
	got, err = s.RecordRun(ctx, "r1", RunRecord{Events: []event.Event{event.New(event.AgentDone, map[string]any{"call_key": "turn/1"})},
		Update: RunUpdate{Usage: &usage, Cost: &cost, Agents: &counts}})
	if err != nil || len(got) != 1 || got[0].Seq != 3 {
		t.Fatalf("record of an existing run: %+v %v", got, err)
	}
	if r, _ := s.GetRun(ctx, "r1"); r.Usage != usage || r.Cost != cost || r.Agents != counts {
		t.Fatalf("the row after the record: %+v", r)
	}

	// A failing part stores nothing of its record.
	changed := 7
	_, err = s.RecordRun(ctx, "r1", RunRecord{Events: []event.Event{event.New(event.Log, nil)},
		Update: RunUpdate{Cost: &cost, IfAttempt: &changed}})
	if !errors.Is(err, ErrRunChanged) {
		t.Fatalf("a record whose update is refused: %v, want ErrRunChanged", err)
	}
	_, err = s.RecordRun(ctx, "r1", RunRecord{Create: &Run{ID: "r1"}, Events: []event.Event{event.New(event.Log, nil)}})
	if !errors.Is(err, ErrRunExists) {
		t.Fatalf("a record creating a stored run: %v, want ErrRunExists", err)
	}
	if evs, err := s.Events(ctx, "r1", 0, 0); err != nil || len(evs) != 3 {
		t.Fatalf("the events of refused records were stored: %d events, %v", len(evs), err)
	}
	_, err = s.RecordRun(ctx, "nope", RunRecord{Events: []event.Event{event.New(event.Log, nil)}})
	if !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("a record of an unknown run: %v, want ErrRunNotFound", err)
	}
	if _, err := s.RecordRun(ctx, "r2", RunRecord{Create: &Run{ID: "r3"}}); err == nil {
		t.Fatal("a record creating another run than it names was accepted")
	}
	if _, err := s.GetRun(ctx, "r3"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("r3 was created: %v", err)
	}
	if _, err := s.RecordRun(ctx, "r1", RunRecord{Events: []event.Event{{}}}); err == nil {
		t.Fatal("an event without a type was accepted")
	}

	// Many runs' records at once share commits, and each run's seqs stay gap-free.
	const runs, each = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, runs*each)
	for i := range runs {
		id := fmt.Sprintf("c%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.RecordRun(ctx, id, RunRecord{Create: &Run{ID: id}}); err != nil {
				errs <- err
				return
			}
			for j := range each {
				n := AgentCounts{OK: j + 1}
				if _, err := s.RecordRun(ctx, id, RunRecord{Events: []event.Event{event.New(event.AgentStarted, nil),
					event.New(event.AgentDone, nil)}, Update: RunUpdate{Agents: &n}}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range runs {
		id := fmt.Sprintf("c%d", i)
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil || len(evs) != 2*each {
			t.Fatalf("%s: %d events, %v", id, len(evs), err)
		}
		for j, ev := range evs {
			if ev.Seq != int64(j+1) {
				t.Fatalf("%s: event %d has seq %d", id, j, ev.Seq)
			}
		}
		if r, _ := s.GetRun(ctx, id); r.Agents.OK != each {
			t.Fatalf("%s: agents %+v, want %d ok", id, r.Agents, each)
		}
	}
}
