package luaval

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// fuzzLimits derives small limits from two fuzz values, so the fuzzer reaches the depth
// and size checks without building megabytes (a DAG of 2^20 leaves within the default
// 16 MiB takes seconds per input, which stalls the fuzzer without finding anything); a
// depth of 0 keeps the default.
func fuzzLimits(depth, size uint16) Limits {
	return Limits{MaxDepth: int(depth % 80), MaxBytes: max(int(size), 1)}
}

// FuzzDecode checks json.decode on any bytes: it never panics, accepts only valid JSON,
// respects its limits, and what it accepts survives encode → decode → encode unchanged
// and means the same as the input (a null inside an object is dropped, as documented).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`null`, `true`, `0`, `-0`, `1e21`, `1e400`, `-1.5e-7`, `123456789012345678901234567890`,
		`""`, `"\u0000\ud800\udc00\ud800"`, `"\xff"`, `[]`, `{}`, `[null,1,null]`,
		`{"a":null,"b":[{}],"1":2}`, `{"":{"":{"":[]}}}`, `[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]`,
		`{"a":1,"a":2}`, `{"z":1,"a":{"k":[1,2,{"x":"y"}]}}`, ` [1 , 2 ] `, `[1,]`, `{"a"}`, `"\u00e9<>&"`,
	} {
		f.Add([]byte(s), uint16(0), uint16(65535))
		f.Add([]byte(s), uint16(3), uint16(12))
	}
	f.Fuzz(func(t *testing.T, data []byte, depth, size uint16) {
		L := lua.NewState(lua.Options{SkipOpenLibs: true})
		defer L.Close()
		c := NewCodec(L, fuzzLimits(depth, size))
		lim := c.Limits()
		v, err := c.Decode(data)
		if err != nil {
			if v != lua.LNil {
				t.Fatalf("Decode(%q) failed (%v) but returned %v", data, err, v)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Decode accepted invalid JSON %q", data)
		}
		if len(data) > lim.MaxBytes {
			t.Fatalf("Decode accepted %d bytes over the limit of %d", len(data), lim.MaxBytes)
		}
		var in, out any
		if err := json.Unmarshal(data, &in); err != nil {
			t.Fatalf("encoding/json refuses %q that Decode took: %v", data, err)
		}
		// The limit is on the decoded value: of duplicate keys the last one wins, so the
		// text may nest deeper than the value.
		if d := valueDepth(in); d > lim.MaxDepth {
			t.Fatalf("Decode accepted nesting %d over the limit of %d: %q", d, lim.MaxDepth, data)
		}
		enc, err := c.Encode(v, "")
		if err != nil {
			// Only the size limit may refuse what was decoded: U+FFFD replacing invalid
			// UTF-8 and 1e20 written in digits make the output longer than the input.
			if !errors.Is(err, ErrLimit) || strings.Contains(err.Error(), "nesting") {
				t.Fatalf("Encode of decoded %q: %v", data, err)
			}
			return
		}
		checkEncoded(t, c, enc)
		if err := json.Unmarshal(enc, &out); err != nil {
			t.Fatalf("encoding/json refuses our output %q: %v", enc, err)
		}
		if want := dropObjectNulls(in); !reflect.DeepEqual(want, out) {
			t.Fatalf("round trip of %q changed its meaning:\n got %#v\nwant %#v", data, out, want)
		}
	})
}

// checkEncoded asserts that enc is valid JSON within c's limits and that decoding and
// encoding it again gives the same bytes.
func checkEncoded(t *testing.T, c *Codec, enc []byte) {
	t.Helper()
	lim := c.Limits()
	if !json.Valid(enc) {
		t.Fatalf("Encode wrote invalid JSON %q", enc)
	}
	if len(enc) > lim.MaxBytes {
		t.Fatalf("Encode wrote %d bytes over the limit of %d", len(enc), lim.MaxBytes)
	}
	if d := jsonDepth(enc); d > lim.MaxDepth {
		t.Fatalf("Encode wrote nesting %d over the limit of %d: %q", d, lim.MaxDepth, enc)
	}
	enc2 := reencode(t, c, enc)
	var a, b any
	// json.null members of an object are written as null and, as documented, dropped by
	// decode.
	if json.Unmarshal(enc, &a) != nil || json.Unmarshal(enc2, &b) != nil || !reflect.DeepEqual(dropObjectNulls(a), b) {
		t.Fatalf("decode(encode(x)) changed the value:\n first %q\nsecond %q", enc, enc2)
	}
	// Bytes are a fixed point from the second round on. (Not from the first: invalid
	// UTF-8 in a Lua string is written as the escape \ufffd, like encoding/json does,
	// and the decoded U+FFFD is then written as itself.)
	if enc3 := reencode(t, c, enc2); !bytes.Equal(enc2, enc3) {
		t.Fatalf("encode(decode(x)) is not stable:\nsecond %q\n third %q", enc2, enc3)
	}
}

