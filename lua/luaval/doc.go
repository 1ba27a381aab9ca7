// Package luaval converts values between Go, Lua (gopher-lua) and JSON for
// luft's workflow VM, and provides the `json` Lua module
// (json.encode, json.decode, json.null, json.array, json.is_array).
//
// # Conversion rules (for script authors)
//
// Lua → JSON (json.encode, Codec.FromLua):
//
//   - nil → null; booleans and strings as they are; numbers → JSON numbers.
//     Integral numbers are written without a fraction (3, not 3.0; -0 as 0;
//     integers up to 1e21 in plain digits, like encoding/json). NaN and ±inf
//     are errors.
//   - json.null → null. Use it to keep a null inside an array or an object
//     (a Lua nil simply removes the key or leaves a hole). tostring(json.null)
//     is "json.null"; indexing it raises an error. Compare with == json.null.
//   - A table is an array when it was marked with json.array(t) (every array
//     produced by json.decode or by the runtime is marked), or when its keys
//     are exactly 1, 2, ..., n with n ≥ 1. A marked array may have holes;
//     they encode as null.
//   - An empty table encodes as {} unless it is marked: json.array({}) or
//     json.array() encode as []. json.array(t) marks t in place and returns
//     it; it fails if t already has another metatable. The mark is a
//     protected metatable: getmetatable(t) returns "json.array" and
//     setmetatable on a marked table raises. json.is_array(t) reports the
//     mark.
//   - A table with string keys is an object; its keys are written in sorted
//     (byte-wise) order.
//   - A table whose keys are all numbers but not 1..n (e.g. {[0]="a"} or
//     {[2]="b"}) is an object whose keys are the integers written in decimal
//     ("0", "2"). Non-integral number keys are an error.
//   - Mixing string and number keys in one table is an error; so are keys of
//     any other type.
//   - Functions, coroutines (threads), userdata other than json.null, tables
//     that contain themselves (cycles), and nesting deeper than the depth
//     limit (64 by default) are errors. Output larger than the size limit
//     (16 MiB by default) is an error.
//   - Metatables other than the json.array marker are ignored: values are read
//     with raw access, metamethods are never called.
//
// JSON → Lua (json.decode, Codec.Decode, Codec.ToLua):
//
//   - null → nil at the top level and in objects (the key is absent), and
//     json.null inside arrays, so positions survive: json.decode("[1,null,3]")
//     has three elements and #t == 3.
//   - Numbers become Lua numbers (float64): integers above 2^53 lose
//     precision, so pass large ids as strings.
//   - Arrays become tables 1..n marked as arrays, so
//     json.encode(json.decode("[]")) == "[]".
//   - Objects become tables whose keys are inserted in sorted order, so
//     pairs() visits them in sorted order (gopher-lua iterates the hash part
//     in insertion order). This keeps runs and their replays identical.
//   - Input larger than the size limit or nested deeper than the depth limit
//     is an error; invalid JSON is an error naming the byte offset.
//
// Errors name the JSON path of the offending value: "$" is the root, ".key"
// an identifier-like key, ["weird key"] any other string key, and [i] an
// array element or a number key, with array positions 1-based as in Lua
// (the first element is [1]). For example:
//
//	json.encode: $.items[3].fn: cannot convert a function to JSON
//	json.encode: $.a.b: table nesting deeper than 64 levels
//
// The Lua functions raise errors whose message starts with "json.encode: ",
// "json.decode: " or "json.array: ", so pcall(json.decode, s) can be used to
// test input.
//
// # Go API
//
// A Codec belongs to one *lua.LState (and the coroutines created from it).
// The json.null sentinel and the array marker metatable are stored in the
// state's registry, so every Codec made for the same state shares them.
// The Codec itself is immutable; like the Lua values it produces, it must be
// used on the goroutine that owns the state.
package luaval
