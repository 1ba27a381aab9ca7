package planner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// Caps bound a validation dry run: a planned script that would need more is rejected.
type Caps struct {
	AgentCalls int           // agent calls; default 200
	Time       time.Duration // wall-clock time; default 30 s
	Memory     int64         // Go heap at which the dry run stops; default 1 GiB
}

func (c Caps) withDefaults() Caps {
	if c.AgentCalls <= 0 {
		c.AgentCalls = 200
	}
	if c.Time <= 0 {
		c.Time = 30 * time.Second
	}
	if c.Memory <= 0 {
		c.Memory = 1 << 30
	}
	return c
}

// Phase is one planned phase of a script's meta.
type Phase struct {
	Label       string
	Description string
}

// Check is what validating a script found.
type Check struct {
	Phases   []Phase  // meta.phases, in order
	Reasons  string   // meta.reasoning
	Calls    int      // agent calls of the dry run
	Agents   []string // distinct agent names of the dry run, in first-call order
	Uses     []Use    // what each of Agents asked for, in the same order
	Unnamed  Use      // what the agents without a name asked for together
	Warnings []string // lint findings from the skill's rules
}

// Use is what the dry run's calls of one agent name asked for.
type Use struct {
	Name   string
	Schema bool     // some call gave a schema
	Tools  []string // the tools its calls were given, in first-use order
}

// Tools are the distinct tools the dry run's agents were given, in first-use order.
func (c Check) Tools() []string {
	var out []string
	for _, u := range append(slices.Clone(c.Uses), c.Unnamed) {
		for _, t := range u.Tools {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return out
}

// recorder is the dry run's mock backend, noting what each agent name asked for.
type recorder struct {
	*adapters.Mock
	mu   sync.Mutex
	uses []Use
}

func (r *recorder) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	r.mu.Lock()
	i := slices.IndexFunc(r.uses, func(u Use) bool { return u.Name == req.Name })
	if i < 0 {
		r.uses = append(r.uses, Use{Name: req.Name})
		i = len(r.uses) - 1
	}
	u := &r.uses[i]
	u.Schema = u.Schema || req.Schema != nil
	for _, t := range req.Tools {
		if !slices.Contains(u.Tools, t) {
			u.Tools = append(u.Tools, t)
		}
	}
	r.mu.Unlock()
	return r.Mock.Run(ctx, req, call)
}

// Validate checks a workflow: it compiles, defines main, has a valid meta, and a dry run on
// the mock backend finishes within caps and calls report(). The error says why a script is
// rejected, in words fit to send back to the model.
func Validate(ctx context.Context, src []byte, caps Caps) (Check, error) {
	caps = caps.withDefaults()
	if _, err := lua.Compile("workflow.lua", "", src); err != nil {
		return Check{}, fmt.Errorf("the script does not compile: %v", err)
	}
	dir, err := os.MkdirTemp("", "luft-plan-")
	if err != nil {
		return Check{}, fmt.Errorf("validate: make a folder for the dry run: %w", err)
	}
	defer os.RemoveAll(dir)
	st, err := storage.Open(ctx, dir)
	if err != nil {
		return Check{}, fmt.Errorf("validate: open the dry run's store: %w", err)
	}
	defer st.Close()
	rec := &recorder{Mock: adapters.NewMock(adapters.MockConfig{})}
	svc, err := runtime.New(runtime.Options{Store: st, Caller: "planner",
		Backends:  adapters.NewRegistry("mock", rec),
		Scheduler: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 64}}, nil)})
	if err != nil {
		return Check{}, fmt.Errorf("validate: %w", err)
	}
	run, err := svc.Start(ctx, runtime.Spec{Path: "workflow.lua", Source: src, Backend: "mock", Timeout: caps.Time,
		Limits: lua.Limits{MaxAgentCalls: caps.AgentCalls, MaxMemoryBytes: caps.Memory}})
	if err != nil {
		return Check{}, fmt.Errorf("the script is invalid: %v", err)
	}
	res := run.Wait()
	chk := Check{Calls: res.Agents.OK + res.Agents.Failed}
	evs, _ := st.EventsOfType(ctx, run.ID, 0, 0, []string{event.Plan, event.AgentStarted})
	for _, ev := range evs {
		switch ev.Type {
		case event.Plan:
			chk.Reasons, _ = ev.Data["reasoning"].(string)
			chk.Phases = phasesOf(ev.Data["phases"])
		case event.AgentStarted:
			if name, _ := ev.Data["name"].(string); name != "" && !slices.Contains(chk.Agents, name) {
				chk.Agents = append(chk.Agents, name)
			}
		}
	}
	rec.mu.Lock()
	for _, name := range chk.Agents {
		if i := slices.IndexFunc(rec.uses, func(u Use) bool { return u.Name == name }); i >= 0 {
			chk.Uses = append(chk.Uses, rec.uses[i])
		} else {
			chk.Uses = append(chk.Uses, Use{Name: name})
		}
	}
	if i := slices.IndexFunc(rec.uses, func(u Use) bool { return u.Name == "" }); i >= 0 {
		chk.Unnamed = rec.uses[i]
	}
	rec.mu.Unlock()
	switch {
	case res.Status != runtime.StatusCompleted && errors.Is(res.Err, runtime.ErrTimeout):
		return chk, fmt.Errorf("the dry run on the mock backend took longer than the cap of %s (loops must end; bound them)", caps.Time)
	case res.Status != runtime.StatusCompleted:
		return chk, fmt.Errorf("the dry run on the mock backend %s: %v", res.Status, res.Err)
	case !res.HasReport:
		return chk, errors.New("main() never calls report(): the dry run on the mock backend completed without a report (call report(value) once at the end of main, on every path)")
	}
	chk.Warnings = lint(src, chk)
	return chk, nil
}

