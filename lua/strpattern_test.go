package lua

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	glua "github.com/yuin/gopher-lua"
)

// patternTestState returns a plain Lua state with the stock libraries and the functions
// of patternLib in the global table P.
func patternTestState(t *testing.T, ctx func() context.Context, maxString int) *glua.LState {
	t.Helper()
	L := glua.NewState()
	t.Cleanup(L.Close)
	lib := L.NewTable()
	onLimit := func(L *glua.LState, format string, args ...any) int {
		L.RaiseError("LIMIT: "+format, args...)
		return 0
	}
	for name, fn := range patternLib(ctx, maxString, onLimit) {
		lib.RawSetString(name, L.NewFunction(fn))
	}
	L.SetGlobal("P", lib)
	return L
}

// runPatternSnippet runs body as a function of S and returns its results (or error)
// rendered as text.
func runPatternSnippet(t *testing.T, L *glua.LState, body string, S glua.LValue) string {
	t.Helper()
	fn, err := L.LoadString("local S = ...\n" + body)
	if err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	top := L.GetTop()
	L.Push(fn)
	L.Push(S)
	if err := L.PCall(1, glua.MultRet, nil); err != nil {
		L.SetTop(top)
		var apiErr *glua.ApiError
		if errors.As(err, &apiErr) {
			return "error: " + apiErr.Object.String()
		}
		return "error: " + err.Error()
	}
	var parts []string
	for i := top + 1; i <= L.GetTop(); i++ {
		switch v := L.Get(i).(type) {
		case glua.LString:
			parts = append(parts, fmt.Sprintf("%q", string(v)))
		default:
			parts = append(parts, v.Type().String()+":"+v.String())
		}
	}
	L.SetTop(top)
	return fmt.Sprintf("%d[%s]", len(parts), strings.Join(parts, ", "))
}

