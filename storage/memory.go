package storage

import (
	"context"
	"fmt"
	"sync"

	"github.com/luft-run/luft/event"
)

// EventLog is an append-only, ordered log of events per run.
type EventLog interface {
	// Append stamps each event with the run's next sequence numbers and stores them, in
	// order. It returns the stamped events.
	Append(ctx context.Context, runID string, evs ...event.Event) ([]event.Event, error)
	// Events returns up to limit events of the run with seq > since (limit <= 0: all).
	Events(ctx context.Context, runID string, since int64, limit int) ([]event.Event, error)
}

// Memory is an EventLog held in memory. It is safe for concurrent use.
type Memory struct {
	mu   sync.Mutex
	runs map[string][]event.Event
}

// NewMemory returns an empty in-memory log.
func NewMemory() *Memory { return &Memory{runs: map[string][]event.Event{}} }

// Append implements EventLog.
func (m *Memory) Append(_ context.Context, runID string, evs ...event.Event) ([]event.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	log := m.runs[runID]
	for i := range evs {
		evs[i].RunID = runID
		evs[i].Seq = int64(len(log)) + 1
		log = append(log, evs[i])
	}
	m.runs[runID] = log
	return evs, nil
}

// Events implements EventLog.
func (m *Memory) Events(_ context.Context, runID string, since int64, limit int) ([]event.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	log, ok := m.runs[runID]
	if !ok {
		return nil, fmt.Errorf("events of run %s: no such run", runID)
	}
	if since < 0 {
		since = 0
	}
	if since >= int64(len(log)) {
		return nil, nil
	}
	out := log[since:]
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return append([]event.Event(nil), out...), nil
}
