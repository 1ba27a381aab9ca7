package lua

import (
	"fmt"
	"math"
	"strings"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/schema"
	glua "github.com/yuin/gopher-lua"
)

// converge(items [, opts]) is Luft's adversarial convergence (SPEC §2): producer agents
// turn items into findings, adversary agents try to refute each finding, a vote keeps the
// survivors, and the survivors are re-examined in the next round until nothing changes or
// max_rounds is reached.
//
// It is written in Lua on top of the agent and parallel wrappers, so every call it makes
// is an ordinary agent call: journaled under a call key of the calling branch, admitted
// by the scheduler, replayed on resume, counted against budgets. Only option checking and
// its two events are in Go. The chunk is named "<converge>", and positions skip it, so an
// error or an agent call inside converge is reported at the script line that called it.
const convergeSrc = `
local agent, parallel, check, emit, encode, array, gsub = ...
local ipairs, pairs, type = ipairs, pairs, type

local function text_of(v)
  if type(v) == "string" then return v end
  return encode(v)
end

-- fill replaces {key} in a prompt template; a function replacement keeps % in the value
-- literal.
local function fill(template, key, value)
  return (gsub(template, "{" .. key .. "}", function() return value end))
end

local function call(o, role, round, n, prompt, sch)
  return agent{ name = "converge " .. role .. " r" .. round .. "." .. n, role = role, prompt = prompt,
    schema = sch, model = o.model, backend = o.backend }
end

local function converge(items, opts)
  local o = check(items, opts)
  emit("converge_started", { items = #items, max_rounds = o.max_rounds, adversarial = o.adversarial })
  local produce_schema = { type = "object", required = { "findings" },
    properties = { findings = { type = "array", items = o.finding_schema } } }
  local verdict_schema = { type = "object", required = { "refuted", "reason" },
    properties = { refuted = { type = "boolean" }, reason = { type = "string" } } }

  local current, current_keys = items, nil
  local final, stats, converged = array({}), array({}), false
  for round = 1, o.max_rounds do
    -- Producers: producers_per_item calls per item (per surviving finding after round 1).
    local jobs = {}
    for i, it in ipairs(current) do
      for p = 1, o.producers_per_item do jobs[#jobs + 1] = { item = it, n = #jobs + 1 } end
    end
    local produced = parallel(jobs, function(job)
      local prompt
      if round == 1 then
        prompt = fill(o.producer_prompt, "item", text_of(job.item))
      else
        prompt = fill(o.recheck_prompt, "finding", text_of(job.item))
      end
      return call(o, "producer", round, job.n, prompt, produce_schema)
    end)
    local found, keys, failed, answered = {}, {}, 0, 0
    local function add(f)
      if type(f) ~= "table" then return end
      local k = encode(f)
      if not keys[k] then
        keys[k] = true
        found[#found + 1] = f
      end
    end
    for _, r in ipairs(produced) do
      if r.ok == false then
        failed = failed + 1
      else
        answered = answered + 1
        if type(r.output) == "table" and type(r.output.findings) == "table" then
          for _, f in ipairs(r.output.findings) do add(f) end
        end
        for _, f in ipairs(r.findings or {}) do
          if f.title ~= "" then add({ title = f.title, detail = f.detail, severity = f.severity }) end
        end
      end
    end
    if answered == 0 and #jobs > 0 then
      -- Every producer failed: nothing was learned this round, so it cannot converge.
      stats[#stats + 1] = { round = round, items = #current, findings = 0, surviving = 0, refuted = 0, failed = failed }
      break
    end

    -- Adversaries: each finding is challenged adversaries_per_finding times; a verdict
    -- that fails counts as a vote against the finding (it was not upheld).
    local survivors = found
    if o.adversarial and #found > 0 then
      local votes = {}
      for fi, f in ipairs(found) do
        for a = 1, o.adversaries_per_finding do votes[#votes + 1] = { f = f, fi = fi, n = #votes + 1 } end
      end
      local verdicts = parallel(votes, function(v)
        return call(o, "adversary", round, v.n, fill(o.adversary_prompt, "finding", text_of(v.f)), verdict_schema)
      end)
      local upheld = {}
      for k, r in ipairs(verdicts) do
        if r.ok == false then
          failed = failed + 1
        elseif type(r.output) == "table" and r.output.refuted == false then
          upheld[votes[k].fi] = (upheld[votes[k].fi] or 0) + 1
        end
      end
      survivors = {}
      for fi, f in ipairs(found) do
        if (upheld[fi] or 0) / o.adversaries_per_finding >= o.vote_threshold then survivors[#survivors + 1] = f end
      end
    end
    stats[#stats + 1] = { round = round, items = #current, findings = #found, surviving = #survivors,
      refuted = #found - #survivors, failed = failed }
    final = array(survivors)

    -- Converged: nothing survived, or the round's survivors are the findings it started from.
    local skeys, same = {}, round > 1 and #survivors == #current
    for _, f in ipairs(survivors) do skeys[encode(f)] = true end
    if same then
      for k in pairs(current_keys) do if not skeys[k] then same = false end end
    end
    if #survivors == 0 or same then
      converged = true
      break
    end
    current, current_keys = survivors, skeys
  end
  emit("converge_done", { rounds = #stats, converged = converged, findings = #final })
  return { converged = converged, rounds = #stats, findings = final, round_stats = stats }
end

return converge
`

