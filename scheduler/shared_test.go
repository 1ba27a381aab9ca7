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

// memBudget is a SharedBudget in memory, for the gate's tests: levels that do not
// refill, in SharedAmounts' order.
type memBudget struct {
	mu       sync.Mutex
	level    [nDims]float64
	limit    [nDims]float64 // all 0 = unknown, all < 0 = silent
	readings []SharedReading
	takes    []SharedAmounts
}

func (m *memBudget) known() bool {
	for _, l := range m.limit {
		if l > 0 {
			return true
		}
	}
	return false
}

func (m *memBudget) Take(_ context.Context, _ string, want SharedAmounts, margin, scoutFor time.Duration) (SharedGrant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.takes = append(m.takes, want)
	if m.limit[dimTok] < 0 {
		return SharedGrant{Limit: amountsOf(m.limit)}, nil
	}
	if !m.known() {
		return SharedGrant{Scout: true, ScoutUntil: time.Now().Add(scoutFor)}, nil
	}
	w := want.vec()
	var got, rate [nDims]float64
	for d := range nDims {
		got[d] = w[d]
		if m.limit[d] > 0 {
			got[d] = max(0, min(w[d], m.level[d]))
			m.level[d] -= got[d]
			rate[d] = m.limit[d] / 60
		}
	}
	return SharedGrant{Got: amountsOf(got), Limit: amountsOf(m.limit), Rate: amountsOf(rate)}, nil
}

func (m *memBudget) Give(_ context.Context, _ string, back SharedAmounts) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d, v := range back.vec() {
		m.level[d] += v
	}
	return nil
}

func (m *memBudget) Lower(_ context.Context, _ string, r SharedReading) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readings = append(m.readings, r)
	if r.Silent && !m.known() {
		m.limit = [nDims]float64{-1, -1, -1, -1}
	}
	for d, lv := range r.levels() {
		if lv.HasLimit && m.limit[d] <= 0 {
			m.limit[d], m.level[d] = lv.Limit, lv.Remaining
			for o := range nDims {
				m.limit[o] = max(m.limit[o], 0)
			}
		}
		if lv.HasRemaining {
			m.level[d] = min(m.level[d], lv.Remaining)
		}
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
	if len(m.readings) != 1 || m.readings[0].Tokens.Remaining != 590 || m.readings[0].Tokens.Rate <= 0 {
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

// anthropicHeader is an answer's headers with Anthropic's separate input- and
// output-token buckets, full again in a minute.
func anthropicHeader(inLimit, inLeft, outLimit, outLeft int) http.Header {
	h := http.Header{}
	reset := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	for _, b := range []struct {
		name        string
		limit, left int
	}{{"requests", 1000, 999}, {"input-tokens", inLimit, inLeft}, {"output-tokens", outLimit, outLeft}} {
		h.Set("anthropic-ratelimit-"+b.name+"-limit", itoa(b.limit))
		h.Set("anthropic-ratelimit-"+b.name+"-remaining", itoa(b.left))
		h.Set("anthropic-ratelimit-"+b.name+"-reset", reset)
	}
	return h
}

// Anthropic's output-token bucket is shared apart from its input bucket: once the
// shared output level other nodes spent is gone, a turn waits for it even though this
// node's own buckets, and the shared input level, would admit it; an earlier turn's
// unused output tokens let it go. (Each turn reserves 400 output tokens, its cap: the
// estimate's margin is its prompt's; the first take asks for 5% of the limit, 1000.)
func TestSharedGateSplitInputOutput(t *testing.T) {
	m := &memBudget{}
	e := NewExecutor(Config{DefaultLane: LaneConfig{Slots: 8}}, nil)
	e.Share(SharedConfig{Budget: m, Key: func(string) string { return "k" }, Hold: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "scout", Lane: "l", EstTokens: 1000, EstOutput: 400})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = Finish(ctx, p, Outcome{Header: anthropicHeader(100000, 99000, 20000, 19600), Usage: agent.Usage{Input: 600, Output: 400}})
	m.mu.Lock()
	r := m.readings[len(m.readings)-1]
	if !r.Input.HasLimit || r.Input.Limit != 100000 || r.Output.Remaining != 19100 || r.Tokens.said() {
		t.Errorf("reading passed on: %+v, want the input and output levels apart", r)
	}
	m.level[dimOut] = 1000 // the other nodes spent the rest of the output bucket
	m.mu.Unlock()

	var held []Permit
	for i := range 2 {
		p, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "t" + itoa(i), Lane: "l", EstTokens: 1000, EstOutput: 400})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	third := make(chan Permit, 1)
	go func() {
		p, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "t2", Lane: "l", EstTokens: 1000, EstOutput: 400})
		if err != nil {
			t.Error(err)
		}
		third <- p
	}()
	select {
	case <-third:
		t.Fatal("a third turn of 400 output tokens was admitted on a shared output level of 1000")
	case <-time.After(100 * time.Millisecond):
	}
	m.mu.Lock()
	last, input := m.takes[len(m.takes)-1], 0.0
	for _, tk := range m.takes {
		input += tk.Input
	}
	m.mu.Unlock()
	if last.Output <= 0 || input <= 0 {
		t.Errorf("takes %+v, want input tokens asked for and the last asking for output tokens", m.takes)
	}
	// The first turn used 50 of its output tokens: the rest are the node's again.
	_, _ = Finish(ctx, held[0], Outcome{Usage: agent.Usage{Input: 600, Output: 50}})
	select {
	case p := <-third:
		p.Done(Outcome{})
	case <-time.After(5 * time.Second):
		t.Fatal("the third turn still waits after the first gave back 350 output tokens")
	}
	held[1].Done(Outcome{})
}

// Once readings show a fixed window (its reset is the window's end, whatever is left),
// the readings passed on carry the window's end, so that the shared level refills at
// once at that end rather than continuously.
func TestSharedGatePassesAFixedWindowsEnd(t *testing.T) {
	m := &memBudget{}
	e := NewExecutor(Config{DefaultLane: LaneConfig{Slots: 8}}, nil)
	e.Share(SharedConfig{Budget: m, Key: func(string) string { return "k" }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, h := range []http.Header{rlHeader(100000, 99000, "30s"), rlHeader(100000, 50000, "29.9s")} {
		p, err := e.Admit(ctx, Turn{RunID: "r", CallKey: "t" + itoa(i), Lane: "l", EstTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = Finish(ctx, p, Outcome{Header: h, Usage: agent.Usage{Input: 50, Output: 50}})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	first, second := m.readings[0].Tokens, m.readings[1].Tokens
	if !first.WindowEnd.IsZero() {
		t.Errorf("first reading %+v: a window's end before any reading disagreed", first)
	}
	if d := time.Until(second.WindowEnd); d < 29*time.Second || d > 30*time.Second || !second.Learned {
		t.Errorf("second reading %+v: want the window's end in 29.9 s", second)
	}
}
