package runtime

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
)

// scripted is a fake backend whose replies a test writes as a function of the request and
// how often that prompt has been asked.
type scripted struct {
	mu    sync.Mutex
	seen  map[string]int
	reply func(ctx context.Context, req agent.Request, n int) (agent.Result, error)
	total int
}

func (s *scripted) ID() string { return "fake" }

// Run sends each turn through call.Do like a real backend; every send counts as an ask.
func (s *scripted) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	var res agent.Result
	err := call.Do(ctx, adapters.TurnCost{Input: adapters.EstimateTokens(req.Prompt), MaxOutput: req.MaxTokens},
		func(ctx context.Context) adapters.TurnReport {
			s.mu.Lock()
			if s.seen == nil {
				s.seen = map[string]int{}
			}
			s.seen[req.Prompt]++
			n := s.seen[req.Prompt]
			s.total++
			s.mu.Unlock()
			var err error
			res, err = s.reply(ctx, req, n)
			return adapters.TurnReport{Usage: res.Usage, Header: res.Header, Err: err}
		})
	return res, err
}

func okText(text string, in, out int) agent.Result {
	cost := float64(in+out) / 1e6
	return agent.Result{Status: agent.StatusOK, Output: text, Text: text, Usage: agent.Usage{Input: in, Output: out}, Cost: &cost}
}

func echo(_ context.Context, req agent.Request, _ int) (agent.Result, error) {
	return okText("re: "+req.Prompt, 10, 5), nil
}

func hang(ctx context.Context, _ agent.Request, _ int) (agent.Result, error) {
	<-ctx.Done()
	return agent.Result{}, ctx.Err()
}

// newEngine returns a Service over a fresh state dir with b as its only backend.
func newEngine(t *testing.T, b adapters.Backend) *Service {
	t.Helper()
	s, _ := newScheduledEngine(t, b, scheduler.NewGate(4))
	return s
}

func start(t *testing.T, e *Service, src string, spec ...func(*Spec)) *Run {
	t.Helper()
	s := Spec{Path: "t.lua", Source: []byte(src)}
	for _, f := range spec {
		f(&s)
	}
	r, err := e.Start(t.Context(), s)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return r
}

func collect(t *testing.T, r *Run) []event.Event {
	t.Helper()
	var evs []event.Event
	for ev := range r.Subscribe(t.Context(), 0) {
		evs = append(evs, ev)
	}
	return evs
}

func ofType(evs []event.Event, typ string) []event.Event {
	var out []event.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func TestEventsOrderedAndComplete(t *testing.T) {
	e := newEngine(t, &scripted{reply: echo})
	r := start(t, e, `function main()
  phase("one")
  local rs = parallel({1,2,3}, function(i) return agent{prompt="p"..i}.output end)
  log("after " .. rs[3])
  report(rs)
end`)
	res := r.Wait()
	if res.Status != StatusCompleted {
		t.Fatalf("status %s: %v", res.Status, res.Err)
	}
	// A subscriber that arrives after the end still gets every event, in order.
	evs := collect(t, r)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) || ev.RunID != r.ID || ev.TS.IsZero() {
			t.Fatalf("event %d: seq=%d run=%s ts=%v", i, ev.Seq, ev.RunID, ev.TS)
		}
	}
	if evs[0].Type != event.RunStarted || evs[len(evs)-1].Type != event.RunDone {
		t.Fatalf("first %s, last %s", evs[0].Type, evs[len(evs)-1].Type)
	}
	done := ofType(evs, event.AgentDone)
	if len(done) != 3 || len(ofType(evs, event.AgentStarted)) != 3 || len(ofType(evs, event.PhaseDone)) != 1 {
		t.Fatalf("agent/phase events: %d done", len(done))
	}
	// Every agent_done is recorded before the script sees the result.
	logSeq := ofType(evs, event.Log)[0].Seq
	for _, d := range done {
		if d.Seq > logSeq {
			t.Fatalf("agent_done %v after the script continued (log at %d)", d.Data["call_key"], logSeq)
		}
	}
	rd := evs[len(evs)-1].Data
	if rd["status"] != "completed" || rd["tokens"] != 45.0 {
		t.Fatalf("run_done: %+v", rd)
	}
	if res.Usage.Total() != 45 || res.Agents.OK != 3 || res.Cost <= 0 {
		t.Fatalf("totals: %+v", res)
	}
}

