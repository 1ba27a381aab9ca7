package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

// benchResult is a ~100-byte agent result, the size go-practices §4 measured with.
var benchResult = json.RawMessage(`{"text":"The scan found three issues in the parser; see findings.","findings":[1,2,3],"ok":true}`)

// BenchmarkJournalFinish20k measures a 20,000-way fan-out finishing at once: each
// iteration makes 20,000 concurrent JournalFinish calls and waits for all of them.
func BenchmarkJournalFinish20k(b *testing.B) {
	const calls = 20_000
	ctx := context.Background()
	s := openTest(b, b.TempDir(), config{now: time.Now})
	mustCreate(b, s, Run{ID: "r"})
	before := s.Stats()
	start := time.Now()
	iter := 0
	for b.Loop() {
		var wg sync.WaitGroup
		for k := range calls {
			wg.Go(func() {
				e := Entry{RunID: "r", CallKey: fmt.Sprintf("main/%d/par[%d]/1", iter, k), Kind: "agent",
					InputHash: "4f1c0e0b5d", Status: EntryCompleted, Result: benchResult,
					Usage: Usage{Input: 1200, Output: 300}, Cost: 0.002, Attempts: 1}
				if _, err := s.JournalFinish(ctx, e); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		iter++
	}
	elapsed := time.Since(start)
	st := s.Stats()
	txs := st.Transactions - before.Transactions
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(iter*calls), "ns/call")
	b.ReportMetric(float64(txs)/float64(iter), "txs/op")
	b.ReportMetric(float64(iter*calls)/float64(txs), "calls/tx")
}

// BenchmarkJournalFinishSerial is the other extreme: one caller, so every call is its own
// transaction (no batching possible).
func BenchmarkJournalFinishSerial(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, b.TempDir(), config{now: time.Now})
	mustCreate(b, s, Run{ID: "r"})
	i := 0
	for b.Loop() {
		e := Entry{RunID: "r", CallKey: fmt.Sprintf("main/%d", i), Status: EntryCompleted, Result: benchResult}
		if _, err := s.JournalFinish(ctx, e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkAppendSerial is one event per call from one goroutine, as a run's event bus
// emits today.
func BenchmarkAppendSerial(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, b.TempDir(), config{now: time.Now})
	mustCreate(b, s, Run{ID: "r"})
	for b.Loop() {
		if _, err := s.Append(ctx, "r", event.New(event.AgentDone, map[string]any{"call_key": "main/1", "status": "ok", "tokens": 1500})); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEventsRead20k reads back 20,000 events.
func BenchmarkEventsRead20k(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, b.TempDir(), config{now: time.Now})
	mustCreate(b, s, Run{ID: "r"})
	evs := make([]event.Event, 1000)
	for i := range evs {
		evs[i] = event.New(event.AgentDone, map[string]any{"call_key": fmt.Sprintf("main/%d", i), "status": "ok", "tokens": 1500})
	}
	for range 20 {
		if _, err := s.Append(ctx, "r", evs...); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		got, err := s.Events(ctx, "r", 0, 0)
		if err != nil || len(got) != 20_000 {
			b.Fatal(len(got), err)
		}
	}
}