// Default prompts of converge; {item} and {finding} are replaced by the value (a string
// as it is, anything else as JSON).
const (
	convergeProducerPrompt  = "Examine the following and report each distinct finding (a problem, a claim that needs checking, a fact worth keeping) as an entry of `findings`. Report nothing you cannot support.\n\n{item}"
	convergeRecheckPrompt   = "Re-examine this finding. If it holds, restate it (corrected and made more precise if needed) as the only entry of `findings`; if it does not hold, return no findings.\n\n{finding}"
	convergeAdversaryPrompt = "Try to refute this finding. Set `refuted` to true only if it is wrong, unsupported or not worth reporting, and say why in `reason`.\n\n{finding}"
)

var convergeOptions = []string{"adversarial", "vote_threshold", "max_rounds", "producers_per_item", "adversaries_per_finding",
	"model", "backend", "schema", "producer_prompt", "adversary_prompt", "recheck_prompt"}

// convergeProto is the converge chunk, compiled once for the process.
var convergeProto = sharedProto("<converge>", convergeSrc)

// loadConverge runs the converge chunk with the wrappers it builds on and returns the
// function scripts see.
func (v *vm) loadConverge(json *glua.LTable) (*glua.LFunction, error) {
	L := v.L
	proto, err := convergeProto()
	if err != nil {
		return nil, fmt.Errorf("lua: converge: %w", err)
	}
	L.Push(L.NewFunctionFromProto(proto))
	L.Push(v.wrap.RawGetString("agent"))
	L.Push(v.wrap.RawGetString("parallel"))
	L.Push(L.NewFunction(v.convergeCheck))
	L.Push(L.NewFunction(v.convergeEvent))
	L.Push(json.RawGetString("encode"))
	L.Push(json.RawGetString("array"))
	// The sandbox's own (interruptible) gsub: the stock string globals are gone by now.
	L.Push(v.libs["string"].RawGetString("gsub"))
	if err := L.PCall(7, 1, nil); err != nil {
		return nil, fmt.Errorf("lua: converge: %w", err)
	}
	conv := L.Get(-1).(*glua.LFunction)
	L.Pop(1)
	return conv, nil
}

// convergeCheck validates converge's arguments and returns the options with defaults
// filled in. A mistake ends the run (as invalid agent options do).
func (v *vm) convergeCheck(L *glua.LState) int {
	bad := func(format string, args ...any) int {
		return v.raiseFatalKind(L, KindRuntime, "converge: "+format, args...)
	}
	items, ok := L.Get(1).(*glua.LTable)
	if !ok {
		return bad("argument 1 must be a list of items, got a %s", L.Get(1).Type())
	}
	if msg := v.convergeItems(items); msg != "" {
		return bad("%s", msg)
	}
	if v.current == nil || v.current.topLevel {
		v.raiseAt(L, "converge() is not allowed in a script's top-level code; call it from main() (top-level code only defines meta and functions)")
	}
	o := v.convergeDefaults(L)
	switch opts := L.Get(2).(type) {
	case *glua.LNilType:
	case *glua.LTable:
		if msg := v.setConvergeOptions(o, opts); msg != "" {
			return bad("%s", msg)
		}
	default:
		return bad("argument 2 must be an options table, got a %s", L.Get(2).Type())
	}
	L.Push(o)
	return 1
}

// convergeItems checks that every item can go into a producer's prompt as JSON: one that
// cannot (a cycle, a function) is refused here, where the caller sees why, rather than as
// a producer that failed inside the round. It returns the problem, or "".
func (v *vm) convergeItems(items *glua.LTable) string {
	for i := 1; i <= items.Len(); i++ {
		it := items.RawGetInt(i)
		if _, isStr := it.(glua.LString); isStr {
			continue
		}
		if _, err := v.codec.FromLua(it); err != nil {
			return fmt.Sprintf("item %d cannot be put in a prompt: %v", i, err)
		}
	}
	return ""
}

// convergeDefaults is the options table with every default set.
func (v *vm) convergeDefaults(L *glua.LState) *glua.LTable {
	o := L.CreateTable(0, 12)
	o.RawSetString("adversarial", glua.LTrue)
	o.RawSetString("vote_threshold", glua.LNumber(0.7))
	rounds := 3
	if v.rounds > 0 {
		rounds = v.rounds
	}
	o.RawSetString("max_rounds", glua.LNumber(rounds))
	o.RawSetString("producers_per_item", glua.LNumber(1))
	o.RawSetString("adversaries_per_finding", glua.LNumber(1))
	o.RawSetString("producer_prompt", glua.LString(convergeProducerPrompt))
	o.RawSetString("recheck_prompt", glua.LString(convergeRecheckPrompt))
	o.RawSetString("adversary_prompt", glua.LString(convergeAdversaryPrompt))
	o.RawSetString("finding_schema", defaultFindingSchema(L))
	return o
}