var patternStockCases = []string{
	// find
	`return S.find("hello world", "o")`,
	`return S.find("hello world", "o", 6)`,
	`return S.find("hello world", "o", -3)`,
	`return S.find("hello world", "o", -100)`,
	`return S.find("hello world", "o", 0)`,
	`return S.find("hello world", "l+")`,
	`return S.find("a.b", ".", 1, true)`,
	`return S.find("a.b", "%.")`,
	`return S.find("a+b", "+", 1, true)`,
	`return S.find("abc", "b", 1, false)`,
	`return S.find("key = value", "(%w+)%s*=%s*(%w+)")`,
	`return S.find("abc", "()b()")`,
	`return S.find("abc", "^b")`,
	`return S.find("abc", "^ab")`,
	`return S.find("abc", "c$")`,
	`return S.find("abc", "x")`,
	`return S.find("", "")`,
	`return S.find("abc", "")`,
	`return S.find("aaa", "a-", 2)`,
	`return S.find(12345, 34)`,
	`return S.find("abc", "[b-c]+", -2)`,
	// match
	`return S.match("hello 123 world", "%d+")`,
	`return S.match("key=val", "(%w+)=(%w+)")`,
	`return S.match("hello", "()ll()")`,
	`return S.match("hello", "l", -2)`,
	`return S.match("  trim me  ", "^%s*(.-)%s*$")`,
	`return S.match("f(a(b)c) x", "%b()")`,
	`return S.match("THE (quick) fox", "%f[%a]%a+")`,
	`return S.match("2024-01-15", "(%d+)-(%d+)-(%d+)")`,
	`return S.match("[[x]]", "%[(%b[])%]")`,
	`return S.match("hello", "(h)(e)(l)(l)(o)")`,
	`return (S.match("abc", "x"))`,
	`return S.match("a,b", "[^,]+", 2)`,
	`return S.match("x_1 = 2", "[%a_][%w_]*")`,
	`return S.match("ABCdef", "%u+"), S.match("ABCdef", "%l+"), S.match("0xFF", "0x(%x+)")`,
	`return S.match("a\0b", "()%z"), S.match("tab\there", "()%c"), S.match("a.b!c", "%p+")`,
	`return S.match("a-b", "[-]"), S.match("]", "[]]"), S.match("x y", "%S+$")`,
	`return S.match("hello hello", "(%w+) %1")`,
	`return S.match("aaab", "a-b"), S.match("aaab", "a*"), S.match("b", "a?b")`,
	// gmatch
	`local t = {} for w in S.gmatch("one two  three", "%a+") do t[#t+1] = w end return unpack(t)`,
	`local t = {} for k, v in S.gmatch("a=1, b=2", "(%w+)=(%w+)") do t[#t+1] = k .. ":" .. v end return table.concat(t, ";")`,
	`local t = {} for p in S.gmatch("abc", "()") do t[#t+1] = p end return unpack(t)`,
	`local n = 0 for _ in S.gmatch("abc", "") do n = n + 1 end return n`,
	`local t = {} for w in S.gmatch("^a^a", "^a") do t[#t+1] = w end return #t, t[1]`,
	// gsub
	`return S.gsub("hello world", "o", "0")`,
	`return S.gsub("hello world", "(%w+) (%w+)", "%2 %1 %0 %%")`,
	`return S.gsub("abc", "%w", "%1%1")`,
	`return S.gsub("$a and $b and $c", "%$(%w+)", {a="1", b=2})`,
	`return S.gsub("abc", "%w", function(c) if c == "b" then return nil end return c:upper() end)`,
	`return S.gsub("aaa", "a", "b", 2)`,
	`return S.gsub("ab", "()", "%1")`,
	`return S.gsub("ab", "", "-")`,
	`return S.gsub("abc", "%w*", "-")`,
	`return S.gsub("aaa", "^a", "x")`,
	`return S.gsub("hello", "l+", function(s) return #s end)`,
	`return S.gsub("abc", "%w", {a=false, c="C"})`,
	`return S.gsub("x = 1, y = 2", "(%w+) = (%w+)", "%2 = %1")`,
	`return S.gsub("abc", "b", "%%")`,
	`return S.gsub("f(a(b)) g(c)", "%b()", "[]")`,
	`return S.gsub("abc", "x", "y")`,
	`return S.gsub("a b c", "%s", "", 1)`,
	`return S.gsub("hello world", "%w+", "<%0>", 1)`,
	`return S.gsub("ab", "()", {[1]="x", [3]="z"})`,
	`return S.gsub("k1=v1;k2=v2", "(%w+)=(%w+)", function(k, v) return v .. "=" .. k end)`,
	`return S.gsub("abc", ".", {a=1})`,
	`return S.gsub("a%db", "%%d", "#")`,
	`return S.gsub("one two", "(%w+)", "[%1]")`,
	`return S.gsub("abc", "(b)()", "%2%1")`,
	`return S.gsub("THE (quick) fox", "%f[%a]%a+", "W")`,
	// errors
	`return S.find("a", "(")`,
	`return S.match("a", "[a")`,
	`return S.gsub("abc", "(b)", "%2")`,
	`return S.match("abc", "%1")`,
	`return S.find("abc", "%")`,
	`return S.find(nil, "x")`,
}

func TestPatternMatchesStock(t *testing.T) {
	L := patternTestState(t, nil, 1<<20)
	stock := L.GetGlobal("string")
	mine := L.GetGlobal("P")
	for _, body := range patternStockCases {
		want := runPatternSnippet(t, L, body, stock)
		got := runPatternSnippet(t, L, body, mine)
		if got != want {
			t.Errorf("%s\n got: %s\nwant: %s", body, got, want)
		}
	}
}

