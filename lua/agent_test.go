package lua

import (
	"testing"
)

func TestAgent(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "result table", src: `function main()
  local r = agent{prompt="hi", name="a", system="be brief", model="m2", max_tokens=10, temperature=0.5,
    timeout_ms=1000, retries=1, role="r", description="d", tools={"read_file"}, session_id="s1", class="batch"}
  report({ok=r.ok, status=r.status, output=r.output, text=r.text, tokens=r.tokens, usage=r.usage,
    cached=r.cached, attempts=r.attempts, backend=r.backend, model=r.model, findings=r.findings, err=r.error})
end`, want: `{"attempts":1,"backend":"fake","cached":false,"findings":[],"model":"m","ok":true,"output":"echo: hi","status":"ok","text":"echo: hi","tokens":5,"usage":{"cached":0,"input":2,"output":3}}`,
			check: func(t *testing.T, h *fakeHost) {
				r := h.reqs[0]
				if r.System != "be brief" || r.Model != "m2" || r.MaxTokens != 10 || *r.Temperature != 0.5 || r.TimeoutMS != 1000 ||
					r.Retries != 1 || r.Tools[0] != "read_file" || r.SessionID != "s1" || r.Class != "batch" || r.Role != "r" {
					t.Fatalf("request options not carried: %+v", r)
				}
				if h.calls[0].Hash != r.Hash() || h.calls[0].Where != "test.lua:2" {
					t.Fatalf("call = %+v", h.calls[0])
				}
			}},
		{name: "a failed call returns its result", src: `function main()
  local r = agent{prompt="fail now", name="x"}
  report({ok=r.ok, status=r.status, err=r.error, tokens=r.tokens, usage=r.usage, findings=r.findings, output=r.output})
end`, want: `{"err":"scripted failure","findings":[],"ok":false,"status":"error","tokens":0,"usage":{"cached":0,"input":0,"output":0}}`},
		{name: "an unchecked failed call stops at its missing output", src: `function main()
  report("got: " .. agent{prompt="fail now", name="x"}.output)
end`, kind: KindRuntime, errSub: `test.lua:2:`},
		{name: "pcall sees a failed call as a value", src: `function main()
  local ok, r = pcall(agent, {prompt="fail"})
  local ok2, r2 = pcall(agent, {prompt="fine"})
  report({ok=ok, failed=r.ok, ok2=ok2, out=r2.output})
end`, want: `{"failed":false,"ok":true,"ok2":true,"out":"echo: fine"}`},
		{name: "missing prompt ends the run", src: `function main()
  local ok, err = pcall(agent, {name="x"})
  report(err)
end`, kind: KindRuntime, errSub: `test.lua:2: agent: missing required 'prompt' (a non-empty string)`},
		{name: "invalid schema ends the run", src: `function main()
  pcall(agent, {prompt="x", schema={type="objekt"}})
end`, kind: KindRuntime, errSub: `option schema is not a valid JSON Schema`},
		{name: "unknown option", src: `function main() agent{prompt="x", promt="y"} end`, kind: KindRuntime, errSub: `unknown option "promt": did you mean "prompt"? (known: prompt,`},
		{name: "unknown option, far from any", src: `function main() agent{prompt="x", colour="y"} end`, kind: KindRuntime, errSub: `unknown option "colour" (known: prompt,`},
		{name: "bad option type", src: `function main() agent{prompt="x", max_tokens="10"} end`, kind: KindRuntime, errSub: "max_tokens must be a number"},
		{name: "bad class", src: `function main() agent{prompt="x", class="urgent"} end`, kind: KindRuntime, errSub: `class must be "interactive" or "batch"`},
		{name: "schema as table and JSON string", src: `function main()
  local a = agent{prompt="t", schema={type="object"}}
  local b = agent{prompt="s", schema='{"type":"object"}'}
  report({a=a.output.answer, b=b.output.n})
end`, want: `{"a":"t","b":1}`},
		{name: "schema not JSON", src: `function main() agent{prompt="x", schema="{nope"} end`, kind: KindRuntime, errSub: "schema is not valid JSON"},
		{name: "identical prompts are distinct calls", src: `function main()
  local a = agent{prompt="same"}
  local b = agent{prompt="same"}
  report(a.output == b.output)
end`, want: `true`, keys: []string{"main/1", "main/2"}},
		{name: "journal hit returns without yielding", src: `function main()
  local r = agent{prompt="cached"}
  report(r.output)
end`, want: `"echo: cached"`, prepare: func(h *fakeHost) { h.sync = true }},
		{name: "tail call at main's root", src: `function main() return report(agent{prompt="tail"}.output) end`, want: `"echo: tail"`},
	})
}
