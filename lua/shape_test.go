package lua

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
	"golang.org/x/tools/txtar"
)

func rep(s string, n int) string { return strings.Repeat(s, n) }

// TestCompileRefusesHostileShapes: every shape that made gopher-lua's parser or compiler
// take quadratic time or overflow the goroutine stack (a fatal error) is refused by the
// pre-scan with file:line, at a size far beyond the limit.
func TestCompileRefusesHostileShapes(t *testing.T) {
	const n = 1_000_000
	cases := []struct {
		name, src, where, msg string
	}{
		{"plus chain", "local s = x" + rep(" + x", 100_000), "x.lua:1", "expression too complex"},
		{"power chain", "local s = x" + rep(" ^ x", 100_000), "x.lua:1", "expression too complex"},
		{"or chain", "local s = x" + rep(" or x", 100_000), "x.lua:1", "expression too complex"},
		{"unary minus", "local s = " + rep("- ", n) + "x", "x.lua:1", "expression too complex"},
		{"not", "local s = " + rep("not ", n) + "x", "x.lua:1", "expression too complex"},
		{"length", "local s = " + rep("#", n) + "x", "x.lua:1", "expression too complex"},
		{"fields", "local s = a" + rep(".b", n), "x.lua:1", "expression too complex"},
		{"indexes", "local s = a" + rep("[1]", n), "x.lua:1", "expression too complex"},
		{"calls", "local s = f" + rep("()", n), "x.lua:1", "expression too complex"},
		{"string calls", "local s = f" + rep("'x'", n), "x.lua:1", "expression too complex"},
		{"methods", "local s = a" + rep(":b()", n), "x.lua:1", "expression too complex"},
		{"parenthesised chain", "local s = " + rep("(x + x + x + x + ", 60) + "x" + rep(")", 60), "x.lua:1", "expression too complex"},
		{"parentheses", "local s = " + rep("(", n) + "1" + rep(")", n), "x.lua:1", "nesting too deep"},
		{"tables", "local s = " + rep("{", n) + rep("}", n), "x.lua:1", "nesting too deep"},
		{"table keys", "local s = " + rep("{[", n), "x.lua:1", "nesting too deep"},
		{"call arguments", "local s = " + rep("f(", n), "x.lua:1", "nesting too deep"},
		{"functions", "\n" + rep("local function f()\n", 300) + rep("end\n", 300), "x.lua:201", "nesting too deep"}, // the parameter list is a level too
		{"function expressions", "local f = " + rep("function() return ", 300) + "1" + rep(" end", 300), "x.lua:1", "nesting too deep"},
		{"do blocks", rep("do ", 300_000) + rep("end ", 300_000), "x.lua:1", "nesting too deep"},
		{"ifs", rep("if x then\n", 300) + rep("end\n", 300), "x.lua:201", "nesting too deep"},
		{"elseifs", "if x then" + rep("\nelseif x then", 300) + "\nend", "x.lua:201", "nesting too deep"},
		{"whiles", rep("while x do ", 300) + rep("end ", 300), "x.lua:1", "nesting too deep"},
		{"repeats", rep("repeat ", 300) + rep("until x ", 300), "x.lua:1", "nesting too deep"},
		{"too large", "local s = [[" + rep("x", MaxScriptBytes) + "]]", "x.lua", "script too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile("x.lua", "x.lua", []byte(c.src))
			var se *ScriptError
			if !errors.As(err, &se) || se.Kind != KindSyntax || se.Where != c.where || !strings.Contains(se.Msg, c.msg) {
				t.Fatalf("Compile = %v, want a syntax error at %s: %s...", err, c.where, c.msg)
			}
		})
	}
}

