package lua

import "testing"

func TestExplainMissingNames(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "an undefined global called", src: `function main()
  converge2({"a"})
end`, kind: KindRuntime, errSub: "test.lua:2: `converge2` is not defined (attempt to call a nil value"},
		{name: "io", src: `function main() local f = io.open("x") end`, kind: KindRuntime,
			errSub: "test.lua:1: `io` is not available in workflow scripts; give an agent a tool instead"},
		{name: "os under pcall", src: `function main() local ok, e = pcall(function() return os.time() end) report(e) end`,
			want: `"test.lua:1: ` + "`os`" + ` is not available in workflow scripts; use luft.now() for the time and args for settings; give an agent a tool for anything on the host"`},
		{name: "require", src: `function main() require("json") end`, kind: KindRuntime, errSub: "`require` is not available in workflow scripts"},
		{name: "load", src: `function main() load("return 1")() end`, kind: KindRuntime, errSub: "`load` is not available in workflow scripts"},
		{name: "an undefined table indexed", src: `function main() return cfg.name end`, kind: KindRuntime,
			errSub: "`cfg` is not defined (attempt to index a nil value with key 'name')"},
		{name: "a missing library field called", src: `function main() string.trim(" a ") end`, kind: KindRuntime,
			errSub: "`string.trim` is not defined (attempt to call a nil value)"},
		{name: "in a parallel slot", src: `function main()
  local r = parallel({1}, function() nope() end)
  report(r[1].error)
end`, want: "\"test.lua:2: `nope` is not defined (attempt to call a nil value; a typo, or a function defined only later?)\""},
		{name: "reading an undefined global is nil", src: `function main() report({undefined_name == nil, type(io), os}) end`, want: `[true,"nil"]`},
		{name: "at the top level", src: "local json2 = require(\"json\")\nfunction main() end", kind: KindInvalid,
			errSub: "test.lua:1: `require` is not available in workflow scripts"},
		{name: "a parameter keeps the plain message", src: `function main() local function f(cb) cb() end f(nil) end`,
			kind: KindRuntime, errSub: "attempt to call a non-function object"},
		{name: "a nil local keeps the plain message", src: `function main() local f f() end`, kind: KindRuntime, errSub: "attempt to call a non-function object"},
	})
}

func TestBlankLiterals(t *testing.T) {
	for in, want := range map[string]string{
		`local s = getmetatable("").rep("x", 3e9)`: `local s = getmetatable("").rep(" ", 3e9)`,
		`f('a\'b') -- g()`:                         `f('    ') `,
		`h([[x(]]) .. y"z"`:                        `h([[  ]]) .. y" "`,
	} {
		if got := blankLiterals(in); got != want {
			t.Errorf("blankLiterals(%q) = %q, want %q", in, got, want)
		}
	}
}
