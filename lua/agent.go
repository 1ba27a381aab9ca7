package lua

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/schema"
	glua "github.com/yuin/gopher-lua"
)

// agentFn is the Go half of agent(opts).
func (v *vm) agentFn(L *glua.LState) int {
	t := v.checkEffect(L, "agent()")
	where := v.where(L)
	req, err := v.parseAgentOpts(L.Get(1))
	if err != nil {
		return v.raiseFatalKind(L, KindRuntime, "agent: %s", err)
	}
	v.agentCalls++
	if v.agentCalls > v.lim.MaxAgentCalls {
		return v.raiseFatal(L, "agent call limit (%d per run) reached; raise it with --max-agent-calls if the workflow really needs more", v.lim.MaxAgentCalls)
	}
	t.br.agents++
	c := Call{Key: t.br.next(), Kind: KindAgent, Hash: req.Hash(), Where: where, PhaseID: v.phaseID()}
	ph := v.phase
	res, done, err := v.host.Agent(t.ctx, c, req, func(r agent.Result, err error) {
		v.deliver(t, func() []glua.LValue { return v.agentOutcome(c, req, ph, r, err) })
	})
	v.hostError(L, err)
	if err != nil {
		// Refused before it started for a reason the script cannot fix at run time (an
		// unknown backend, an unreadable journal): the run ends.
		return v.raiseFatalKind(L, KindRuntime, "agent: %s", err)
	}
	if done {
		vals := v.agentOutcome(c, req, ph, res, err)
		for _, val := range vals {
			L.Push(val)
		}
		return len(vals)
	}
	v.pending++
	return v.yield(L)
}

// agentOutcome turns a finished call into the (true, result) pair the Lua wrapper expects.
// A call that failed after its retries is not an error of the script: its result comes
// back with ok=false, status and error set, and tokens, usage and findings present, so
// scripts written as `if r.ok then ... end` (Luft's style) go on. Invalid options,
// limits, budgets, divergence and cancellation end the run elsewhere.
func (v *vm) agentOutcome(c Call, req agent.Request, ph *phaseState, r agent.Result, err error) []glua.LValue {
	if err != nil {
		if r.Error == "" {
			r.Error = err.Error()
		}
		if r.Status == "" || r.Status == agent.StatusOK {
			r.Status = agent.StatusError
		}
	}
	if !r.OK() && r.Error == "" {
		r.Error = "the agent reported status " + string(r.Status)
	}
	if ph != nil {
		switch {
		case r.OK():
			ph.ok++
		case r.Status == agent.StatusCancelled:
			ph.cancelled++
		default:
			ph.failed++
		}
	}
	if !r.OK() {
		// A failed call has no output: a script that uses it unchecked stops there.
		r.Output = nil
	}
	return []glua.LValue{glua.LTrue, v.resultTable(r)}
}

var agentOptions = []string{"prompt", "system", "schema", "model", "backend", "name", "role", "description",
	"tools", "max_tokens", "temperature", "timeout_ms", "retries", "session_id", "class"}

// parseAgentOpts reads the options table of agent(opts) into a request.
func (v *vm) parseAgentOpts(lv glua.LValue) (agent.Request, error) {
	var req agent.Request
	tbl, ok := lv.(*glua.LTable)
	if !ok {
		return req, fmt.Errorf("expected a table {prompt=..., ...}, got a %s", lv.Type())
	}
	var bad error
	tbl.ForEach(func(k, val glua.LValue) {
		if bad != nil {
			return
		}
		key, ok := k.(glua.LString)
		if !ok {
			bad = fmt.Errorf("option keys must be names, got %s", k.Type())
			return
		}
		bad = v.setAgentOption(&req, agentOption{key: string(key), val: val})
	})
	if bad != nil {
		return req, bad
	}
	if strings.TrimSpace(req.Prompt) == "" {
		return req, errors.New("missing required 'prompt' (a non-empty string)")
	}
	return req, nil
}

// setAgentOption sets the field of req that option o names.
func (v *vm) setAgentOption(req *agent.Request, o agentOption) error {
	var err error
	switch o.key {
	case "prompt":
		req.Prompt, err = o.str()
	case "system":
		req.System, err = o.str()
	case "schema":
		req.Schema, err = v.agentSchema(o.val)
	case "model":
		req.Model, err = o.str()
	case "backend":
		req.Backend, err = o.str()
	case "name":
		req.Name, err = o.str()
	case "role":
		req.Role, err = o.str()
	case "description":
		req.Description, err = o.str()
	case "tools":
		req.Tools, err = agentTools(o.val)
	case "max_tokens":
		req.MaxTokens, err = o.integer(1, 10_000_000)
	case "temperature":
		var f float64
		f, err = o.num(0, 2)
		req.Temperature = &f
	case "timeout_ms":
		req.TimeoutMS, err = o.integer(1, 7*24*3600*1000)
	case "retries":
		req.Retries, err = o.integer(0, 10)
	case "session_id":
		req.SessionID, err = o.str()
	case "class":
		req.Class, err = o.class()
	default:
		err = errors.New(unknownOption(o.key, agentOptions))
	}
	return err
}