// Where gopher-lua's string library strays from Lua 5.1, patternLib follows Lua 5.1.
func TestPatternLua51Semantics(t *testing.T) {
	L := patternTestState(t, nil, 1<<20)
	mine := L.GetGlobal("P")
	for _, c := range []struct{ body, want string }{
		{`return select('#', S.match("abc", "x"))`, `1[number:1]`},
		{`return S.find("abc", "", 2)`, `2[number:2, number:1]`},
		{`return S.find("abc", "", 10)`, `2[number:4, number:3]`},
		{`return S.match("abc", "()", 10)`, `1[number:4]`},
		{`return S.find("abc", "c", 10, true)`, `1[nil:nil]`},
		{`return S.find("a.b", ".", 1, true, "extra")`, `2[number:2, number:2]`},
		{`return S.find("a.b", "b.", 1, 1)`, `1[nil:nil]`},
		{`return S.gsub("aaa", "a", "b", 0)`, `2["aaa", number:0]`},
		{`return S.gsub("aaa", "a", "b", -1)`, `2["aaa", number:0]`},
		{`return S.gsub("a1", "%d", 5)`, `2["a5", number:1]`},
		{`return S.gsub("abc", "b", "%x")`, `2["axc", number:1]`},
		{`return S.gsub("abc", "b", "x%")`, `2["ax%c", number:1]`},
		{`return S.gsub(123, "x", "y")`, `2["123", number:0]`},
		{`return select('#', S.gmatch("a", "a"))`, `1[number:1]`},
		{`return S.gsub("abc", "%w", function() return {} end)`, `error: <string>:2: invalid replacement value (a table)`},
		{`return S.gsub("abc", "b", function() return true end)`, `error: <string>:2: invalid replacement value (a boolean)`},
		{`local it = S.gmatch("ab", "%a") return it(), it(), it(), it()`, `3["a", "b", nil:nil]`},
		{`return S.gsub("abc", "b", true)`, `error: <string>:2: bad argument #3 to gsub (string or number or table or function expected, got boolean)`},
		{`return S.gsub("abc", "x", "%9")`, `2["abc", number:0]`},
	} {
		if got := runPatternSnippet(t, L, c.body, mine); got != c.want {
			t.Errorf("%s\n got: %s\nwant: %s", c.body, got, c.want)
		}
	}
}

// patternCountingCtx is a context whose Err starts failing after `after` calls, so a test
// stops a running match at a known point without sleeping.
type patternCountingCtx struct {
	context.Context
	after int64
	calls atomic.Int64
}

func (c *patternCountingCtx) Err() error {
	if c.calls.Add(1) > c.after {
		return context.Canceled
	}
	return nil
}

func TestPatternInterrupted(t *testing.T) {
	var current context.Context
	L := patternTestState(t, func() context.Context { return current }, 1<<20)
	mine := L.GetGlobal("P")
	for _, body := range []string{
		`return S.find(string.rep("a", 3000), "(.-)(.-)(.-)(.-)b")`,
		`return S.match(string.rep("a", 3000), "(.-)(.-)(.-)(.-)b")`,
		`for x in S.gmatch(string.rep("a", 3000), "(.-)(.-)(.-)(.-)b") do end`,
		`return S.gsub(string.rep("a", 3000), "(.-)(.-)(.-)(.-)b", "")`,
		`return S.find(string.rep("(", 100000), "%b()")`,
	} {
		ctx := &patternCountingCtx{Context: context.Background(), after: 10}
		current = ctx
		got := runPatternSnippet(t, L, body, mine)
		if !strings.HasPrefix(got, "error: ") || !strings.HasSuffix(got, "interrupted: context canceled") {
			t.Errorf("%s: %s", body, got)
		}
		if n := ctx.calls.Load(); n < 11 || n > 12 {
			t.Errorf("%s: Err called %d times", body, n)
		}
	}

	// The cause of the coroutine's context is in the message, and the match stops even
	// when it was cancelled before the call.
	cctx, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("run timed out"))
	current = cctx
	got := runPatternSnippet(t, L, `return S.find(string.rep("a", 3000), "(.-)(.-)(.-)(.-)b")`, mine)
	if !strings.HasSuffix(got, "interrupted: run timed out") {
		t.Errorf("got %s", got)
	}

	// gmatch asks for the context on every step: an iterator made under one context and
	// run under another stops when the second is cancelled.
	current = context.Background()
	if err := L.DoString(`it = P.gmatch(string.rep("a", 3000), "(.-)(.-)(.-)(.-)b")`); err != nil {
		t.Fatal(err)
	}
	current = &patternCountingCtx{Context: context.Background(), after: 2}
	if err := L.DoString(`it()`); err == nil || !strings.Contains(err.Error(), "interrupted: context canceled") {
		t.Errorf("err = %v", err)
	}
}