// reencode is encode(decode(enc)); both must succeed.
func reencode(t *testing.T, c *Codec, enc []byte) []byte {
	t.Helper()
	v, err := c.Decode(enc)
	if err != nil {
		t.Fatalf("Decode of our own output %q: %v", enc, err)
	}
	out, err := c.Encode(v, "")
	if err != nil {
		t.Fatalf("Encode after a round trip of %q: %v", enc, err)
	}
	return out
}

// jsonDepth is the deepest nesting of arrays and objects in valid JSON.
func jsonDepth(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	d, most := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return most
		}
		if delim, ok := tok.(json.Delim); ok {
			if delim == '[' || delim == '{' {
				d++
				most = max(most, d)
			} else {
				d--
			}
		}
	}
}

// valueDepth is the deepest nesting of arrays and objects in a decoded JSON value.
func valueDepth(v any) int {
	d := 0
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			d = max(d, valueDepth(e))
		}
	case []any:
		for _, e := range x {
			d = max(d, valueDepth(e))
		}
	default:
		return 0
	}
	return d + 1
}

// dropObjectNulls removes null members of objects: json.decode leaves those keys out.
func dropObjectNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e == nil {
				delete(x, k)
			} else {
				x[k] = dropObjectNulls(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = dropObjectNulls(e)
		}
	}
	return v
}

// FuzzEncodeLua builds a Lua value from a small stack program and checks json.encode on
// it: it never panics, its output is valid JSON within the limits that decodes and
// encodes back to the same bytes, it agrees with FromLua (the conversion report() uses),
// and its errors name a JSON path.
//
// Program bytes (op, then operands):
//
//	0 n      push the number decoded from the next 8 bytes (any float64, NaN and ±inf too)
//	1 k      push the small integer k-128
//	2 k s    push a string of the next k%16 bytes
//	3 / 4    push true / json.null
//	5        push a function
//	6 k      pop k%8 values into a new table at 1..k (nils leave holes)
//	7 k      pop k%8 values into a new table under the keys "k1", "k2", ...
//	8 k      set t[k-128] = v where v is popped and t is the new top
//	9        mark the top table as an array (json.array)
//	10       put the top table into itself (a cycle)
//	11       push the top value twice into a new table {v, v} (a DAG)
//	12 k     set t[k/4] = v with a fractional key
//	13       push nil
func FuzzEncodeLua(f *testing.F) {
	num := func(x float64) []byte {
		b := []byte{0}
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	seeds := [][]byte{
		{1, 129},
		num(math.NaN()), num(math.Inf(-1)), num(math.Copysign(0, -1)), num(1e21), num(0.1), num(math.MaxFloat64), num(5e-324),
		{2, 3, 'a', '"', 0xff},
		{1, 130, 2, 1, 'x', 3, 6, 3},
		{1, 130, 13, 3, 6, 3},
		{1, 130, 13, 3, 6, 3, 9},
		{1, 130, 2, 1, 'x', 7, 2},
		{1, 130, 7, 1, 1, 131, 8, 128},
		{7, 0, 1, 1, 8, 128, 1, 1, 8, 130},
		{6, 0, 9},
		{7, 0, 10},
		{3, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11},
		{5, 6, 1},
		{4, 6, 1},
		{7, 0, 1, 1, 12, 6},
		{1, 129, 6, 1, 6, 1, 6, 1, 6, 1, 6, 1, 6, 1, 6, 1, 6, 1, 6, 1, 6, 1},
	}
	for _, s := range seeds {
		f.Add(s, uint16(0), uint16(65535))
		f.Add(s, uint16(4), uint16(40))
	}
	// A DAG of 2^60 leaves must fail on the size limit, not expand.
	f.Add(append([]byte{3}, bytes.Repeat([]byte{11}, 60)...), uint16(79), uint16(1000))
	f.Fuzz(func(t *testing.T, prog []byte, depth, size uint16) {
		L := lua.NewState(lua.Options{SkipOpenLibs: true})
		defer L.Close()
		c := NewCodec(L, fuzzLimits(depth, size))
		v := buildLua(L, c, prog)
		enc, err := c.Encode(v, "")
		plain, perr := c.FromLua(v)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "$") && !errors.Is(err, ErrLimit) {
				t.Fatalf("Encode error names no path: %v", err)
			}
			if perr == nil && !errors.Is(err, ErrLimit) {
				t.Fatalf("Encode failed (%v) where FromLua succeeded (%#v)", err, plain)
			}
			return
		}
		if perr != nil {
			t.Fatalf("FromLua failed (%v) where Encode wrote %q", perr, enc)
		}
		checkEncoded(t, c, enc)
		again, err := Encode(plain, "")
		if err != nil {
			t.Fatalf("Encode of FromLua's %#v: %v", plain, err)
		}
		if !bytes.Equal(enc, again) {
			t.Fatalf("Encode and FromLua disagree:\n Encode %q\nFromLua %q", enc, again)
		}
	})
}

