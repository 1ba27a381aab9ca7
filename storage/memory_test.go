package storage

import (
	"context"
	"testing"

	"github.com/luft-run/luft/event"
)

func TestMemoryAppendAndRead(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	if _, err := m.Events(ctx, "r1", 0, 0); err == nil {
		t.Fatal("reading an unknown run must fail")
	}
	got, err := m.Append(ctx, "r1", event.New(event.Log, nil), event.New(event.Log, nil), event.New(event.RunDone, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got[2].Seq != 3 || got[0].RunID != "r1" {
		t.Fatalf("stamping: %+v", got)
	}
	evs, _ := m.Events(ctx, "r1", 1, 1)
	if len(evs) != 1 || evs[0].Seq != 2 {
		t.Fatalf("since/limit: %+v", evs)
	}
	evs, _ = m.Events(ctx, "r1", 3, 0)
	if len(evs) != 0 {
		t.Fatalf("past the end: %+v", evs)
	}
}
