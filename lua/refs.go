package lua

import (
	"hash/maphash"
	"reflect"
	"regexp"
	"strconv"

	glua "github.com/yuin/gopher-lua"
)

// This file keeps the host's memory out of everything a script can see or print:
// the string metatable, metatables in general, and the names of reference values.

// stringIndex is the __index of the string metatable, which gopher-lua keeps once per Lua
// state: ("x"):upper() looks the method up in the running workflow's own string library
// (through the metatable view getmetatable("") returns to that workflow, so a script that
// adds a method with getmetatable("").__index.shout = f sees it, as in Lua). A workflow
// can therefore patch only its own string methods, never its parent's or its child's.
func (v *vm) stringIndex(L *glua.LState) int {
	mt := v.stringMeta()
	switch idx := mt.RawGetString("__index").(type) {
	case *glua.LTable:
		if idx.Metatable == glua.LNil {
			L.Push(idx.RawGet(L.Get(2))) // the common case: a plain library table
		} else {
			L.Push(L.GetTable(idx, L.Get(2)))
		}
	case *glua.LFunction:
		L.Push(idx)
		L.Push(L.Get(1))
		L.Push(L.Get(2))
		L.Call(2, 1)
	default:
		L.Push(glua.LNil)
	}
	return 1
}

// stringMeta is the string metatable as the running workflow sees it.
func (v *vm) stringMeta() *glua.LTable {
	if t := v.current; t != nil && t.wf != nil {
		return t.wf.strMeta
	}
	if v.root != nil {
		return v.root.strMeta
	}
	return v.orphanMeta
}

// getmetatable is Lua 5.1's, except that a string's metatable is the running workflow's
// own view ({__index = string}) rather than the state's shared one.
func (v *vm) getmetatable(L *glua.LState) int {
	obj := L.CheckAny(1)
	if obj.Type() == glua.LTString {
		L.Push(v.stringMeta())
		return 1
	}
	L.Push(L.GetMetatable(obj)) // honours __metatable
	return 1
}

// setmetatable is Lua 5.1's: the first argument must be a table. gopher-lua's accepts
// any value and sets the metatable of its whole type (numbers, functions, booleans) for
// every workflow of the run.
func setmetatable(L *glua.LState) int {
	t := L.CheckTable(1)
	L.CheckTypes(2, glua.LTNil, glua.LTTable)
	if mt, ok := t.Metatable.(*glua.LTable); ok && mt.RawGetString("__metatable") != glua.LNil {
		L.RaiseError("cannot change a protected metatable")
	}
	L.SetMetatable(t, L.Get(2))
	L.SetTop(1)
	return 1
}

// tostringFn is tostring(v).
func (v *vm) tostringFn(L *glua.LState) int {
	L.Push(glua.LString(v.tostring(L, L.CheckAny(1))))
	return 1
}

// tostring converts a value as Lua's tostring does, with two differences: a __tostring
// result must be a string or a number (Lua 5.2's rule; anything else would print an
// address), and a table, function, userdata or thread without __tostring prints as its
// type and a reference name (refName), never its Go address.
func (v *vm) tostring(L *glua.LState, val glua.LValue) string {
	switch x := val.(type) {
	case glua.LString:
		return string(x)
	case glua.LNumber:
		return x.String()
	case glua.LBool, *glua.LNilType:
		return val.String()
	}
	if fn, ok := L.GetMetaField(val, "__tostring").(*glua.LFunction); ok {
		L.Push(fn)
		L.Push(val)
		L.Call(1, 1)
		r := L.Get(-1)
		L.Pop(1)
		switch s := r.(type) {
		case glua.LString:
			return string(s)
		case glua.LNumber:
			return s.String()
		}
		L.RaiseError("'__tostring' must return a string (it returned a %s)", r.Type())
	}
	return refName(val)
}

// refSeed keys the reference names of this process.
var refSeed = maphash.MakeSeed()

// refName names a reference value as "table: 9c2f41d07a3e": its type and 48 bits of a
// keyed hash of its address (a random key per process). The same value always gets the
// same name, and two live values practically never share one, so scripts can still use
// tostring(t) as an identity within a run; but the name tells nothing about the host's
// memory and differs from run to run (do not build prompts from it).
func refName(val glua.LValue) string {
	var addr uintptr
	switch val.Type() {
	case glua.LTTable, glua.LTFunction, glua.LTUserData, glua.LTThread, glua.LTChannel:
		addr = reflect.ValueOf(val).Pointer()
	default:
		return val.String()
	}
	return val.Type().String() + ": " + refHash(addr)
}

func refHash(addr uintptr) string {
	h := maphash.Comparable(refSeed, addr) & (1<<48 - 1)
	s := strconv.FormatUint(h, 16)
	for len(s) < 12 {
		s = "0" + s
	}
	return s
}

// goAddrRe matches the way gopher-lua prints a reference value ("table: 0xc000123456"),
// which reaches messages it builds itself, such as "attempt to index a non-table
// object(nil) with key 'table: 0x…'".
var goAddrRe = regexp.MustCompile(`\b(table|function|userdata|thread|channel): 0x([0-9a-f]+)`)

// scrubAddrs replaces every Go address in a message by the value's reference name.
func scrubAddrs(msg string) string {
	if !goAddrRe.MatchString(msg) {
		return msg
	}
	return goAddrRe.ReplaceAllStringFunc(msg, func(m string) string {
		sub := goAddrRe.FindStringSubmatch(m)
		addr, err := strconv.ParseUint(sub[2], 16, 64)
		if err != nil {
			return sub[1] + ": ?"
		}
		return sub[1] + ": " + refHash(uintptr(addr))
	})
}