func phasesOf(v any) []Phase {
	list, _ := v.([]any)
	var out []Phase
	for _, x := range list {
		m, _ := x.(map[string]any)
		label, _ := m["label"].(string)
		desc, _ := m["description"].(string)
		if desc == "" {
			desc, _ = m["detail"].(string)
		}
		if label != "" {
			out = append(out, Phase{Label: label, Description: desc})
		}
	}
	return out
}

var (
	outputUse  = regexp.MustCompile(`\.output\b`)
	okCheck    = regexp.MustCompile(`\.ok\b|\bok\s*[=~]=|not\s+\w+\.ok`)
	phaseCall  = regexp.MustCompile(`\bphase\s*\(\s*"([^"]+)"|\bphase\s*\{\s*label\s*=\s*"([^"]+)"`)
	parallelOf = regexp.MustCompile(`\b(parallel|pmap)\s*\(`)
)

// lint checks a valid script against the skill's rules that a dry run cannot see. Its
// findings are warnings: the script runs, but the model is asked to fix them.
func lint(src []byte, chk Check) []string {
	s := string(src)
	var w []string
	if outputUse.MatchString(s) && !okCheck.MatchString(s) {
		w = append(w, "agent results' output is used but r.ok is never checked (a failed call has output = nil)")
	}
	if len(chk.Phases) == 0 {
		w = append(w, "meta.phases is missing: list the phases so the plan can be shown before the run")
	}
	known := map[string]bool{}
	for _, p := range chk.Phases {
		known[p.Label] = true
	}
	for _, m := range phaseCall.FindAllStringSubmatch(s, -1) {
		label := m[1] + m[2]
		if len(chk.Phases) > 0 && !known[label] {
			w = append(w, fmt.Sprintf("phase(%q) is not listed in meta.phases", label))
		}
	}
	if n := len(parallelOf.FindAllString(s, -1)); n > 0 && chk.Calls > 32 && !strings.Contains(s, "max_concurrency") {
		w = append(w, fmt.Sprintf("the dry run made %d agent calls through parallel() without max_concurrency: bound the fan-out", chk.Calls))
	}
	return w
}
