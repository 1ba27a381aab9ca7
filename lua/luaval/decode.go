package luaval

import (
	"encoding/json"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// Decode parses JSON into a Lua value (see ToLua for the mapping: arrays are
// marked, nulls in arrays become c.Null, object keys are inserted sorted).
// Input larger than MaxBytes, nesting deeper than MaxDepth and invalid JSON
// are errors; syntax errors name the byte offset.
func (c *Codec) Decode(data []byte) (lua.LValue, error) {
	if len(data) > c.lim.MaxBytes {
		return lua.LNil, limitError("input is " + strconv.Itoa(len(data)) +
			" bytes, more than the limit of " + strconv.Itoa(c.lim.MaxBytes) + " bytes")
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return lua.LNil, syntaxError(err)
	}
	return c.ToLua(v)
}
