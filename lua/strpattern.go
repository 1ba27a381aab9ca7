package lua

import (
	"context"
	"errors"
	"strings"

	"github.com/luft-run/luft/lua/luapattern"
	glua "github.com/yuin/gopher-lua"
)

// patternLib returns string.find, string.match, string.gmatch and string.gsub built on
// luapattern, whose matcher can be stopped: gopher-lua's backtracks exponentially on
// patterns such as "(.-)(.-)(.-)(.-)b" inside one Go call that the VM's cancellation
// check, made between Lua instructions, never reaches.
//
// ctx returns the context of the coroutine running now; it is asked on every call (and
// on every step of a gmatch iterator). A match stopped by it raises the Lua error
// "interrupted: <cause>". gsub builds its result in linear time and calls
// onLimit(L, "string limit (%d bytes) exceeded by string.gsub", maxString) as soon as the
// result would grow beyond maxString bytes (maxString <= 0: no limit); gsub returns what
// onLimit returns.
//
// Semantics are Lua 5.1's, which are gopher-lua's except where gopher-lua's string library
// strays from Lua 5.1; there Lua 5.1 wins:
//   - match with no match returns one nil (gopher-lua: no value); gmatch returns one
//     function (gopher-lua: a function and a userdata).
//   - find and match clamp init to the string's length + 1, so find(s, "", init) returns
//     init, init-1 (gopher-lua: always 1, 0) and a pattern that matches the empty string
//     matches at the end.
//   - find is plain when its 4th argument is true whatever follows it, or when the
//     pattern has no special characters.
//   - gsub with n <= 0 replaces nothing (gopher-lua: 0 and negative n mean "all"); a
//     number is accepted as the replacement string; "%x" (x not a digit) in the
//     replacement is "x" (gopher-lua: "%x"); a table or function giving a value other
//     than a string, number, nil or false is an error (gopher-lua: replaced by ""); the
//     result is always a string.
//
// The matcher itself is gopher-lua's: %f is not a frontier pattern, '^' anchors gmatch
// patterns too.
func patternLib(ctx func() context.Context, maxString int, onLimit func(L *glua.LState, format string, args ...any) int) map[string]glua.LGFunction {
	p := &strPatLib{ctx: ctx, max: maxString, onLimit: onLimit}
	return map[string]glua.LGFunction{
		"find":   p.find,
		"match":  p.match,
		"gmatch": p.gmatch,
		"gsub":   p.gsub,
	}
}

// strPatSpecials are the characters that make string.find use the pattern matcher
// (SPECIALS in Lua 5.1's lstrlib.c).
const strPatSpecials = "^$*+?.([%-"

type strPatLib struct {
	ctx     func() context.Context
	max     int
	onLimit func(L *glua.LState, format string, args ...any) int
}

func (p *strPatLib) context() context.Context {
	if p.ctx != nil {
		if c := p.ctx(); c != nil {
			return c
		}
	}
	return context.Background()
}

// raise raises err as a Lua error. A match stopped by the context becomes
// "interrupted: <cause>".
func (p *strPatLib) raise(L *glua.LState, err error) {
	var se *luapattern.StoppedError
	if errors.As(err, &se) {
		L.RaiseError("interrupted: %v", se.Cause)
	}
	L.RaiseError("%s", err.Error())
}

func (p *strPatLib) compile(L *glua.LState, pat string) *luapattern.Pattern {
	cp, err := luapattern.Compile(pat)
	if err != nil {
		p.raise(L, err)
	}
	return cp
}

// first returns the first match of pat in s at or after byte offset init, or nil.
func (p *strPatLib) first(L *glua.LState, s, pat string, init int) *luapattern.MatchData {
	md, err := p.compile(L, pat).Matcher(s, init, luapattern.FindOpts{}).Next(p.context())
	if err != nil {
		p.raise(L, err)
	}
	return md
}

