package lua

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
)

// fakeHost is a scripted Host: agent calls complete on their own goroutine with the
// prompt echoed back, unless the prompt asks to fail or to wait for a release.
type fakeHost struct {
	mu       sync.Mutex
	events   []event.Event
	calls    []Call
	reqs     []agent.Request
	budget   Budget
	files    map[string]string
	values   map[string]any // recorded luft.* values by call key
	sync     bool           // complete calls before returning (journal-hit path)
	release  chan struct{}  // when set, calls whose prompt starts with "wait" block on it
	inflight int
	peak     int
	reply    func(req agent.Request) (agent.Result, error) // when set, answers every call
}

func newFakeHost() *fakeHost {
	return &fakeHost{files: map[string]string{}, values: map[string]any{}}
}

func (h *fakeHost) result(req agent.Request) (agent.Result, error) {
	if h.reply != nil {
		return h.reply(req)
	}
	if strings.HasPrefix(req.Prompt, "fail") {
		return agent.Result{Status: agent.StatusError, Error: "scripted failure"}, nil
	}
	var out any = "echo: " + req.Prompt
	if req.Schema != nil {
		out = map[string]any{"answer": req.Prompt, "n": 1.0}
	}
	return agent.Result{Status: agent.StatusOK, Output: out, Text: fmt.Sprint(out),
		Usage: agent.Usage{Input: len(req.Prompt), Output: 3}, Backend: "fake", Model: "m", Attempts: 1}, nil
}

func (h *fakeHost) Agent(ctx context.Context, c Call, req agent.Request, complete func(agent.Result, error)) (agent.Result, bool, error) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.reqs = append(h.reqs, req)
	h.inflight++
	h.peak = max(h.peak, h.inflight)
	h.mu.Unlock()
	if h.sync {
		h.mu.Lock()
		h.inflight--
		h.mu.Unlock()
		r, err := h.result(req)
		return r, true, err
	}
	go func() {
		if strings.HasPrefix(req.Prompt, "wait") && h.release != nil {
			select {
			case <-h.release:
			case <-ctx.Done():
				h.mu.Lock()
				h.inflight--
				h.mu.Unlock()
				complete(agent.Result{Status: agent.StatusCancelled}, ctx.Err())
				return
			}
		}
		r, err := h.result(req)
		h.mu.Lock()
		h.inflight--
		h.mu.Unlock()
		complete(r, err)
	}()
	return agent.Result{}, false, nil
}

func (h *fakeHost) Value(c Call, fresh func() any) (any, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.values[c.Key]; ok {
		return v, nil
	}
	v := fresh()
	h.values[c.Key] = v
	return v, nil
}

func (h *fakeHost) LoadWorkflow(_ Call, dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	src, ok := h.files[path]
	if !ok {
		return nil, fmt.Errorf("no such file %s", path)
	}
	return []byte(src), nil
}

func (h *fakeHost) SetBudget(b Budget) error { h.budget = b; return nil }

func (h *fakeHost) Emit(ev event.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

func (h *fakeHost) eventsOf(typ string) []event.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []event.Event
	for _, e := range h.events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func (h *fakeHost) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range h.calls {
		out = append(out, c.Key)
	}
	return out
}

// runScript compiles and runs src as "test.lua" against h.
func runScript(t *testing.T, h *fakeHost, src string, mod ...func(*Config)) (Outcome, error) {
	t.Helper()
	prog, err := Compile("test.lua", "test.lua", []byte(src))
	if err != nil {
		return Outcome{}, err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cfg := Config{Host: h, RunID: "run-1", Now: fixedClock(), Args: map[string]any{"topic": "lua", "n": 3.0}}
	for _, m := range mod {
		if m != nil {
			m(&cfg)
		}
	}
	return Run(ctx, cfg, prog)
}

func fixedClock() func() time.Time {
	var mu sync.Mutex
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	n := 0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return t0.Add(time.Duration(n) * time.Millisecond)
	}
}