// agentOption is one key and value of agent(opts); its methods read the value as the
// kind the option takes.
type agentOption struct {
	key string
	val glua.LValue
}

func (o agentOption) str() (string, error) {
	s, ok := o.val.(glua.LString)
	if !ok {
		return "", fmt.Errorf("option %s must be a string, got a %s", o.key, o.val.Type())
	}
	return string(s), nil
}

func (o agentOption) num(lo, hi float64) (float64, error) {
	n, ok := o.val.(glua.LNumber)
	if !ok || float64(n) < lo || float64(n) > hi || math.IsNaN(float64(n)) {
		return float64(n), fmt.Errorf("option %s must be a number from %g to %g, got %s", o.key, lo, hi, o.val.String())
	}
	return float64(n), nil
}

func (o agentOption) integer(lo, hi float64) (int, error) {
	n, err := o.num(lo, hi)
	if err == nil && n != math.Trunc(n) {
		err = fmt.Errorf("option %s must be a whole number, got %s", o.key, o.val.String())
	}
	return int(n), err
}

func (o agentOption) class() (agent.Class, error) {
	s, err := o.str()
	c := agent.Class(s)
	if err == nil && c != agent.ClassInteractive && c != agent.ClassBatch {
		err = fmt.Errorf("option class must be \"interactive\" or \"batch\", got %q", c)
	}
	return c, err
}

// agentSchema reads the schema option, a table or a JSON string, and checks that it is a
// JSON Schema object that compiles.
func (v *vm) agentSchema(val glua.LValue) (any, error) {
	var sch any
	var err error
	switch s := val.(type) {
	case glua.LString:
		dec, derr := v.codec.Decode([]byte(s))
		if derr != nil {
			return nil, fmt.Errorf("option schema is not valid JSON: %v", derr)
		}
		sch, err = v.codec.FromLua(dec)
	case *glua.LTable:
		sch, err = v.codec.FromLua(s)
	default:
		return nil, fmt.Errorf("option schema must be a table or a JSON string, got a %s", val.Type())
	}
	if err != nil {
		return sch, err
	}
	if _, isObj := sch.(map[string]any); !isObj {
		return sch, errors.New("option schema must be a JSON Schema object, such as {type=\"object\", properties={...}}")
	}
	if _, err := schema.Compile(sch); err != nil {
		return sch, fmt.Errorf("option schema is not a valid JSON Schema: %v", err)
	}
	return sch, nil
}

// agentTools reads the tools option, a list of tool names.
func agentTools(val glua.LValue) ([]string, error) {
	t, ok := val.(*glua.LTable)
	if !ok {
		return nil, fmt.Errorf("option tools must be a list of tool names, got a %s", val.Type())
	}
	var tools []string
	for i := 1; i <= t.Len(); i++ {
		s, ok := t.RawGetInt(i).(glua.LString)
		if !ok {
			return nil, fmt.Errorf("option tools[%d] must be a tool name (a string)", i)
		}
		tools = append(tools, string(s))
	}
	return tools, nil
}

// resultTable builds the agent result table of SPEC §2.1.
func (v *vm) resultTable(r agent.Result) *glua.LTable {
	L := v.L
	t := L.CreateTable(0, 16)
	out, err := v.codec.ToLua(r.Output)
	if err != nil {
		out = glua.LString(r.Text)
	}
	usage := L.CreateTable(0, 3)
	usage.RawSetString("cached", glua.LNumber(r.Usage.Cached))
	usage.RawSetString("input", glua.LNumber(r.Usage.Input))
	usage.RawSetString("output", glua.LNumber(r.Usage.Output))
	findings := v.codec.NewArray(len(r.Findings))
	for _, f := range r.Findings {
		ft := L.CreateTable(0, 4)
		ft.RawSetString("detail", glua.LString(f.Detail))
		ft.RawSetString("kind", glua.LString(f.Kind))
		ft.RawSetString("severity", glua.LString(f.Severity))
		ft.RawSetString("title", glua.LString(f.Title))
		findings.Append(ft)
	}
	// Set in sorted key order so pairs() over a result is deterministic; absent fields
	// (cost, error, session_id) are nil and not set at all.
	t.RawSetString("attempts", glua.LNumber(max(r.Attempts, 1)))
	t.RawSetString("backend", glua.LString(r.Backend))
	t.RawSetString("cached", glua.LBool(r.Cached))
	if r.Cost != nil {
		t.RawSetString("cost", glua.LNumber(*r.Cost))
	}
	if r.Error != "" {
		t.RawSetString("error", glua.LString(r.Error))
	}
	t.RawSetString("findings", findings)
	t.RawSetString("model", glua.LString(r.Model))
	t.RawSetString("ok", glua.LBool(r.OK()))
	if out != glua.LNil {
		t.RawSetString("output", out)
	}
	if r.SessionID != "" {
		t.RawSetString("session_id", glua.LString(r.SessionID))
	}
	t.RawSetString("status", glua.LString(r.Status))
	t.RawSetString("text", glua.LString(r.Text))
	t.RawSetString("tokens", glua.LNumber(r.Usage.Total()))
	t.RawSetString("usage", usage)
	return t
}
