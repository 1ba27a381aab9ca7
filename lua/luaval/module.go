package luaval

import (
	"errors"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// maxIndent caps a numeric indent argument of json.encode.
const maxIndent = 16

// Module returns a new `json` table for c's state:
//
//	json.encode(v [, indent])  -- JSON text; indent is a string or a number of spaces
//	json.decode(s)             -- Lua value
//	json.null                  -- the null sentinel
//	json.array([t])            -- marks t (or a new table) as an array and returns it
//	json.is_array(t)           -- true if t carries the array mark
//
// Errors are raised with messages starting "json.encode: ", "json.decode: "
// or "json.array: " and naming the JSON path where applicable. The functions
// may be called from any coroutine of the state.
func (c *Codec) Module() *lua.LTable {
	L := c.L
	t := L.CreateTable(0, 5)
	t.RawSetString("encode", L.NewFunction(c.luaEncode))
	t.RawSetString("decode", L.NewFunction(c.luaDecode))
	t.RawSetString("null", c.Null)
	t.RawSetString("array", L.NewFunction(c.luaArray))
	t.RawSetString("is_array", L.NewFunction(c.luaIsArray))
	return t
}

// raise raises msg as a Lua error without a position prefix, so messages
// start with the function name.
func raise(L *lua.LState, msg string) {
	L.Error(lua.LString(msg), 0)
}

func (c *Codec) luaEncode(L *lua.LState) int {
	indent := ""
	switch x := L.Get(2).(type) {
	case *lua.LNilType:
	case lua.LString:
		indent = string(x)
	case lua.LNumber:
		n := int(x)
		if float64(n) != float64(x) || n < 0 || n > maxIndent {
			raise(L, "json.encode: indent must be a string or an integer from 0 to 16")
		}
		indent = strings.Repeat(" ", n)
	default:
		raise(L, "json.encode: indent must be a string or a number, got "+typeName(x))
	}
	if len(indent) > maxIndent {
		raise(L, "json.encode: indent longer than 16 bytes")
	}
	s, err := c.encodeString(L.Get(1), indent)
	if err != nil {
		if c.OnTooLarge != nil && errors.Is(err, ErrTooLarge) {
			c.OnTooLarge(L, "json.encode: "+err.Error())
		}
		raise(L, "json.encode: "+err.Error())
	}
	L.Push(s)
	return 1
}

func (c *Codec) luaDecode(L *lua.LState) int {
	s, ok := L.Get(1).(lua.LString)
	if !ok {
		raise(L, "json.decode: expected a string, got "+typeName(L.Get(1)))
	}
	v, err := c.Decode([]byte(s))
	if err != nil {
		raise(L, "json.decode: "+err.Error())
	}
	L.Push(v)
	return 1
}

func (c *Codec) luaArray(L *lua.LState) int {
	switch x := L.Get(1).(type) {
	case *lua.LNilType:
		L.Push(c.NewArray(0))
	case *lua.LTable:
		if err := c.MarkArray(x); err != nil {
			raise(L, "json.array: "+err.Error())
		}
		L.Push(x)
	default:
		raise(L, "json.array: expected a table, got "+typeName(x))
	}
	return 1
}

func (c *Codec) luaIsArray(L *lua.LState) int {
	t, ok := L.Get(1).(*lua.LTable)
	L.Push(lua.LBool(ok && c.IsArray(t)))
	return 1
}
