package luaval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// ToLua converts a Go value to a Lua value:
//
//   - nil → nil; bool; every Go integer and float kind and json.Number → number;
//     string → string;
//   - []any, []string, []map[string]any, ... → a table 1..n marked as an
//     array, nil elements becoming c.Null so positions survive;
//   - map[string]any, map[string]string, ... → a table whose keys are inserted
//     in sorted order (so pairs() visits them sorted); nil values are omitted;
//   - json.RawMessage is decoded; a lua.LValue is returned unchanged;
//   - anything else (structs, pointers, other maps and slices) goes through
//     encoding/json first, so json tags and MarshalJSON are honoured.
//
// Nil slices and maps become nil, as encoding/json makes them null. NaN and
// ±Inf, functions, channels and nesting deeper than the depth limit are
// errors (*PathError).
func (c *Codec) ToLua(v any) (lua.LValue, error) {
	w := getWalker(c, c.lim)
	out, err := w.toLua(v, 0)
	putWalker(w)
	return out, err
}

func (w *walker) number(f float64) (lua.LValue, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return lua.LNil, w.errorf("cannot convert %s to JSON", numName(f))
	}
	return lua.LNumber(f), nil
}

func (w *walker) toLua(v any, depth int) (lua.LValue, error) {
	switch x := v.(type) {
	case nil:
		return lua.LNil, nil
	case string:
		return lua.LString(x), nil
	case float64:
		return w.number(x)
	case bool:
		if x {
			return lua.LTrue, nil
		}
		return lua.LFalse, nil
	case map[string]any:
		return toLuaMap(w, x, depth)
	case []any:
		return toLuaSlice(w, x, depth)
	case int, int64, int32, int16, int8:
		return lua.LNumber(reflect.ValueOf(x).Int()), nil
	case uint, uint64, uint32, uint16, uint8, uintptr:
		return lua.LNumber(reflect.ValueOf(x).Uint()), nil
	case float32:
		return w.number(float32To64(x))
	case json.Number:
		if !validNumber(string(x)) {
			return lua.LNil, w.errorf("invalid JSON number %q", string(x))
		}
		f, _ := strconv.ParseFloat(string(x), 64) // out of range → ±Inf → error
		return w.number(f)
	case []string:
		return toLuaSlice(w, x, depth)
	case []map[string]any:
		return toLuaSlice(w, x, depth)
	case []float64:
		return toLuaSlice(w, x, depth)
	case []int:
		return toLuaSlice(w, x, depth)
	case map[string]string:
		return toLuaMap(w, x, depth)
	case json.RawMessage:
		if x == nil {
			return lua.LNil, nil
		}
		var d any
		if err := json.Unmarshal(x, &d); err != nil {
			return lua.LNil, w.wrap(syntaxError(err))
		}
		return w.toLua(d, depth)
	case lua.LValue:
		return x, nil
	}
	plain, err := w.plain(v)
	if err != nil {
		return lua.LNil, err
	}
	return w.toLua(plain, depth)
}

// float32To64 converts via the shortest decimal form, so float32(0.1)
// becomes 0.1 rather than 0.10000000149011612 (as encoding/json prints it).
func float32To64(f float32) float64 {
	g, err := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	if err != nil {
		return float64(f)
	}
	return g
}

// plain turns a value of any other Go type into nil/bool/json.Number/string/
// []any/map[string]any by a round trip through encoding/json.
func (w *walker) plain(v any) (any, error) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Func, reflect.Chan, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		return nil, w.errorf("cannot convert a Go %s to JSON", rv.Type())
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, w.errorf("cannot convert a Go %T to JSON: %v", v, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, w.errorf("cannot convert a Go %T to JSON: %v", v, err)
	}
	return out, nil
}

// toLuaSlice makes a marked array of s; a nil slice is nil.
func toLuaSlice[T any](w *walker, s []T, depth int) (lua.LValue, error) {
	if s == nil {
		return lua.LNil, nil
	}
	if depth+1 > w.maxDepth {
		return lua.LNil, w.depthError("")
	}
	t := w.c.NewArray(len(s))
	for i := range s {
		w.pushIdx(i + 1)
		lv, err := w.toLua(any(s[i]), depth+1)
		if err != nil {
			return lua.LNil, err
		}
		w.pop()
		if lv == lua.LNil {
			lv = w.c.Null
		}
		t.RawSetInt(i+1, lv)
	}
	return t, nil
}

// toLuaMap makes a table of m with its keys inserted in sorted order; a nil map is nil.
func toLuaMap[V any](w *walker, m map[string]V, depth int) (lua.LValue, error) {
	if m == nil {
		return lua.LNil, nil
	}
	if depth+1 > w.maxDepth {
		return lua.LNil, w.depthError("")
	}
	start := len(w.keys)
	for k := range m {
		w.keys = append(w.keys, k)
	}
	slices.Sort(w.keys[start:])
	n := len(m)
	t := w.c.L.CreateTable(0, n)
	for i := start; i < start+n; i++ {
		k := w.keys[i] // reread: nested calls may reallocate w.keys
		w.pushKey(k)
		lv, err := w.toLua(any(m[k]), depth+1)
		if err != nil {
			return lua.LNil, err
		}
		w.pop()
		if lv != lua.LNil {
			t.RawSetString(k, lv)
		}
	}
	clear(w.keys[start:])
	w.keys = w.keys[:start]
	return t, nil
}

// validNumber reports whether s is a JSON number literal.
func validNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(s)
}

// syntaxError adds the byte offset to encoding/json errors that have one.
func syntaxError(err error) error {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Errorf("%w (at byte offset %d)", err, e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Errorf("%w (at byte offset %d)", err, e.Offset)
	}
	return err
}
