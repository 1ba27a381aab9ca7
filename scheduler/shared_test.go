package scheduler

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
)

// memBudget is a SharedBudget in memory, for the gate's tests: a fixed level, no refill.
type memBudget struct {
	mu       sync.Mutex
	level    float64
	limit    float64
	readings []SharedReading
	takes    int
}

func (m *memBudget) Take(_ context.Context, _ string, reqs, toks float64, margin, scoutFor time.Duration) (SharedGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.takes++
	if m.limit < 0 {
		return SharedGrant{ReqLimit: -1, TokLimit: -1}, nil
	}
	if m.limit == 0 {
		return SharedGrant{Scout: true, ScoutUntil: time.Now().Add(scoutFor)}, nil
	}
	got := max(0, min(toks, m.level))
	m.level -= got
	return SharedGrant{Tokens: got, TokLimit: m.limit, TokRate: m.limit / 60}, nil
}

func (m *memBudget) Give(_ context.Context, _ string, _, toks float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.level += toks
	return nil
}

func (m *memBudget) Lower(_ context.Context, _ string, r SharedReading) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readings = append(m.readings, r)
	if r.Silent && m.limit == 0 {
		m.limit = -1
	}
	if r.HasTokLimit && m.limit <= 0 {
		m.limit, m.level = r.TokLimit, r.TokRemaining
	}
	if r.HasTok {
		m.level = min(m.level, r.TokRemaining)
	}
	return nil
}

func rlHeader(limit, remaining int, reset string) http.Header {
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", itoa(limit))
	h.Set("x-ratelimit-remaining-tokens", itoa(remaining))
	h.Set("x-ratelimit-reset-tokens", reset)
	return h
}

func itoa(n int) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

// A node scouts an unknown shared budget with one turn, passes its reading and the
// learned rate on, and then admits only what its grants cover.
func TestSharedGateScoutsThenSpendsGrants(t *testing.T) {
	m := &memBudget{}
	e := NewExecutor(Config{DefaultLane: LaneConfig{Slots: 8}}, nil)
	e.Share(SharedConfig{Budget: m, Key: func(string) string { return "k" }})
	ctx := context.Background()
	p, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "a", Lane: "l", EstTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	// A second turn waits while the first scouts.
	second := make(chan Permit, 1)
	go func() {
		p2, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "b", Lane: "l", EstTokens: 10})
		if err != nil {
			t.Error(err)
		}
		second <- p2
	}()
	select {
	case <-second:
		t.Fatal("a second turn was admitted while the first scouted the unknown budget")
	case <-time.After(50 * time.Millisecond):
	}
	_, _ = Finish(ctx, p, Outcome{Header: rlHeader(600, 590, "1s")})
	m.mu.Lock()
	if len(m.readings) != 1 || m.readings[0].TokRemaining != 590 || m.readings[0].TokRate <= 0 {
		t.Errorf("readings passed on: %+v, want one of 590 left with a refill rate", m.readings)
	}
	m.mu.Unlock()
	select {
	case p2 := <-second:
		p2.Done(Outcome{})
	case <-time.After(5 * time.Second):
		t.Fatal("the second turn was not admitted after the scout's reading")
	}
}

// A provider that reports no limits (a local vLLM or Ollama) makes the scout's answer
// mark the budget silent: the other turns go on at once on the node's own buckets rather
// than waiting, one at a time, on a reading that never comes.
func TestSharedGateSilentProviderStopsScouting(t *testing.T) {
	m := &memBudget{}
	e := NewExecutor(Config{DefaultLane: LaneConfig{Slots: 8}}, nil)
	e.Share(SharedConfig{Budget: m, Key: func(string) string { return "k" }, ScoutFor: time.Hour})
	ctx := context.Background()
	p, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "a", Lane: "l", EstTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	admitted := make(chan Permit, n)
	for i := range n {
		go func() {
			p2, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "b" + itoa(i), Lane: "l", EstTokens: 10})
			if err != nil {
				t.Error(err)
			}
			admitted <- p2
		}()
	}
	select {
	case <-admitted:
		t.Fatal("a turn was admitted while the first scouted the unknown budget")
	case <-time.After(50 * time.Millisecond):
	}
	// The scout's answer: a success with no rate-limit headers at all.
	_, _ = Finish(ctx, p, Outcome{Usage: agent.Usage{Input: 5, Output: 5}})
	m.mu.Lock()
	if len(m.readings) != 1 || !m.readings[0].Silent {
		t.Errorf("readings passed on: %+v, want one marking the budget silent", m.readings)
	}
	m.mu.Unlock()
	// All the waiting turns run together, with no scout's hour to wait out.
	var held []Permit
	for range n {
		select {
		case p2 := <-admitted:
			held = append(held, p2)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d turns admitted after the silent answer; the rest wait on a scout", len(held), n)
		}
	}
	for _, p2 := range held {
		p2.Done(Outcome{})
	}
	// A failed answer with no headers says nothing about the provider's headers.
	m2 := &memBudget{}
	e2 := NewExecutor(Config{DefaultLane: LaneConfig{Slots: 8}}, nil)
	e2.Share(SharedConfig{Budget: m2, Key: func(string) string { return "k" }})
	p3, err := e2.Admit(ctx, Turn{RunID: "r", CallKey: "a", Lane: "l", EstTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	p3.Done(Outcome{Err: errors.New("connection refused")})
	m2.mu.Lock()
	defer m2.mu.Unlock()
	if len(m2.readings) != 0 {
		t.Errorf("a failed request marked the budget: %+v", m2.readings)
	}
}