// buildLua runs a FuzzEncodeLua program and returns the value on top of its stack.
func buildLua(L *lua.LState, c *Codec, prog []byte) lua.LValue {
	var st []lua.LValue
	pop := func() lua.LValue {
		if len(st) == 0 {
			return lua.LNil
		}
		v := st[len(st)-1]
		st = st[:len(st)-1]
		return v
	}
	topTable := func() *lua.LTable {
		if len(st) > 0 {
			if t, ok := st[len(st)-1].(*lua.LTable); ok {
				return t
			}
		}
		return nil
	}
	arg := func(i *int) int {
		if *i+1 >= len(prog) {
			return 0
		}
		*i++
		return int(prog[*i])
	}
	for i := 0; i < len(prog) && len(st) < 64; i++ {
		switch prog[i] % 14 {
		case 0:
			var b [8]byte
			copy(b[:], prog[min(i+1, len(prog)):])
			i += 8
			st = append(st, lua.LNumber(math.Float64frombits(binary.LittleEndian.Uint64(b[:]))))
		case 1:
			st = append(st, lua.LNumber(arg(&i)-128))
		case 2:
			n := arg(&i) % 16
			s := prog[min(i+1, len(prog)):min(i+1+n, len(prog))]
			i += n
			st = append(st, lua.LString(s))
		case 3:
			st = append(st, lua.LTrue)
		case 4:
			st = append(st, c.Null)
		case 5:
			st = append(st, L.NewFunction(func(*lua.LState) int { return 0 }))
		case 6:
			n := arg(&i) % 8
			t := L.NewTable()
			for k := n; k >= 1; k-- {
				if v := pop(); v != lua.LNil {
					t.RawSetInt(k, v)
				}
			}
			st = append(st, t)
		case 7:
			n := arg(&i) % 8
			t := L.NewTable()
			for k := n; k >= 1; k-- {
				if v := pop(); v != lua.LNil {
					t.RawSetString("k"+string(rune('0'+k)), v)
				}
			}
			st = append(st, t)
		case 8:
			k := arg(&i) - 128
			v := pop()
			if t := topTable(); t != nil {
				t.RawSetInt(k, v)
			}
		case 9:
			if t := topTable(); t != nil {
				_ = c.MarkArray(t)
			}
		case 10:
			if t := topTable(); t != nil {
				t.RawSetString("self", t)
			}
		case 11:
			v := pop()
			t := L.NewTable()
			t.RawSetInt(1, v)
			t.RawSetInt(2, v)
			st = append(st, t)
		case 12:
			k := float64(arg(&i)) / 4
			v := pop()
			if t := topTable(); t != nil {
				t.RawSet(lua.LNumber(k), v)
			}
		case 13:
			st = append(st, lua.LNil)
		}
	}
	return pop()
}