// defaultFindingSchema is the JSON Schema of one finding: a title, and optionally a
// detail and a severity (low, medium or high).
func defaultFindingSchema(L *glua.LState) *glua.LTable {
	finding := L.CreateTable(0, 3)
	finding.RawSetString("type", glua.LString("object"))
	props := L.CreateTable(0, 3)
	for _, name := range []string{"title", "detail"} {
		p := L.CreateTable(0, 1)
		p.RawSetString("type", glua.LString("string"))
		props.RawSetString(name, p)
	}
	sev := L.CreateTable(0, 2)
	sev.RawSetString("type", glua.LString("string"))
	sev.RawSetString("enum", L.NewTable())
	for _, s := range []string{"low", "medium", "high"} {
		sev.RawGetString("enum").(*glua.LTable).Append(glua.LString(s))
	}
	props.RawSetString("severity", sev)
	finding.RawSetString("properties", props)
	req := L.NewTable()
	req.Append(glua.LString("title"))
	finding.RawSetString("required", req)
	return finding
}

// setConvergeOptions sets the script's options over the defaults in o. It returns the
// first problem, or "".
func (v *vm) setConvergeOptions(o, opts *glua.LTable) string {
	var msg string
	opts.ForEach(func(k, val glua.LValue) {
		if msg == "" {
			msg = v.setConvergeOption(o, k.String(), val)
		}
	})
	return msg
}

// setConvergeOption checks one option and sets it in o; it returns the problem, or "".
func (v *vm) setConvergeOption(o *glua.LTable, key string, val glua.LValue) string {
	whole := func(lo, hi int) string {
		n, ok := val.(glua.LNumber)
		if !ok || !wholeIn(float64(n), float64(lo), float64(hi)) {
			return fmt.Sprintf("option %s must be a whole number from %d to %d, got %s", key, lo, hi, val.String())
		}
		o.RawSetString(key, n)
		return ""
	}
	switch key {
	case "adversarial":
		b, ok := val.(glua.LBool)
		if !ok {
			return fmt.Sprintf("option adversarial must be true or false, got %s", val.String())
		}
		o.RawSetString(key, b)
	case "vote_threshold":
		n, ok := val.(glua.LNumber)
		if !ok || n < 0 || n > 1 || math.IsNaN(float64(n)) {
			return fmt.Sprintf("option vote_threshold must be a number from 0 to 1, got %s", val.String())
		}
		o.RawSetString(key, n)
	case "max_rounds":
		return whole(1, 20)
	case "producers_per_item", "adversaries_per_finding":
		return whole(1, 16)
	case "model", "backend", "producer_prompt", "adversary_prompt", "recheck_prompt":
		s, ok := val.(glua.LString)
		if !ok || strings.TrimSpace(string(s)) == "" {
			return fmt.Sprintf("option %s must be a non-empty string, got %s", key, val.String())
		}
		o.RawSetString(key, s)
	case "schema":
		sch, err := v.schemaValue(val)
		if err != nil {
			return "option schema (the JSON Schema of one finding): " + err.Error()
		}
		o.RawSetString("finding_schema", sch)
	default:
		return unknownOption(key, convergeOptions)
	}
	return ""
}

// schemaValue checks a schema given as a table or a JSON string and returns it as a table.
func (v *vm) schemaValue(val glua.LValue) (glua.LValue, error) {
	if s, ok := val.(glua.LString); ok {
		dec, err := v.codec.Decode([]byte(s))
		if err != nil {
			return nil, fmt.Errorf("not valid JSON: %v", err)
		}
		val = dec
	}
	if _, ok := val.(*glua.LTable); !ok {
		return nil, fmt.Errorf("must be a table or a JSON string, got a %s", val.Type())
	}
	goVal, err := v.codec.FromLua(val)
	if err != nil {
		return nil, err
	}
	if _, ok := goVal.(map[string]any); !ok {
		return nil, fmt.Errorf("must be a JSON Schema object, such as {type=\"object\", properties={...}}")
	}
	if _, err := schema.Compile(goVal); err != nil {
		return nil, fmt.Errorf("not a valid JSON Schema: %v", err)
	}
	return val, nil
}

// convergeEvent emits converge_started or converge_done.
func (v *vm) convergeEvent(L *glua.LState) int {
	typ := L.CheckString(1)
	if typ != event.ConvergeStarted && typ != event.ConvergeDone {
		L.RaiseError("converge: unknown event %q (internal error)", typ)
	}
	data, err := v.codec.FromLua(L.CheckTable(2))
	if err != nil {
		L.RaiseError("converge: %s", err)
	}
	m, _ := data.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	m["phase_id"] = v.phaseID()
	v.emit(typ, m)
	return 0
}
