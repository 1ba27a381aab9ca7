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

// BenchmarkStore runs each benchmark on SQLite and on PostgreSQL (LUFT_TEST_POSTGRES):
//
//	go test ./storage -run '^$' -bench 'BenchmarkStore/.*/JournalFinish' -count 5
func BenchmarkStore(b *testing.B) {
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			for _, c := range []struct {
				name  string
				bench func(*testing.B, kind)
			}{
				{"JournalFinish20k", benchJournalFinish20k},
				{"JournalFinishSerial", benchJournalFinishSerial},
				{"AppendSerial", benchAppendSerial},
				{"EventsRead20k", benchEventsRead20k},
			} {
				b.Run(c.name, func(b *testing.B) { c.bench(b, k) })
			}
		})
	}
}

// benchJournalFinish20k measures a 20,000-way fan-out finishing at once: each
// iteration makes 20,000 concurrent JournalFinish calls and waits for all of them.
func benchJournalFinish20k(b *testing.B, k kind) {
	const calls = 20_000
	ctx := context.Background()
	s := k.open(b, k.place(b), config{now: time.Now})
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
	b.ReportMetric(float64(iter*calls)/elapsed.Seconds(), "finish/s")
	b.ReportMetric(float64(txs)/float64(iter), "txs/op")
	b.ReportMetric(float64(iter*calls)/float64(txs), "calls/tx")
}

// benchJournalFinishSerial is the other extreme: one caller, so every call is its own
// transaction (no batching possible).
func benchJournalFinishSerial(b *testing.B, k kind) {
	ctx := context.Background()
	s := k.open(b, k.place(b), config{now: time.Now})
	mustCreate(b, s, Run{ID: "r"})
	i := 0
	start := time.Now()
	for b.Loop() {
		e := Entry{RunID: "r", CallKey: fmt.Sprintf("main/%d", i), Status: EntryCompleted, Result: benchResult}
		if _, err := s.JournalFinish(ctx, e); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i)/time.Since(start).Seconds(), "finish/s")
}

// benchAppendSerial is one event per call from one goroutine, as a run's event bus
// emits today.
func benchAppendSerial(b *testing.B, k kind) {
	ctx := context.Background()
	s := k.open(b, k.place(b), config{now: time.Now})
	mustCreate(b, s, Run{ID: "r"})
	for b.Loop() {
		if _, err := s.Append(ctx, "r", event.New(event.AgentDone, map[string]any{"call_key": "main/1", "status": "ok", "tokens": 1500})); err != nil {
			b.Fatal(err)
		}
	}
}

// benchEventsRead20k reads back 20,000 events.
func benchEventsRead20k(b *testing.B, k kind) {
	ctx := context.Background()
	s := k.open(b, k.place(b), config{now: time.Now})
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
