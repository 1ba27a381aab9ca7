package luaval

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
)

// Encode writes v as JSON with the default limits: object keys sorted, no
// HTML escaping, integral numbers without a fraction (3, not 3.0; -0 as 0;
// integers below 1e21 in plain digits like encoding/json), NaN/±Inf rejected.
// A non-empty indent pretty-prints like json.MarshalIndent(v, "", indent).
// v may hold the types ToLua accepts; Lua tables found in v are encoded
// without knowledge of json.null and json.array, so use Codec.Encode for
// Lua values.
func Encode(v any, indent string) ([]byte, error) {
	return encode(nil, Limits{}.normalized(), v, indent)
}

// Encode is the package-level Encode with c's limits; Lua values (anywhere in
// v) are converted with c's json.null and array marker.
func (c *Codec) Encode(v any, indent string) ([]byte, error) {
	return encode(c, c.lim, v, indent)
}

func encode(c *Codec, lim Limits, v any, indent string) ([]byte, error) {
	w := getWalker(c, lim)
	w.indent = indent
	err := w.encode(v, 0)
	var out []byte
	if err == nil {
		out = bytes.Clone(w.buf)
	}
	putWalker(w)
	return out, err
}

// encodeString encodes v into a Lua string (one copy of the output).
func (c *Codec) encodeString(v lua.LValue, indent string) (lua.LString, error) {
	w := getWalker(c, c.lim)
	w.indent = indent
	err := w.encodeLua(v, 0)
	var out lua.LString
	if err == nil {
		out = lua.LString(w.buf)
	}
	putWalker(w)
	return out, err
}

func (w *walker) checkSize() error {
	if len(w.buf) > w.maxBytes {
		return w.sizeError()
	}
	return nil
}

func (w *walker) sizeError() error {
	return w.wrap(tooLargeError("output exceeds the limit of " + strconv.Itoa(w.maxBytes) + " bytes"))
}

func (w *walker) encode(v any, depth int) error {
	if err := w.visit(); err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
	case string:
		return w.encodeStr(x)
	case float64:
		return w.encodeFloat(x, 64)
	case bool:
		w.buf = strconv.AppendBool(w.buf, x)
	case map[string]any:
		return encodeMap(w, x, depth)
	case []any:
		return encodeSlice(w, x, depth)
	case int, int64, int32, int16, int8:
		w.buf = strconv.AppendInt(w.buf, reflect.ValueOf(x).Int(), 10)
	case uint, uint64, uint32, uint16, uint8, uintptr:
		w.buf = strconv.AppendUint(w.buf, reflect.ValueOf(x).Uint(), 10)
	case float32:
		return w.encodeFloat(float64(x), 32)
	case json.Number:
		return w.encodeNumber(string(x))
	case []string:
		return encodeSlice(w, x, depth)
	case []map[string]any:
		return encodeSlice(w, x, depth)
	case []float64:
		return encodeSlice(w, x, depth)
	case []int:
		return encodeSlice(w, x, depth)
	case map[string]string:
		return encodeMap(w, x, depth)
	case json.RawMessage:
		if x == nil {
			w.buf = append(w.buf, "null"...)
			break
		}
		dec := json.NewDecoder(bytes.NewReader(x))
		dec.UseNumber()
		var d any
		if err := dec.Decode(&d); err != nil {
			return w.wrap(syntaxError(err))
		}
		return w.encode(d, depth)
	case lua.LValue:
		return w.encodeLua(x, depth)
	default:
		plain, err := w.plain(v)
		if err != nil {
			return err
		}
		return w.encode(plain, depth)
	}
	return w.checkSize()
}

func (w *walker) newline(level int) {
	if w.indent == "" {
		return
	}
	w.buf = append(w.buf, '\n')
	for range level {
		w.buf = append(w.buf, w.indent...)
	}
}

func (w *walker) colon() {
	if w.indent == "" {
		w.buf = append(w.buf, ':')
	} else {
		w.buf = append(w.buf, ':', ' ')
	}
}

// encodeSlice writes s as an array; a nil slice is null, as encoding/json writes it.
func encodeSlice[T any](w *walker, s []T, depth int) error {
	if s == nil {
		w.buf = append(w.buf, "null"...)
		return w.checkSize()
	}
	if depth+1 > w.maxDepth {
		return w.depthError("")
	}
	w.buf = append(w.buf, '[')
	for i := range s {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.newline(depth + 1)
		w.pushIdx(i + 1)
		if err := w.encode(any(s[i]), depth+1); err != nil {
			return err
		}
		w.pop()
	}
	if len(s) > 0 {
		w.newline(depth)
	}
	w.buf = append(w.buf, ']')
	return w.checkSize()
}

// encodeMap writes m as an object with sorted keys; a nil map is null.
func encodeMap[V any](w *walker, m map[string]V, depth int) error {
	if m == nil {
		w.buf = append(w.buf, "null"...)
		return w.checkSize()
	}
	if depth+1 > w.maxDepth {
		return w.depthError("")
	}
	start := len(w.keys)
	for k := range m {
		w.keys = append(w.keys, k)
	}
	n := len(m)
	slices.Sort(w.keys[start:])
	w.buf = append(w.buf, '{')
	for i := start; i < start+n; i++ {
		k := w.keys[i]
		if i > start {
			w.buf = append(w.buf, ',')
		}
		w.newline(depth + 1)
		w.pushKey(k)
		if err := w.encodeStr(k); err != nil {
			return err
		}
		w.colon()
		if err := w.encode(any(m[k]), depth+1); err != nil {
			return err
		}
		w.pop()
	}
	if n > 0 {
		w.newline(depth)
	}
	w.buf = append(w.buf, '}')
	clear(w.keys[start:])
	w.keys = w.keys[:start]
	return w.checkSize()
}