func TestSubscribeLive(t *testing.T) {
	release := make(chan struct{})
	b := &scripted{reply: func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		<-release
		return echo(ctx, req, n)
	}}
	r := start(t, newEngine(t, b), `function main() report(agent{prompt="x"}.output) end`)
	var seen []string
	for ev := range r.Subscribe(t.Context(), 0) {
		seen = append(seen, ev.Type)
		if ev.Type == event.AgentStarted {
			close(release)
		}
	}
	if seen[len(seen)-1] != event.RunDone || r.Wait().Report != "re: x" {
		t.Fatalf("events %v, report %v", seen, r.Wait().Report)
	}
}

func TestRetries(t *testing.T) {
	flaky := &scripted{reply: func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		if n < 3 {
			return agent.Result{}, errors.New("connection reset")
		}
		return echo(ctx, req, n)
	}}
	r := start(t, newEngine(t, flaky), `function main()
  local a = agent{prompt="x", retries=2}
  local b = agent{prompt="y", retries=1}
  report({a.attempts, b.ok, b.error})
end`)
	res := r.Wait()
	if res.Status != StatusCompleted {
		t.Fatal(res.Err)
	}
	got := res.Report.([]any)
	if got[0] != 3.0 || got[1] != false || !strings.Contains(got[2].(string), "connection reset") {
		t.Fatalf("report %v", got)
	}
	if n := len(ofType(collect(t, r), event.AgentRetry)); n != 3 {
		t.Fatalf("agent_retry events = %d, want 3", n)
	}
	if res.Agents.OK != 1 || res.Agents.Failed != 1 {
		t.Fatalf("counts %+v", res.Agents)
	}
}

func TestCallTimeout(t *testing.T) {
	r := start(t, newEngine(t, &scripted{reply: hang}), `function main()
  local r = agent{prompt="x", timeout_ms=20}
  report(r.status .. ": " .. r.error)
end`)
	res := r.Wait()
	if res.Status != StatusCompleted || !strings.Contains(res.Report.(string), "timed_out: timed out after 20 ms (timeout_ms)") {
		t.Fatalf("%s %v %v", res.Status, res.Report, res.Err)
	}
}

func TestStructuredOutput(t *testing.T) {
	sch := `{type="object", properties={n={type="integer"}}, required={"n"}}`
	cases := []struct {
		name    string
		replies []string
		want    any
		retries int
		errSub  string
	}{
		{name: "valid first time", replies: []string{`{"n": 3}`}, want: 3.0},
		{name: "fenced JSON", replies: []string{"Here:\n```json\n{\"n\": 4}\n```"}, want: 4.0},
		{name: "re-prompted", replies: []string{`{"n": "three"}`, `not json`, `{"n": 5}`}, want: 5.0, retries: 2},
		{name: "gives up after three re-prompts", replies: []string{`{}`}, retries: 3, errSub: "output does not match the schema"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var prompts []string
			b := &scripted{reply: func(_ context.Context, req agent.Request, _ int) (agent.Result, error) {
				prompts = append(prompts, req.Prompt)
				i := min(len(prompts)-1, len(tc.replies)-1)
				return okText(tc.replies[i], 1, 1), nil
			}}
			r := start(t, newEngine(t, b), `function main()
  local r = agent{prompt="give n", schema=`+sch+`}
  if not r.ok then report({err=r.error}) return end
  report({n=r.output.n, tokens=r.tokens})
end`)
			res := r.Wait()
			if res.Status != StatusCompleted {
				t.Fatal(res.Err)
			}
			rep := res.Report.(map[string]any)
			if tc.errSub != "" {
				if !strings.Contains(rep["err"].(string), tc.errSub) {
					t.Fatalf("report %v", rep)
				}
			} else if rep["n"] != tc.want || rep["tokens"] != float64(2*len(prompts)) {
				t.Fatalf("report %v after %d prompts", rep, len(prompts))
			}
			if n := len(ofType(collect(t, r), event.SchemaRetry)); n != tc.retries {
				t.Fatalf("schema_retry events = %d, want %d", n, tc.retries)
			}
			if len(prompts) > 1 && !strings.Contains(prompts[1], "did not match the required JSON schema") {
				t.Fatalf("re-prompt: %q", prompts[1])
			}
		})
	}
}

