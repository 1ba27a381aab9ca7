package lua

import (
	"errors"
	"testing"
)

// FuzzCompile: Compile never panics on any bytes (a panic of gopher-lua's parser or
// compiler would take the host down; a stack overflow could not even be recovered), and
// every error it returns is a syntax error naming the file.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"function main() end", "function main() report(1 + 2 .. 'x') end", "local s = ((((1))))",
		"if a then elseif b then else end", "repeat until x", "local t = {[1] = {a = {b = f'x'}}}",
		"x = a.b.c:d(1)(2)[3]{4}'5'", "return function(...) return ... end", "::l:: goto l",
		"--[==[ ]] ]==] x = [=[ ]] ]=]", "x = 0x1p4 + 1e+5 - .5", "a = not not - - # t",
		"((((((((", "end end end", "until", "x = 'unterminated", "f(", "\x00\xff", "local function f() return f() end",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		_, err := Compile("x.lua", "x.lua", src)
		if err == nil {
			return
		}
		var se *ScriptError
		if !errors.As(err, &se) || se.Kind != KindSyntax || len(se.Where) < len("x.lua") || se.Where[:5] != "x.lua" {
			t.Fatalf("Compile error %T %v: want a syntax error naming x.lua", err, err)
		}
	})
}