func (w *walker) encodeLua(v lua.LValue, depth int) error {
	switch x := v.(type) {
	case lua.LString:
		return w.encodeStr(string(x))
	case lua.LNumber:
		return w.encodeFloat(float64(x), 64)
	case lua.LBool:
		w.buf = strconv.AppendBool(w.buf, bool(x))
		return w.checkSize()
	case *lua.LTable:
		return w.encodeTable(x, depth)
	case *lua.LNilType, nil:
		w.buf = append(w.buf, "null"...)
		return w.checkSize()
	case *lua.LUserData:
		if w.c != nil && x == w.c.Null {
			w.buf = append(w.buf, "null"...)
			return w.checkSize()
		}
	}
	return w.errorf("cannot convert %s to JSON", typeName(v))
}

func (w *walker) encodeTable(t *lua.LTable, depth int) error {
	if err := w.enterTable(t, depth); err != nil {
		return err
	}
	start := len(w.kv)
	shape, err := w.collect(t)
	if err != nil {
		return err
	}
	count := len(w.kv) - start
	w.sortEntries(start, count, shape)
	if shape.array {
		w.buf = append(w.buf, '[')
		pos := 1
		for i := start; i < start+count; i++ {
			e := w.kv[i]
			for ; pos < e.idx; pos++ { // holes of a marked array
				if pos > 1 {
					w.buf = append(w.buf, ',')
				}
				w.newline(depth + 1)
				w.buf = append(w.buf, "null"...)
				if err := w.checkSize(); err != nil {
					return err
				}
			}
			if pos > 1 {
				w.buf = append(w.buf, ',')
			}
			w.newline(depth + 1)
			w.pushIdx(e.idx)
			if err := w.visit(); err != nil {
				return err
			}
			if err := w.encodeLua(e.v, depth+1); err != nil {
				return err
			}
			w.pop()
			pos++
		}
		if count > 0 {
			w.newline(depth)
		}
		w.buf = append(w.buf, ']')
	} else {
		w.buf = append(w.buf, '{')
		for i := start; i < start+count; i++ {
			e := w.kv[i]
			if i > start {
				w.buf = append(w.buf, ',')
			}
			w.newline(depth + 1)
			w.pushObjKey(e)
			if err := w.encodeStr(e.key); err != nil {
				return err
			}
			w.colon()
			if err := w.visit(); err != nil {
				return err
			}
			if err := w.encodeLua(e.v, depth+1); err != nil {
				return err
			}
			w.pop()
		}
		if count > 0 {
			w.newline(depth)
		}
		w.buf = append(w.buf, '}')
	}
	w.releaseEntries(start)
	w.leaveTable()
	return w.checkSize()
}

// encodeNumber writes a json.Number: integer literals verbatim (exact, even
// beyond 2^53), anything else through float64 so 3.0 prints as 3.
func (w *walker) encodeNumber(s string) error {
	if !validNumber(s) {
		return w.errorf("invalid JSON number %q", s)
	}
	integer := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			integer = false
			break
		}
	}
	if integer {
		if s == "-0" {
			s = "0"
		}
		w.buf = append(w.buf, s...)
		return w.checkSize()
	}
	f, _ := strconv.ParseFloat(s, 64) // out of range → ±Inf → error below
	return w.encodeFloat(f, 64)
}

// encodeFloat formats like encoding/json, except that -0 prints as 0.
func (w *walker) encodeFloat(f float64, bits int) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return w.errorf("cannot convert %s to JSON", numName(f))
	}
	abs := math.Abs(f)
	if abs < 1<<53 && f == math.Trunc(f) {
		// Exact integers: the shortest round-trip form is the integer
		// itself, and AppendInt is much cheaper. Covers -0 → 0.
		w.buf = strconv.AppendInt(w.buf, int64(f), 10)
		return w.checkSize()
	}
	format := byte('f')
	if bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
		bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
		format = 'e'
	}
	w.buf = strconv.AppendFloat(w.buf, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(w.buf)
		if n >= 4 && w.buf[n-4] == 'e' && w.buf[n-3] == '-' && w.buf[n-2] == '0' {
			w.buf[n-2] = w.buf[n-1]
			w.buf = w.buf[:n-1]
		}
	}
	return w.checkSize()
}

const hexDigits = "0123456789abcdef"

// encodeStr writes s as a JSON string like encoding/json without HTML
// escaping: invalid UTF-8 becomes U+FFFD, U+2028/U+2029 are escaped.
func (w *walker) encodeStr(s string) error {
	if len(w.buf)+len(s)+2 > w.maxBytes {
		return w.sizeError()
	}
	b := append(w.buf, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	w.buf = append(b, '"')
	return w.checkSize()
}