func TestPatternGsubLinear(t *testing.T) {
	L := patternTestState(t, nil, 16<<20)
	// 1 MB, 100,000 matches. The stock gsub copies the whole string once per match
	// (100,000 × 1 MB); this one must finish in a blink.
	src := strings.Repeat("aaaaaaaaa,", 100000)
	L.SetGlobal("src", glua.LString(src))
	if err := L.DoString(`
		r1, n1 = P.gsub(src, ",", ";")
		r2, n2 = P.gsub(src, "(a)(a+)", function(a, rest) return #rest end)
		r3, n3 = P.gsub(src, "a+", {aaaaaaaaa = "x"})
		n4 = 0
		for w in P.gmatch(src, "[^,]+") do n4 = n4 + 1 end
	`); err != nil {
		t.Fatal(err)
	}
	check := func(name, want string, n int) {
		t.Helper()
		r, c := L.GetGlobal("r"+name), L.GetGlobal("n"+name)
		if want != "" && r.String() != want {
			t.Errorf("r%s: %d bytes, want %d", name, len(r.String()), len(want))
		}
		if c != glua.LNumber(n) {
			t.Errorf("n%s = %v, want %d", name, c, n)
		}
	}
	check("1", strings.ReplaceAll(src, ",", ";"), 100000)
	check("2", strings.Repeat("8,", 100000), 100000)
	check("3", strings.Repeat("x,", 100000), 100000)
	check("4", "", 100000)
}

func TestPatternGsubLimit(t *testing.T) {
	L := patternTestState(t, nil, 1000)
	mine := L.GetGlobal("P")
	for _, c := range []struct{ body, want string }{
		// Exactly at the limit is fine.
		{`return #S.gsub(string.rep("x", 500), "x", "yy")`, `1[number:1000]`},
		{`return S.gsub(string.rep("x", 501), "x", "yy")`, `error: <string>:2: LIMIT: string limit (1000 bytes) exceeded by string.gsub`},
		{`return S.gsub(string.rep("x", 501), "x", function() return "yy" end)`, `error: <string>:2: LIMIT: string limit (1000 bytes) exceeded by string.gsub`},
		{`return S.gsub(string.rep("x", 501), "x", {x = "yy"})`, `error: <string>:2: LIMIT: string limit (1000 bytes) exceeded by string.gsub`},
		// One match whose replacement repeats a large capture: refused before it is built.
		{`return S.gsub(string.rep("x", 900), ".+", string.rep("%0", 100000))`, `error: <string>:2: LIMIT: string limit (1000 bytes) exceeded by string.gsub`},
		// Without a match the subject comes back as it is.
		{`return #S.gsub(string.rep("x", 2000), "y", "z")`, `1[number:2000]`},
	} {
		if got := runPatternSnippet(t, L, c.body, mine); got != c.want {
			t.Errorf("%s\n got: %s\nwant: %s", c.body, got, c.want)
		}
	}

	// The limit is reported as soon as it is passed: a callback is not called again.
	L2 := patternTestState(t, nil, 100)
	if err := L2.DoString(`calls = 0
		ok = pcall(P.gsub, string.rep("x", 1000), "x", function() calls = calls + 1 return "yy" end)`); err != nil {
		t.Fatal(err)
	}
	if calls := L2.GetGlobal("calls"); calls != glua.LNumber(51) {
		t.Errorf("callback called %v times", calls)
	}
}