// TestCompileAcceptsShapesAtTheLimits: scripts right at the limits, and long scripts of
// ordinary statements, still compile.
func TestCompileAcceptsShapesAtTheLimits(t *testing.T) {
	const d = MaxSyntaxDepth - 1 // the function main() around every case is one level
	cases := map[string]string{
		"199 operators":     "local s = x" + rep(" + x", MaxArithmeticOps-1) + "\nlocal c = 'a'" + rep(" .. 'a'", 150),
		"long condition":    "if " + rep("x == 'a' or ", 500) + "x == 'b' then end",
		"concat chain":      "local s = x" + rep(" .. x", 300_000),
		"long method chain": "local s = obj" + rep(":m(1)", 400),
		"separate chains":   rep("local s = x"+rep(" + x", 150)+"\n", 100) + rep("f(x .. x .. x) g(x .. x) ", 500),
		"statements":        rep("x = x + 1 f(x) t.a.b = t.c[1]:m(2)\n", 20_000),
		"deep parentheses":  "local s = " + rep("(", d-1) + "1" + rep(")", d-1),
		"deep tables":       "local s = " + rep("{", d-1) + rep("}", d-1),
		"deep blocks":       rep("do ", d-1) + rep("end ", d-1),
		"deep functions":    rep("local function f() ", d-1) + rep("end ", d-1),
		"elseifs":           "if x then" + rep(" elseif x then", d-2) + " end",
		"many elseif ifs":   rep("if x then elseif x then elseif x then else end\n", 500),
		"long table":        "local t = {" + rep("1, 'a', {x = 1}, ", 50_000) + "}",
		"long strings":      "local s = [==[" + rep("((((", 10_000) + "]==] -- " + rep(")", 10_000) + "\nlocal u = '" + rep("{", 1000) + "'",
		"calls in args":     "f(" + rep("g(x) + ", 100) + "1, " + rep("h(y) .. ", 100) + "'z')",
		"method statements": rep("obj:m(1):n(2)\n", 10_000) + rep("a.b.c.d = e.f.g\n", 10_000),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			src := "local x, y, f, g, h, t, obj, a, e = 1, 2\nfunction main()\n" + body + "\nend\n"
			if _, err := Compile("x.lua", "x.lua", []byte(src)); err != nil {
				t.Fatalf("Compile: %v", err)
			}
		})
	}
}

// TestCompileAcceptsTheRepositoryScripts: the examples, the bundled workflows and the
// scripts of the CLI tests are all within the limits.
func TestCompileAcceptsTheRepositoryScripts(t *testing.T) {
	n := 0
	check := func(name string, src []byte) {
		n++
		if err := checkShape(name, src); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir() && (d.Name() == ".git" || d.Name() == "hostile"):
			return filepath.SkipDir
		case strings.HasSuffix(p, ".lua"):
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			check(p, src)
		case strings.HasSuffix(p, ".txtar"):
			ar, err := txtar.ParseFile(p)
			if err != nil {
				return err
			}
			for _, f := range ar.Files {
				if strings.HasSuffix(f.Name, ".lua") {
					check(p+"/"+f.Name, f.Data)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found only %d scripts; is the walk looking in the right place?", n)
	}
}

// normalScript is about size bytes of ordinary workflow code: functions, tables, loops,
// short concatenations and calls.
func normalScript(size int) []byte {
	var b strings.Builder
	b.WriteString("function main()\n  local results = {}\nend\n")
	for i := 0; b.Len() < size; i++ {
		n := strconv.Itoa(i)
		b.WriteString("function step" + n + `(items, opts)
  local out = {}
  for i, item in ipairs(items) do
    if item.kind == "a" then
      out[#out + 1] = string.format("%s-%d", item.name, i) .. " (" .. tostring(opts.n + i * 2) .. ")"
    elseif item.kind == "b" and not opts.skip then
      out[#out + 1] = { name = item.name, score = (item.score or 0) / 2, tags = { "x", "y" } }
    else
      log("skipping " .. item.name)
    end
  end
  return out
end
`)
	}
	return []byte(b.String())
}

// BenchmarkCompile1MB is the compile time of a 1 MB ordinary script, pre-scan included;
// BenchmarkShape1MB the pre-scan alone.
func BenchmarkCompile1MB(b *testing.B) {
	src := normalScript(1 << 20)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Compile("x.lua", "x.lua", src); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkShape1MB(b *testing.B) {
	src := normalScript(1 << 20)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if err := checkShape("x.lua", src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileConcat300k compiles 300,000 `..` in one expression (2.4 MB): minutes
// with gopher-lua's own concat code generation, linear with luft's rewrite.
func BenchmarkCompileConcat300k(b *testing.B) {
	src := []byte("function main() end\nlocal s = 'ab'" + rep(" .. 'ab'", 300_000))
	for b.Loop() {
		if _, err := Compile("x.lua", "x.lua", src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGopherLua1MB is the same 1 MB script through gopher-lua alone: the cost of
// the pre-scan is the difference to BenchmarkCompile1MB.
func BenchmarkGopherLua1MB(b *testing.B) {
	src := normalScript(1 << 20)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		chunk, err := parse.Parse(bytes.NewReader(src), "x.lua")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := glua.Compile(chunk, "x.lua"); err != nil {
			b.Fatal(err)
		}
	}
}