// strPatInit reads the init argument n of find and match as Lua 5.1 does: negative
// counts from the end, and the result is a byte offset clamped to [0, len].
func strPatInit(L *glua.LState, n, length int) int {
	init := L.OptInt(n, 1)
	if init < 0 {
		init = max(init+length+1, 0)
	}
	return min(max(init-1, 0), length)
}

// strPatValue returns capture idx (an even index into md) as a Lua value: a number for a
// position capture, else the captured string.
func strPatValue(s string, md *luapattern.MatchData, idx int) glua.LValue {
	if md.IsPosCapture(idx) {
		return glua.LNumber(md.Capture(idx))
	}
	return glua.LString(s[md.Capture(idx):md.Capture(idx+1)])
}

// strPatCapture is capture i (1-based; 0 is the whole match) for a gsub replacement: %1
// is the whole match when the pattern has no captures, any other missing capture is an
// error.
func strPatCapture(L *glua.LState, s string, md *luapattern.MatchData, i int) glua.LValue {
	idx := 2 * i
	if idx >= md.CaptureLength() && idx == 2 {
		idx = 0
	}
	if idx >= md.CaptureLength() {
		L.RaiseError("invalid capture index")
	}
	return strPatValue(s, md, idx)
}

// strPatPush pushes the captures of md, or the whole match when there are none and
// whole is set, and returns how many values it pushed.
func strPatPush(L *glua.LState, s string, md *luapattern.MatchData, whole bool) int {
	if md.CaptureLength() <= 2 {
		if !whole {
			return 0
		}
		L.Push(glua.LString(s[md.Capture(0):md.Capture(1)]))
		return 1
	}
	n := 0
	for i := 2; i < md.CaptureLength(); i += 2 {
		L.Push(strPatValue(s, md, i))
		n++
	}
	return n
}

// find is string.find(s, pattern [, init [, plain]]).
func (p *strPatLib) find(L *glua.LState) int {
	s := L.CheckString(1)
	pat := L.CheckString(2)
	init := strPatInit(L, 3, len(s))
	if glua.LVAsBool(L.Get(4)) || !strPatHasSpecials(pat) {
		i := strings.Index(s[init:], pat)
		if i < 0 {
			L.Push(glua.LNil)
			return 1
		}
		L.Push(glua.LNumber(init + i + 1))
		L.Push(glua.LNumber(init + i + len(pat)))
		return 2
	}
	md := p.first(L, s, pat, init)
	if md == nil {
		L.Push(glua.LNil)
		return 1
	}
	L.Push(glua.LNumber(md.Capture(0) + 1))
	L.Push(glua.LNumber(md.Capture(1)))
	return 2 + strPatPush(L, s, md, false)
}

// strPatHasSpecials is Lua 5.1's strpbrk(p, SPECIALS): it looks no further than a NUL.
func strPatHasSpecials(pat string) bool {
	if i := strings.IndexByte(pat, 0); i >= 0 {
		pat = pat[:i]
	}
	return strings.ContainsAny(pat, strPatSpecials)
}

// match is string.match(s, pattern [, init]).
func (p *strPatLib) match(L *glua.LState) int {
	s := L.CheckString(1)
	pat := L.CheckString(2)
	init := strPatInit(L, 3, len(s))
	md := p.first(L, s, pat, init)
	if md == nil {
		L.Push(glua.LNil)
		return 1
	}
	return strPatPush(L, s, md, true)
}

// gmatch is string.gmatch(s, pattern). The iterator finds one match per call, so a loop
// that stops early does not pay for the rest.
func (p *strPatLib) gmatch(L *glua.LState) int {
	s := L.CheckString(1)
	pat := L.CheckString(2)
	mt := p.compile(L, pat).Matcher(s, 0, luapattern.FindOpts{})
	L.Push(L.NewFunction(func(L *glua.LState) int {
		md, err := mt.Next(p.context())
		if err != nil {
			p.raise(L, err)
		}
		if md == nil {
			return 0
		}
		return strPatPush(L, s, md, true)
	}))
	return 1
}

