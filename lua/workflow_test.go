package lua

import (
	"testing"
)

func TestWorkflowPrimitive(t *testing.T) {
	files := func(h *fakeHost) {
		h.files["sub/child.lua"] = `function main() report({got=args.x, out=agent{prompt="child "..args.x}.output}) end`
		h.files["sub/nomain.lua"] = `x = 1`
		h.files["sub/broken.lua"] = `function main() oops( end`
		h.files["sub/nested.lua"] = `function main() report(workflow("child.lua", {x="deep"})) end`
	}
	runCases(t, []scriptCase{
		{name: "relative path, args and report", src: `function main()
  local a = agent{prompt="parent"}
  local r = workflow("sub/child.lua", {x="hi"})
  report(r)
end`, prepare: files, want: `{"got":"hi","out":"echo: child hi"}`, keys: []string{"main/1", "main/2/wf/1"}},
		{name: "child relative to its own folder", src: `function main() report(workflow("sub/nested.lua")) end`,
			prepare: files, want: `{"got":"deep","out":"echo: child deep"}`, keys: []string{"main/1/wf/1/wf/1"}},
		{name: "missing main in child is catchable", src: `function main()
  local ok, err = pcall(workflow, "sub/nomain.lua")
  report(err)
end`, prepare: files, errSub: "", want: `"test.lua:2: workflow \"sub/nomain.lua\" failed: sub/nomain.lua: the script defines no function main(); add ` + "`function main() ... end`" + ` (top-level code runs first, then main)"`},
		{name: "syntax error in child", src: `function main() workflow("sub/broken.lua") end`, prepare: files, kind: KindRuntime, errSub: "sub/broken.lua:1: syntax error"},
		{name: "missing file", src: `function main() workflow("sub/none.lua") end`, prepare: files, kind: KindRuntime, errSub: "no such file sub/none.lua"},
	})
}
