package planner

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/skills"
)

// Model answers one planner request. key names the call ("plan/1", "fix/2").
type Model interface {
	Complete(ctx context.Context, key string, req agent.Request) (agent.Result, error)
}

// DefaultMaxAttempts is how many scripts the model may propose for one plan or fix.
const DefaultMaxAttempts = 3

// Options configure a Planner.
type Options struct {
	// Model answers the planning requests; nil plans with the template planner.
	Model Model
	// Backend and ModelName address the planner's requests ("" = the defaults).
	Backend, ModelName string
	// MaxAttempts bounds the scripts asked for per plan or fix; default 3.
	MaxAttempts int
	// Caps bound the validation dry run.
	Caps Caps
	// Tools are what the configuration lets agents be given: the template planner gives
	// the read-only file tools to agents of a task about the code (and run_command when
	// commands are allowed), the model planner is told them, and a planned script that
	// gives an agent a tool not offered is rejected.
	Tools Tools
	// Now is the clock for Call.Elapsed; default time.Now.
	Now func() time.Time
}

// Planner plans and fixes workflows.
type Planner struct{ opts Options }

// New returns a Planner.
func New(opts Options) *Planner {
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Caps = opts.Caps.withDefaults()
	return &Planner{opts: opts}
}

// Template reports whether the planner is the offline template planner.
func (p *Planner) Template() bool { return p.opts.Model == nil }

// Name says who plans: "template" or "BACKEND/MODEL" (either part may be the default).
func (p *Planner) Name() string {
	if p.Template() {
		return "template"
	}
	b, m := p.opts.Backend, p.opts.ModelName
	if b == "" {
		b = "default backend"
	}
	if m == "" {
		m = "default model"
	}
	return b + "/" + m
}

// Call is one model request the planner made.
type Call struct {
	Key     string
	Prompt  string // the user prompt (the system prompt is the skill)
	Reply   string
	Script  []byte // the script taken from the reply; nil when there was none
	Reason  string // why it was rejected; "" when accepted
	Usage   agent.Usage
	Cost    float64       // USD, when the backend prices its tokens
	Elapsed time.Duration // the model's time, for the overhead figure
}

// Plan is a validated workflow and how it was made.
type Plan struct {
	Task     string
	Script   []byte
	Check    Check  // what validation found: phases, dry-run calls, warnings
	Planner  string // Name() of the planner
	Calls    []Call // the model requests, in order; empty for the template planner
	Overhead time.Duration
}

// Error is a plan or fix that found no acceptable script within its attempts.
type Error struct {
	Op       string // "plan" or "fix"
	Attempts int
	Last     string // the last rejection reason
	Calls    []Call
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: no valid workflow after %d attempts; the last script was rejected: %s (rephrase the task, "+
		"try a stronger --planner-model, or write the workflow and run it with --workflow)", e.Op, e.Attempts, e.Last)
}

// Plan plans a workflow for task.
func (p *Planner) Plan(ctx context.Context, task string) (*Plan, error) {
	task = strings.TrimSpace(task)
	if task == "" {
		return nil, errors.New("plan: the task is empty (describe what the workflow should do, e.g. luft run \"review the storage package\")")
	}
	start := p.opts.Now()
	if p.Template() {
		src := TemplateScript(task, p.opts.Tools)
		chk, err := Validate(ctx, src, p.opts.Caps)
		if err != nil {
			return nil, fmt.Errorf("plan: the template planner made an invalid script (a bug in luft, please report it): %w", err)
		}
		return &Plan{Task: task, Script: src, Check: chk, Planner: p.Name(), Overhead: p.opts.Now().Sub(start)}, nil
	}
	pl, err := p.loop(ctx, "plan", task, planPrompt(task, p.opts.Tools), nil)
	if pl != nil {
		pl.Task = task
		pl.Overhead = p.opts.Now().Sub(start) - modelTime(pl.Calls)
	}
	return pl, err
}

// Failure is a script that failed while running, for Fix.
type Failure struct {
	Script []byte
	Error  string // the run's error, with its file:line
	Line   int    // the failing line, 0 when unknown
}

// Fix asks the model for a corrected script. The template planner cannot repair scripts.
func (p *Planner) Fix(ctx context.Context, f Failure) (*Plan, error) {
	if p.Template() {
		return nil, errors.New("auto-fix: the offline template planner cannot repair a script; give a model planner with --planner-model or a model backend with --backend")
	}
	start := p.opts.Now()
	pl, err := p.loop(ctx, "fix", "", fixPrompt(f), f.Script)
	if pl != nil {
		pl.Overhead = p.opts.Now().Sub(start) - modelTime(pl.Calls)
	}
	return pl, err
}