// strPatPiece is one part of a gsub replacement string: a literal, or capture ref
// (0-9) when lit is empty and ref >= 0.
type strPatPiece struct {
	lit string
	ref int
}

// strPatParseRepl splits a gsub replacement string into literals and %0-%9 references.
// "%%" is "%", "%x" is "x" for any other non-digit x, and a final lone "%" stays "%".
func strPatParseRepl(r string) []strPatPiece {
	var pieces []strPatPiece
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			pieces = append(pieces, strPatPiece{lit: lit.String(), ref: -1})
			lit.Reset()
		}
	}
	for i := 0; i < len(r); i++ {
		c := r[i]
		if c != '%' || i+1 >= len(r) {
			lit.WriteByte(c)
			continue
		}
		i++
		if d := r[i]; d >= '0' && d <= '9' {
			flush()
			pieces = append(pieces, strPatPiece{ref: int(d - '0')})
		} else {
			lit.WriteByte(d)
		}
	}
	flush()
	return pieces
}

// gsub is string.gsub(s, pattern, repl [, n]), in time linear in the size of its input
// and output, with the result size checked before every write.
func (p *strPatLib) gsub(L *glua.LState) int {
	src := L.CheckString(1)
	pat := L.CheckString(2)
	L.CheckTypes(3, glua.LTString, glua.LTNumber, glua.LTTable, glua.LTFunction)
	repl := L.Get(3)
	maxN := L.OptInt(4, len(src)+1)
	cp := p.compile(L, pat)

	var pieces []strPatPiece
	switch r := repl.(type) {
	case glua.LString:
		pieces = strPatParseRepl(string(r))
	case glua.LNumber:
		pieces = strPatParseRepl(r.String())
	}

	var b strings.Builder
	// write appends s unless that would take the result past the limit.
	write := func(s string) bool {
		if p.max > 0 && b.Len()+len(s) > p.max {
			return false
		}
		b.WriteString(s)
		return true
	}
	limit := func() int {
		return p.onLimit(L, "string limit (%d bytes) exceeded by string.gsub", p.max)
	}

	ctx := p.context()
	mt := cp.Matcher(src, 0, luapattern.FindOpts{})
	n, last := 0, 0
	for n < maxN {
		md, err := mt.Next(ctx)
		if err != nil {
			p.raise(L, err)
		}
		if md == nil {
			break
		}
		n++
		start, end := md.Capture(0), md.Capture(1)
		whole := src[start:end]
		if !write(src[last:start]) {
			return limit()
		}
		last = end
		var out glua.LValue
		switch r := repl.(type) {
		case glua.LString, glua.LNumber:
			for _, pc := range pieces {
				s := pc.lit
				if pc.ref == 0 {
					s = whole
				} else if pc.ref > 0 {
					s = strPatCapture(L, src, md, pc.ref).String()
				}
				if !write(s) {
					return limit()
				}
			}
			continue
		case *glua.LTable:
			out = L.GetTable(r, strPatCapture(L, src, md, 1))
		case *glua.LFunction:
			L.Push(r)
			nargs := strPatPush(L, src, md, true)
			L.Call(nargs, 1)
			out = L.Get(-1)
			L.Pop(1)
		}
		var s string
		switch o := out.(type) {
		case glua.LString, glua.LNumber:
			s = o.String()
		case *glua.LNilType:
			s = whole
		case glua.LBool:
			if o {
				L.RaiseError("invalid replacement value (a boolean)")
			}
			s = whole
		default:
			L.RaiseError("invalid replacement value (a %s)", out.Type())
		}
		if !write(s) {
			return limit()
		}
	}
	if n == 0 {
		L.Push(glua.LString(src))
		L.Push(glua.LNumber(0))
		return 2
	}
	if !write(src[last:]) {
		return limit()
	}
	L.Push(glua.LString(b.String()))
	L.Push(glua.LNumber(n))
	return 2
}