func TestBudgets(t *testing.T) {
	cases := []struct {
		name, src, errSub string
		status            Status
	}{
		{name: "agents", status: StatusFailed, errSub: "budget exceeded: agents=2",
			src: `function main() budget{agents=2} for i=1,3 do pcall(agent, {prompt="p"..i}) end end`},
		{name: "tokens", status: StatusFailed, errSub: "budget exceeded: tokens=20",
			src: `function main() budget{tokens=20} agent{prompt="a"} agent{prompt="b"} agent{prompt="c"} end`},
		{name: "usd", status: StatusFailed, errSub: "budget exceeded: usd=1e-05",
			src: `function main() budget{usd=0.00001} agent{prompt="a"} agent{prompt="b"} end`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := start(t, newEngine(t, &scripted{reply: echo}), tc.src).Wait()
			if res.Status != tc.status || lua.ErrorKindOf(res.Err) != lua.KindLimit || !strings.Contains(res.Err.Error(), tc.errSub) {
				t.Fatalf("%s: %v", res.Status, res.Err)
			}
		})
	}
}

func TestTimeBudgetSuspends(t *testing.T) {
	r := start(t, newEngine(t, &scripted{reply: hang}), `function main() budget{time_ms=30} agent{prompt="slow"} end`)
	res := r.Wait()
	if res.Status != StatusSuspended || !errors.Is(res.Err, ErrTimeBudget) {
		t.Fatalf("%s: %v", res.Status, res.Err)
	}
	if len(ofType(collect(t, r), event.RunSuspended)) != 1 {
		t.Fatal("no run_suspended event")
	}
}

func TestRunTimeout(t *testing.T) {
	res := start(t, newEngine(t, &scripted{reply: echo}), `function main() while true do end end`,
		func(s *Spec) { s.Timeout = 30 * time.Millisecond }).Wait()
	if res.Status != StatusFailed || !errors.Is(res.Err, ErrTimeout) {
		t.Fatalf("%s: %v", res.Status, res.Err)
	}
	// The message names the limit and the line the script was stopped at.
	if msg := res.Err.Error(); !strings.Contains(msg, "--timeout (30ms)") || !strings.Contains(msg, ".lua:1") {
		t.Fatalf("timeout error %q does not name the limit and the line", msg)
	}
}

func TestCancel(t *testing.T) {
	b := &scripted{reply: hang}
	r := start(t, newEngine(t, b), `function main() parallel({1,2,3}, function(i) return agent{prompt="p"..i} end) end`)
	started := 0
	var evs []event.Event
	for ev := range r.Subscribe(t.Context(), 0) {
		evs = append(evs, ev)
		if ev.Type == event.AgentStarted {
			if started++; started == 3 {
				r.Cancel()
			}
		}
	}
	res := r.Wait()
	if res.Status != StatusCancelled || !errors.Is(res.Err, ErrCancelled) {
		t.Fatalf("%s: %v", res.Status, res.Err)
	}
	if evs[len(evs)-1].Data["status"] != "cancelled" {
		t.Fatalf("run_done: %+v", evs[len(evs)-1].Data)
	}
}

// An unknown backend is a mistake in the script's options: the run ends, pcall or not.
func TestUnknownBackendEndsTheRun(t *testing.T) {
	res := start(t, newEngine(t, &scripted{reply: echo}), `function main()
  local ok, err = pcall(agent, {prompt="x", backend="nope"})
  report(err)
end`).Wait()
	if res.Status != StatusFailed || !strings.Contains(res.Err.Error(), `t.lua:2: agent: backend: "nope" is not registered (known: fake)`) {
		t.Fatalf("%s %v %v", res.Status, res.Report, res.Err)
	}
}

func TestLoadErrors(t *testing.T) {
	e := newEngine(t, &scripted{reply: echo})
	if _, err := e.Start(t.Context(), Spec{Path: "t.lua", Source: []byte("function main(")}); lua.ErrorKindOf(err) != lua.KindSyntax {
		t.Fatalf("syntax: %v", err)
	}
	if _, err := e.Start(t.Context(), Spec{Path: "testdata/none.lua"}); err == nil || !strings.Contains(err.Error(), "read workflow testdata/none.lua") {
		t.Fatalf("missing file: %v", err)
	}
	res := start(t, e, `x = 1`).Wait()
	if res.Status != StatusFailed || lua.ErrorKindOf(res.Err) != lua.KindInvalid {
		t.Fatalf("missing main: %s %v", res.Status, res.Err)
	}
}

func TestDefaultsReachTheBackend(t *testing.T) {
	var got agent.Request
	b := &scripted{reply: func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		got = req
		return echo(ctx, req, n)
	}}
	res := start(t, newEngine(t, b), `function main() agent{prompt="x"} end`, func(s *Spec) {
		s.Model, s.Class = "m7", agent.ClassBatch
	}).Wait()
	if res.Status != StatusCompleted || got.Model != "m7" || got.Class != agent.ClassBatch || got.Backend != "fake" {
		t.Fatalf("%v %+v", res.Err, got)
	}
}
