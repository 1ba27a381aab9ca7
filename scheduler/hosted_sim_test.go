package scheduler

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// hostedAgents drives a Core in front of the test kit's fake engine on a virtual clock:
// agents own-loop agents of turns turns each (a scripted tool call per turn but the last,
// a tool pause, the tool result appended), no max_tokens, heavy-tailed completions billed
// when they end, the engine's limits learned from its headers only. It returns the
// engine's log and the time the last turn ended.
type hostedAgents struct {
	agents, turns int
	prompt, tool  int           // words of the first prompt and of each tool result
	pause         time.Duration // tool pause (the median; lognormal)
	limits        testkit.Limits
	seed          uint64
}

func (h hostedAgents) run(t *testing.T) ([]testkit.Record, time.Time) {
	t.Helper()
	s := newSim(t, Config{Lanes: map[string]LaneConfig{testLane: {Scout: true}}, Seed: h.seed})
	lim := h.limits
	lim.OutputAtEnd = true
	eng := testkit.NewEngine(testkit.Config{
		Clock: s.clock, Slots: 64, Lengths: testkit.Lengths{Median: 60, Sigma: 0.8, Max: 600, Seed: h.seed},
		PrefillPerToken: 200 * time.Microsecond, DecodePerToken: 10 * time.Millisecond,
		Limits: lim, CacheTokens: -1,
		ToolRules: []testkit.ToolRule{{Match: "task", Rounds: h.turns - 1,
			Calls: []testkit.ScriptedCall{{Name: "lookup", Arguments: `{"q":"x"}`}}}},
	})
	tools := []testkit.Tool{{Type: "function", Function: testkit.FunctionDef{Name: "lookup",
		Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}}}
	rng := rand.New(rand.NewPCG(h.seed, 0x5eed))
	words := func(n int) string { return strings.Repeat(" data", n) }
	type conv struct {
		run  string
		msgs []testkit.Message
		left int
	}
	var next TurnID
	jobs := map[TurnID]*conv{}
	var last time.Time
	send := func(c *conv, cont bool) {
		next++
		est := 0
		for _, m := range c.msgs {
			est += len(m.Content) / 4
		}
		jobs[next] = c
		s.submit(Job{ID: next, Turn: Turn{RunID: c.run, CallKey: c.run, Caller: "agents", Lane: testLane,
			Class: agent.ClassInteractive, EstTokens: max(est, 1), Continuation: cont}})
	}
	s.handle = func(a Action) {
		switch a.Kind {
		case ActAdmit:
			c, id := jobs[a.ID], a.ID
			req := &testkit.ChatRequest{Model: "m", Messages: append([]testkit.Message(nil), c.msgs...), Tools: tools}
			eng.Submit(req, func(r *testkit.Result) {
				// A refusal comes back inside Submit: hand it to the core after this
				// action, never from within it.
				s.at(s.clock.Now(), func() {
					res := Result{Status: StatusFromHTTP(r.Status), Telemetry: ParseTelemetry(r.Header, s.now)}
					if r.Status != 200 {
						s.complete(id, res)
						return
					}
					u := r.Response.Usage
					res.Usage = agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
					delete(jobs, id)
					s.complete(id, res)
					last = s.now
					msg := r.Response.Choices[0].Message
					if c.left--; c.left == 0 || len(msg.ToolCalls) == 0 {
						return
					}
					c.msgs = append(c.msgs, msg, testkit.Message{Role: "tool", ToolCallID: msg.ToolCalls[0].ID,
						Content: testkit.Content("result" + words(h.tool))})
					p := time.Duration(float64(h.pause) * (0.5 + rng.Float64()))
					s.at(s.now.Add(p), func() { send(c, true) })
				})
			}, testkit.WithRun(c.run))
		case ActRefuse, ActSuspend:
			t.Fatalf("unexpected %s", a)
		}
	}
	for i := range h.agents {
		c := &conv{run: fmt.Sprint("agent-", i), left: h.turns, msgs: []testkit.Message{
			{Role: "system", Content: testkit.Content(fmt.Sprint("You are agent ", i, "."))},
			{Role: "user", Content: testkit.Content(fmt.Sprintf("task %d seed %d:%s", i, h.seed, words(h.prompt)))},
		}}
		s.at(t0, func() { send(c, false) })
	}
	s.run(t0.Add(6 * time.Hour))
	if len(jobs) != 0 {
		t.Fatalf("%d turns never finished", len(jobs))
	}
	return eng.Log(), last
}

// A request budget that binds (short prompts: 96 turns need minutes of RPM 30, their
// tokens much less of TPM 6,000), learned from headers alone, is never overdrawn:
// no 429 in ten seeds, whether the provider refills continuously (OpenAI), resets fixed
// windows (many gateways: the reset is the window's end, so remaining ÷ reset is no
// rate), or allows one request a minute (a floored remaining of 0 says little about the
// level). The continuous bucket is used to its rate: the run ends within 3 % of the time
// its requests need, (requests − the initial fill) ÷ rate.
func TestRequestBudgetLearnedNo429(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits testkit.Limits
		floor  func(requests int) time.Duration // 0: not checked
	}{
		{"continuous RPM 30", testkit.Limits{TPM: 6000, RPM: 30},
			func(n int) time.Duration { return time.Duration(n-30) * 2 * time.Second }},
		{"fixed windows RPM 30", testkit.Limits{TPM: 6000, RPM: 30, Window: testkit.Fixed}, nil},
		{"fixed 10 s windows", testkit.Limits{TPM: 1000, RPM: 5, Window: testkit.Fixed, Period: 10 * time.Second}, nil},
		{"continuous RPM 1", testkit.Limits{TPM: 100000, RPM: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 10; seed++ {
				h := hostedAgents{agents: 16, turns: 6, prompt: 40, tool: 20, pause: 500 * time.Millisecond,
					limits: tc.limits, seed: seed}
				if tc.limits.RPM == 1 {
					h.agents, h.turns = 4, 3 // minutes of modelled time per turn
				}
				log, end := h.run(t)
				var n429 int
				for _, r := range log {
					if r.Status == 429 {
						n429++
					}
				}
				took := end.Sub(t0)
				if n429 > 0 {
					t.Errorf("seed %d: %d of %d requests answered 429", seed, n429, len(log))
				}
				if tc.floor != nil {
					if f := tc.floor(len(log)); took > f*103/100 {
						t.Errorf("seed %d: took %v, more than 1.03 × the request floor %v", seed, took, f)
					}
				}
			}
		})
	}
}