func modelTime(calls []Call) time.Duration {
	var d time.Duration
	for _, c := range calls {
		d += c.Elapsed
	}
	return d
}

// loop asks the model for scripts until one validates or the attempts are used up. A
// planned script that validates with lint warnings is sent back with them while attempts
// remain; if a revision fails validation, the last valid script stands. A plan's tools
// are checked against Options.Tools for task; a fix keeps the tools the user's script gave.
func (p *Planner) loop(ctx context.Context, op, task, first string, prev []byte) (*Plan, error) {
	var (
		calls  []Call
		best   *Plan
		prompt = first
		last   string
	)
	for attempt := 1; attempt <= p.opts.MaxAttempts; attempt++ {
		key := fmt.Sprintf("%s/%d", op, attempt)
		t0 := p.opts.Now()
		res, err := p.opts.Model.Complete(ctx, key, agent.Request{
			Name: "planner", System: systemPrompt(), Prompt: prompt,
			Backend: p.opts.Backend, Model: p.opts.ModelName, Class: agent.ClassInteractive,
		})
		c := Call{Key: key, Prompt: prompt, Reply: res.Text, Usage: res.Usage, Elapsed: p.opts.Now().Sub(t0)}
		if res.Cost != nil {
			c.Cost = *res.Cost
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", op, context.Cause(ctx))
		}
		if err == nil && !res.OK() {
			err = errors.New(res.Error)
		}
		if err != nil {
			// A model that cannot be reached will not answer a retry either.
			c.Reason = "the planner's model call failed: " + err.Error()
			calls = append(calls, c)
			if best != nil {
				break
			}
			return nil, &Error{Op: op, Attempts: attempt, Last: c.Reason, Calls: calls}
		}
		src, reason := extract(res.Text)
		var chk Check
		if reason == "" {
			c.Script = src
			chk, err = Validate(ctx, src, p.opts.Caps)
			if err != nil {
				reason = err.Error()
			} else if op == "plan" {
				var warnings []string
				reason, warnings = checkTools(task, p.opts.Tools, chk)
				chk.Warnings = append(chk.Warnings, warnings...)
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", op, context.Cause(ctx))
		}
		c.Reason = reason
		calls = append(calls, c)
		if reason == "" {
			best = &Plan{Script: src, Check: chk, Planner: p.Name()}
			// A fix is judged by whether it runs: the style of a script the user wrote is
			// theirs, so its warnings do not cost another model call.
			if len(chk.Warnings) == 0 || attempt == p.opts.MaxAttempts || op == "fix" {
				break
			}
			prompt = retryPrompt(first, src, "", chk.Warnings)
			continue
		}
		last = reason
		if best != nil {
			break // the revision asked for by warnings failed: keep the valid script
		}
		if src == nil || len(src) > lua.MaxScriptBytes {
			// A script too large to compile is not sent back whole: the reason says why.
			src = prev
		}
		prompt = retryPrompt(first, src, reason, chk.Warnings)
	}
	if best == nil {
		return nil, &Error{Op: op, Attempts: len(calls), Last: last, Calls: calls}
	}
	best.Calls = calls
	return best, nil
}

var fence = regexp.MustCompile("(?s)```[ \t]*(?:lua|Lua|LUA)[ \t]*\r?\n(.*?)```")

// extract takes the workflow from a reply: the fenced lua block that defines main (or the
// only one). The reason says what is wrong when there is none.
func extract(reply string) ([]byte, string) {
	blocks := fence.FindAllStringSubmatch(reply, -1)
	if len(blocks) == 0 {
		return nil, "the reply has no ```lua fenced block (answer with the whole script in one ```lua block)"
	}
	for _, b := range blocks {
		if strings.Contains(b[1], "function main") {
			return []byte(b[1]), ""
		}
	}
	return []byte(blocks[0][1]), ""
}

// Prompt returns the system and user prompts of a first plan attempt, for measuring and
// showing what the model gets.
func Prompt(task string) (system, user string) { return systemPrompt(), planPrompt(task, Tools{}) }

func systemPrompt() string {
	return "You write luft workflows. The luft workflow-authoring skill follows; follow its API and rules exactly.\n\n" + skills.Text()
}
