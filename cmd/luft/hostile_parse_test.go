package main

import (
	"os"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// genluaShapes write a script with a chunk repeated n times (testscript has no loops).
// Each starts with `function main() end` on line 1, so the hostile part is on line 2.
var genluaShapes = map[string]func(n int) string{
	// Operator chains: quadratic in gopher-lua's compiler.
	"concat":  func(n int) string { return "local s = 'ab'" + strings.Repeat(" .. 'ab'", n) },
	"plus":    func(n int) string { return "local x = 1 local s = x" + strings.Repeat(" + x", n) },
	"or":      func(n int) string { return "local x = 1 local s = x" + strings.Repeat(" or x", n) },
	"elseifs": func(n int) string { return "if x then" + strings.Repeat(" elseif x then", n) + " end" },
	// Nesting: each level a frame of gopher-lua's recursive compiler (a fatal stack
	// overflow around a million).
	"not":       func(n int) string { return "local s = " + strings.Repeat("not ", n) + "x" },
	"neg":       func(n int) string { return "local s = " + strings.Repeat("- ", n) + "x" },
	"calls":     func(n int) string { return "local s = f" + strings.Repeat("()", n) },
	"fields":    func(n int) string { return "local s = a" + strings.Repeat(".b", n) },
	"parens":    func(n int) string { return "local s = " + strings.Repeat("(", n) + "1" + strings.Repeat(")", n) },
	"tables":    func(n int) string { return "local s = " + strings.Repeat("{", n) + strings.Repeat("}", n) },
	"functions": func(n int) string { return strings.Repeat("local function f() ", n) + strings.Repeat("end ", n) },
	"dos":       func(n int) string { return strings.Repeat("do ", n) + strings.Repeat("end ", n) },
	// Size: n bytes in one long string.
	"big": func(n int) string { return "local s = [[" + strings.Repeat("x", n) + "]]" },
	// An ordinary script of about n bytes that must still compile.
	"normal": func(n int) string {
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			b.WriteString("function step" + strconv.Itoa(i) + "(t) local out = {} for i, v in ipairs(t) do out[#out + 1] = v.name .. ':' .. tostring(i) end return out end\n")
		}
		return b.String()
	},
}

// cmdGenlua writes a generated Lua script for the parse-* cases of the hostile corpus.
//
//	genlua FILE SHAPE N
func cmdGenlua(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: genlua FILE SHAPE N")
	}
	gen, ok := genluaShapes[args[1]]
	if !ok {
		ts.Fatalf("genlua: unknown shape %q", args[1])
	}
	n, err := strconv.Atoi(args[2])
	if err != nil || n < 0 {
		ts.Fatalf("genlua: bad N %q", args[2])
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte("function main() report('ran') end\n"+gen(n)+"\n"), 0o644))
}
