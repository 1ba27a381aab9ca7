package luaval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// newState returns a state with the standard libraries and a `json` global.
func newState(t testing.TB, lim Limits) (*lua.LState, *Codec) {
	t.Helper()
	L := lua.NewState()
	t.Cleanup(L.Close)
	c := NewCodec(L, lim)
	L.SetGlobal("json", c.Module())
	return L, c
}

// eval runs a chunk that returns one value and returns that value.
func eval(t testing.TB, L *lua.LState, src string) lua.LValue {
	t.Helper()
	if err := L.DoString(src); err != nil {
		t.Fatalf("lua error in %q: %v", src, err)
	}
	v := L.Get(-1)
	L.Pop(1)
	return v
}

func evalString(t testing.TB, L *lua.LState, src string) string {
	t.Helper()
	v := eval(t, L, src)
	s, ok := v.(lua.LString)
	if !ok {
		t.Fatalf("%q returned %s, want a string", src, v.Type())
	}
	return string(s)
}

func TestRoundTripGoLuaGo(t *testing.T) {
	t.Parallel()
	type tagged struct {
		Name  string   `json:"name"`
		Tags  []string `json:"tags,omitempty"`
		Score float32  `json:"score"`
		Skip  string   `json:"-"`
	}
	name := "p"
	cases := []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"true", true, true},
		{"false", false, false},
		{"string", "héllo\n\"x\"", "héllo\n\"x\""},
		{"empty string", "", ""},
		{"float", 3.5, 3.5},
		{"int", 42, 42.0},
		{"int8", int8(-8), -8.0},
		{"int16", int16(300), 300.0},
		{"int32", int32(-70000), -70000.0},
		{"int64", int64(1) << 53, 9007199254740992.0},
		{"uint", uint(7), 7.0},
		{"uint8", uint8(255), 255.0},
		{"uint16", uint16(65535), 65535.0},
		{"uint32", uint32(1) << 31, 2147483648.0},
		{"uint64", uint64(1e15), 1e15},
		{"float32", float32(0.1), 0.1},
		{"json.Number int", json.Number("12"), 12.0},
		{"json.Number frac", json.Number("-1.25e2"), -125.0},
		{"empty array", []any{}, []any{}},
		{"array", []any{1.0, "a", true, nil, []any{}}, []any{1.0, "a", true, nil, []any{}}},
		{"nulls keep positions", []any{nil, nil, 1.0, nil}, []any{nil, nil, 1.0, nil}},
		{"empty object", map[string]any{}, map[string]any{}},
		{"object", map[string]any{"b": 1.0, "a": "x", "c": []any{map[string]any{}}},
			map[string]any{"b": 1.0, "a": "x", "c": []any{map[string]any{}}}},
		{"object drops null", map[string]any{"a": nil, "b": 2.0}, map[string]any{"b": 2.0}},
		{"weird keys", map[string]any{"": 1.0, "a b": 2.0, "1": 3.0, "ü": 4.0},
			map[string]any{"": 1.0, "a b": 2.0, "1": 3.0, "ü": 4.0}},
		{"[]string", []string{"x", "y"}, []any{"x", "y"}},
		{"[]int", []int{1, 2, 3}, []any{1.0, 2.0, 3.0}},
		{"[]float64", []float64{0.5}, []any{0.5}},
		{"[]map", []map[string]any{{"a": 1.0}, {}}, []any{map[string]any{"a": 1.0}, map[string]any{}}},
		{"map[string]string", map[string]string{"k": "v"}, map[string]any{"k": "v"}},
		{"nil slice is null", []any(nil), nil},
		{"nil map is null", map[string]any(nil), nil},
		{"raw message", json.RawMessage(`{"z":[1,null],"a":{}}`), map[string]any{"z": []any{1.0, nil}, "a": map[string]any{}}},
		{"struct via encoding/json", tagged{Name: "n", Score: 0.5, Skip: "s"}, map[string]any{"name": "n", "score": 0.5}},
		{"pointer", &name, "p"},
		{"map[string]int", map[string]int{"a": 1}, map[string]any{"a": 1.0}},
		{"[]bool", []bool{true, false}, []any{true, false}},
		{"nested", map[string]any{"a": []any{map[string]any{"b": []any{[]any{"deep"}}}}},
			map[string]any{"a": []any{map[string]any{"b": []any{[]any{"deep"}}}}}},
	}
	L, c := newState(t, Limits{})
	for _, tc := range cases {
		lv, err := c.ToLua(tc.in)
		if err != nil {
			t.Errorf("%s: ToLua: %v", tc.name, err)
			continue
		}
		got, err := c.FromLua(lv)
		if err != nil {
			t.Errorf("%s: FromLua: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.want)
		}
		// Encode(Go) and json.encode(Lua) agree.
		goJSON, err := Encode(tc.in, "")
		if err != nil {
			t.Errorf("%s: Encode: %v", tc.name, err)
			continue
		}
		luaJSON, err := c.Encode(lv, "")
		if err != nil {
			t.Errorf("%s: Codec.Encode: %v", tc.name, err)
			continue
		}
		wantJSON, _ := Encode(tc.want, "")
		if string(luaJSON) != string(wantJSON) {
			t.Errorf("%s: Lua encodes as %s, want %s", tc.name, luaJSON, wantJSON)
		}
		// Go JSON may keep null object members; decoding it gives tc.want.
		back, err := c.Decode(goJSON)
		if err != nil {
			t.Errorf("%s: Decode(%s): %v", tc.name, goJSON, err)
			continue
		}
		if got, _ := c.FromLua(back); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Decode(Encode) = %#v, want %#v", tc.name, got, tc.want)
		}
	}
	_ = L
}

func TestRoundTripLuaGoLua(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	cases := []struct{ lua, json, again string }{
		{`return {}`, `{}`, ``},
		{`return json.array({})`, `[]`, ``},
		{`return json.array()`, `[]`, ``},
		{`return {1, 2, 3}`, `[1,2,3]`, ``},
		{`return {1, json.null, 3}`, `[1,null,3]`, ``},
		{`return {json.null}`, `[null]`, ``},
		{`return {a = json.null, b = {}}`, `{"a":null,"b":{}}`, ``},
		{`return {z = 1, a = 2, m = {y = true, b = false}}`, `{"a":2,"m":{"b":false,"y":true},"z":1}`, ``},
		{`return {[0] = "a", [2] = "b"}`, `{"0":"a","2":"b"}`, ``},
		{`return {[2] = "b"}`, `{"2":"b"}`, ``},
		{`return {[-1] = 1, [10] = 2}`, `{"-1":1,"10":2}`, ``},
		{`return {[1] = "a", [3] = "c"}`, `{"1":"a","3":"c"}`, ``},
		{`local t = json.array({}); t[3] = "c"; t[1] = "a"; return t`, `["a",null,"c"]`, ``},
		{`local t = {}; t[3] = 3; t[2] = 2; t[1] = 1; return t`, `[1,2,3]`, ``},
		{`local t = {1, 2, 3}; t[3] = nil; return t`, `[1,2]`, ``},
		{`local t = {a = 1, b = 2}; t.a = nil; return t`, `{"b":2}`, ``},
		{`return {["a b"] = {["\"q\""] = "\t"}}`, `{"a b":{"\"q\"":"\t"}}`, ``},
		{`return "<&>"`, `"<&>"`, ``},
		{`return "\0\1\31\127"`, `"\u0000\u0001\u001f` + "\x7f" + `"`, ``},
		{`return "\255"`, `"\ufffd"`, "\"\uFFFD\""},
		{`return "\226\128\168"`, `"\u2028"`, ``},
		{`return nil`, `null`, ``},
		{`return json.null`, `null`, ``},
		{`return setmetatable({a = 1}, {__index = function() error("no") end})`, `{"a":1}`, ``},
	}
	for _, tc := range cases {
		lv := eval(t, L, tc.lua)
		b, err := c.Encode(lv, "")
		if err != nil {
			t.Errorf("%s: %v", tc.lua, err)
			continue
		}
		if string(b) != tc.json {
			t.Errorf("%s: got %s, want %s", tc.lua, b, tc.json)
		}
		// The Lua module agrees with the Go API.
		L.SetGlobal("v", lv)
		if s := evalString(t, L, `return json.encode(v)`); s != tc.json {
			t.Errorf("%s: json.encode gives %s, want %s", tc.lua, s, tc.json)
		}
		// FromLua then Encode gives the same JSON.
		g, err := c.FromLua(lv)
		if err != nil {
			t.Errorf("%s: FromLua: %v", tc.lua, err)
			continue
		}
		if b2, _ := Encode(g, ""); string(b2) != tc.json {
			t.Errorf("%s: FromLua+Encode gives %s, want %s", tc.lua, b2, tc.json)
		}
		// decode(encode(x)) re-encodes identically (arrays stay arrays).
		d, err := c.Decode(b)
		if err != nil {
			t.Errorf("%s: Decode: %v", tc.lua, err)
			continue
		}
		b3, _ := c.Encode(d, "")
		want := strings.ReplaceAll(tc.json, `"a":null,`, "")
		if tc.again != "" {
			want = tc.again
		}
		if string(b3) != want {
			t.Errorf("%s: encode(decode) gives %s, want %s", tc.lua, b3, want)
		}
	}
}

func TestPairsOrderIsSorted(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	m := map[string]any{}
	var keys []string
	for i := range 200 {
		k := fmt.Sprintf("k%03d", (i*7919)%200)
		m[k] = float64(i)
		keys = append(keys, k)
	}
	m["Z"], m["_"], m["a"] = 1.0, 2.0, 3.0
	lv, err := c.ToLua(map[string]any{"outer": m, "b": 1.0, "a": 2.0})
	if err != nil {
		t.Fatal(err)
	}
	L.SetGlobal("v", lv)
	got := evalString(t, L, `
		local parts = {}
		for k in pairs(v.outer) do parts[#parts + 1] = k end
		local top = {}
		for k in pairs(v) do top[#top + 1] = k end
		return table.concat(top, ",") .. "|" .. table.concat(parts, ",")`)
	sorted := append([]string{"Z", "_", "a"}, sortedCopy(keys)...)
	want := "a,b,outer|" + strings.Join(sorted, ",")
	if got != want {
		t.Fatalf("pairs order:\n got %s\nwant %s", got, want)
	}
	// Decoded objects too.
	got = evalString(t, L, `
		local parts = {}
		for k in pairs(json.decode('{"c":1,"a":2,"b":{"y":1,"x":2},"B":3}')) do parts[#parts + 1] = k end
		return table.concat(parts, ",")`)
	if got != "B,a,b,c" {
		t.Fatalf("decoded pairs order %s", got)
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestNumbers(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	cases := []struct{ lua, json string }{
		{`3`, `3`},
		{`3.0`, `3`},
		{`3.5`, `3.5`},
		{`-0`, `0`},
		{`-0.0`, `0`},
		{`0`, `0`},
		{`-7`, `-7`},
		{`1e15`, `1000000000000000`},
		{`2^53`, `9007199254740992`},
		{`-(2^53)`, `-9007199254740992`},
		{`2^63`, `9223372036854776000`}, // like encoding/json: shortest digits, then zeros
		{`1e20`, `100000000000000000000`},
		{`1e21`, `1e+21`},
		{`1e300`, `1e+300`},
		{`0.1`, `0.1`},
		{`1/3`, `0.3333333333333333`},
		{`1e-6`, `0.000001`},
		{`1e-7`, `1e-7`},
		{`-2.5e-10`, `-2.5e-10`},
		{`123456789.125`, `123456789.125`},
	}
	for _, tc := range cases {
		lv := eval(t, L, "return "+tc.lua)
		b, err := c.Encode(lv, "")
		if err != nil {
			t.Errorf("%s: %v", tc.lua, err)
			continue
		}
		if string(b) != tc.json {
			t.Errorf("%s: got %s, want %s", tc.lua, b, tc.json)
		}
		// Matches encoding/json apart from -0.
		if f := float64(lv.(lua.LNumber)); f != 0 {
			std, _ := json.Marshal(f)
			if string(std) != tc.json {
				t.Errorf("%s: encoding/json says %s, we say %s", tc.lua, std, tc.json)
			}
		}
	}
	// Decoding: integral numbers come back integral.
	for _, in := range []string{"3", "3.5", "-0", "1e15", "9007199254740992", "1E2", "-1.5e-3"} {
		lv, err := c.Decode([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		b, _ := c.Encode(lv, "")
		var f float64
		_ = json.Unmarshal([]byte(in), &f)
		if want, _ := Encode(f, ""); string(b) != string(want) {
			t.Errorf("decode %s → encode %s, want %s", in, b, want)
		}
	}
	if got := evalString(t, L, `return json.encode(json.decode("[3, 3.5, -0, 1e15]"))`); got != `[3,3.5,0,1000000000000000]` {
		t.Errorf("got %s", got)
	}
	// Go integers and json.Number encode exactly.
	for _, tc := range []struct {
		in   any
		want string
	}{
		{int64(math.MaxInt64), "9223372036854775807"},
		{uint64(math.MaxUint64), "18446744073709551615"},
		{json.Number("12345678901234567890"), "12345678901234567890"},
		{json.Number("-0"), "0"},
		{json.Number("3.0"), "3"},
		{json.Number("1e2"), "100"},
		{float32(0.1), "0.1"},
		{float32(1e-7), "1e-7"},
	} {
		b, err := Encode(tc.in, "")
		if err != nil || string(b) != tc.want {
			t.Errorf("Encode(%#v) = %s, %v; want %s", tc.in, b, err, tc.want)
		}
	}
}

func TestEmptyTableVsArray(t *testing.T) {
	t.Parallel()
	L, _ := newState(t, Limits{})
	cases := map[string]string{
		`return json.encode({})`:                                                          `{}`,
		`return json.encode(json.array({}))`:                                              `[]`,
		`return json.encode(json.array())`:                                                `[]`,
		`return json.encode({a = {}, b = json.array()})`:                                  `{"a":{},"b":[]}`,
		`return json.encode(json.decode("[]"))`:                                           `[]`,
		`return json.encode(json.decode("{}"))`:                                           `{}`,
		`return json.encode(json.decode('{"a":[]}'))`:                                     `{"a":[]}`,
		`return json.encode(json.decode('[[],{},[[]]]'))`:                                 `[[],{},[[]]]`,
		`local t = json.array({}); return json.encode(json.array(t))`:                     `[]`,
		`return tostring(json.is_array(json.array()))`:                                    `true`,
		`return tostring(json.is_array({}))`:                                              `false`,
		`return tostring(json.is_array(json.decode("[1]")))`:                              `true`,
		`return tostring(json.is_array(json.decode("{}")))`:                               `false`,
		`return tostring(json.is_array(5))`:                                               `false`,
		`local t = json.array({}); return tostring(getmetatable(t))`:                      `json.array`,
		`local t = json.array({1}); t[#t + 1] = 2; return json.encode(t)`:                 `[1,2]`,
		`local t = json.decode("[]"); table.insert(t, "x"); return json.encode(t)`:        `["x"]`,
		`local t = json.decode("[1,2]"); t[1] = nil; t[2] = nil; return json.encode(t)`:   `[]`,
		`local ok, e = pcall(setmetatable, json.array(), {}); return tostring(ok) .. e`:   `false<string>:1: cannot change a protected metatable`,
		`local ok, e = pcall(json.array, setmetatable({}, {})); return tostring(ok) .. e`: `falsejson.array: table already has a metatable`,
		`local ok, e = pcall(json.array, "x"); return tostring(ok) .. e`:                  `falsejson.array: expected a table, got a string`,
	}
	for src, want := range cases {
		if got := evalString(t, L, src); got != want {
			t.Errorf("%s: got %s, want %s", src, got, want)
		}
	}
}

func TestNull(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	cases := map[string]string{
		`return tostring(json.null)`:                                                              `json.null`,
		`return "v=" .. tostring(json.null)`:                                                      `v=json.null`,
		`return type(json.null)`:                                                                  `userdata`,
		`return json.encode(json.null)`:                                                           `null`,
		`return json.encode({1, json.null, 3})`:                                                   `[1,null,3]`,
		`return json.encode({a = json.null})`:                                                     `{"a":null}`,
		`return json.encode({a = {json.null, json.null}})`:                                        `{"a":[null,null]}`,
		`local t = json.decode("[1,null,3]"); return #t .. tostring(t[2] == json.null)`:           `3true`,
		`local t = json.decode("[null]"); return #t .. tostring(t[1] == json.null)`:               `1true`,
		`local t = json.decode('{"a":null,"b":1}'); return tostring(t.a) .. t.b`:                  `nil1`,
		`return tostring(json.decode("null"))`:                                                    `nil`,
		`return json.encode(json.decode('[null,{"x":[null]}]'))`:                                  `[null,{"x":[null]}]`,
		`local ok, e = pcall(function() return json.null.x end); return tostring(ok) .. "|" .. e`: `false|<string>:1: attempt to index json.null (a JSON null value) with key "x"`,
		`local ok, e = pcall(function() json.null.x = 1 end); return tostring(ok) .. "|" .. e`:    `false|<string>:1: attempt to set key "x" on json.null (a JSON null value)`,
		`return tostring(getmetatable(json.null))`:                                                `json.null`,
	}
	for src, want := range cases {
		if got := evalString(t, L, src); got != want {
			t.Errorf("%s: got %q, want %q", src, got, want)
		}
	}
	// Go side: Null converts to nil, and nil array elements to Null.
	if v, err := c.FromLua(c.Null); err != nil || v != nil {
		t.Errorf("FromLua(Null) = %v, %v", v, err)
	}
	lv, _ := c.ToLua([]any{nil})
	if got := lv.(*lua.LTable).RawGetInt(1); got != c.Null {
		t.Errorf("nil element became %v", got)
	}
}

func TestSentinelsSharedPerState(t *testing.T) {
	t.Parallel()
	L, c1 := newState(t, Limits{})
	c2 := NewCodec(L, Limits{MaxDepth: 3})
	if c1.Null != c2.Null || c1.arrayMT != c2.arrayMT {
		t.Fatal("codecs of one state must share sentinels")
	}
	other := lua.NewState()
	defer other.Close()
	c3 := NewCodec(other, Limits{})
	if c3.Null == c1.Null || c3.arrayMT == c1.arrayMT {
		t.Fatal("codecs of different states must not share sentinels")
	}
	arr := L.NewTable()
	if err := c2.MarkArray(arr); err != nil {
		t.Fatal(err)
	}
	if !c1.IsArray(arr) || c3.IsArray(arr) {
		t.Fatal("IsArray across codecs")
	}
	if err := c1.MarkArray(arr); err != nil {
		t.Fatalf("marking twice: %v", err)
	}
	other2 := L.NewTable()
	other2.Metatable = L.NewTable()
	if err := c1.MarkArray(other2); err == nil {
		t.Fatal("MarkArray must refuse a table with another metatable")
	}
	// A coroutine of the state can use the module.
	co, _ := L.NewThread()
	defer co.Close()
	fn := eval(t, L, `return function() return json.encode({json.null, json.array()}) end`).(*lua.LFunction)
	st, err, vals := L.Resume(co, fn)
	if st != lua.ResumeOK || err != nil || len(vals) != 1 || vals[0].String() != `[null,[]]` {
		t.Fatalf("coroutine: %v %v %v", st, err, vals)
	}
}

func TestFromLuaErrors(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	ud := L.NewUserData()
	L.SetGlobal("ud", ud)
	co, _ := L.NewThread()
	L.SetGlobal("co", co)
	cases := []struct{ lua, want string }{
		{`return function() end`, `$: cannot convert a function to JSON`},
		{`return {items = {1, 2, {fn = print}}}`, `$.items[3].fn: cannot convert a function to JSON`},
		{`return {a = {b = co}}`, `$.a.b: cannot convert a thread to JSON`},
		{`return {x = coroutine.create(print)}`, `$.x: cannot convert a thread to JSON`},
		{`return {1, ud}`, `$[2]: cannot convert a userdata to JSON`},
		{`return {x = 0/0}`, `$.x: cannot convert NaN to JSON`},
		{`return {x = {1/0}}`, `$.x[1]: cannot convert inf to JSON`},
		{`return {x = -1/0}`, `$.x: cannot convert -inf to JSON`},
		{`local t = {}; t.self = t; return t`, `$.self: cycle: the table contains itself`},
		{`local t = {a = {b = {}}}; t.a.b.c = t.a; return t`, `$.a.b.c: cycle: the table contains itself`},
		{`local t = {}; t[1] = t; return t`, `$[1]: cycle: the table contains itself`},
		{`return {1, 2, a = 3}`, `$: table mixes string and number keys ("a" and 1)`},
		{`return {x = {a = 1, [5] = 2}}`, `$.x: table mixes string and number keys ("a" and 5)`},
		{`return {[1.5] = 1}`, `$: table key 1.5 is not an integer`},
		{`return {[true] = 1}`, `$: table key of type boolean cannot be converted to JSON`},
		{`return {[{}] = 1}`, `$: table key of type table cannot be converted to JSON`},
		{`return {["a b"] = {f = print}}`, `$["a b"].f: cannot convert a function to JSON`},
		{`return {[""] = print}`, `$[""]: cannot convert a function to JSON`},
		{`return {["1x"] = print}`, `$["1x"]: cannot convert a function to JSON`},
		{`return {_ok9 = print}`, `$._ok9: cannot convert a function to JSON`},
		{`return {[0] = {print}}`, `$[0][1]: cannot convert a function to JSON`},
		{`return {[-3] = print}`, `$[-3]: cannot convert a function to JSON`},
		{`return json.array({a = 1})`, `$: table marked as json.array has string key "a"`},
		{`return {x = json.array({[0] = 1})}`, `$.x: table marked as json.array has key 0; array keys must be 1, 2, 3, ...`},
		{`local t = json.array({}); t[1e8] = 1; return t`, `$: sparse array index 100000000 exceeds the output size limit`},
	}
	for _, tc := range cases {
		lv := eval(t, L, tc.lua)
		_, err := c.FromLua(lv)
		if err == nil || err.Error() != tc.want {
			t.Errorf("FromLua(%s): got %v, want %s", tc.lua, err, tc.want)
		}
		var pe *PathError
		if err != nil && !errors.As(err, &pe) {
			t.Errorf("FromLua(%s): %T is not a *PathError", tc.lua, err)
		}
		_, err = c.Encode(lv, "")
		if err == nil || err.Error() != tc.want {
			t.Errorf("Encode(%s): got %v, want %s", tc.lua, err, tc.want)
		}
		L.SetGlobal("v", lv)
		msg := evalString(t, L, `local ok, e = pcall(json.encode, v); assert(not ok); return e`)
		if msg != "json.encode: "+tc.want {
			t.Errorf("json.encode(%s): got %q", tc.lua, msg)
		}
	}
}

func TestDepthLimit(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	// 64 levels are fine, 65 are not.
	ok := eval(t, L, `local t = {} ; for i = 1, 63 do t = {a = t} end; return t`)
	if _, err := c.FromLua(ok); err != nil {
		t.Fatalf("64 levels: %v", err)
	}
	deep := eval(t, L, `local t = {} ; for i = 1, 64 do t = {a = t} end; return t`)
	_, err := c.FromLua(deep)
	want := "$" + strings.Repeat(".a", 64) + ": table nesting deeper than 64 levels"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("depth error should match ErrLimit")
	}
	if _, err := c.Encode(deep, ""); err == nil || err.Error() != want {
		t.Fatalf("Encode: got %v", err)
	}

	L2, c2 := newState(t, Limits{MaxDepth: 2})
	cases := []struct{ lua, want string }{
		{`return {a = {b = {}}}`, `$.a.b: table nesting deeper than 2 levels`},
		{`return {{{1}}}`, `$[1][1]: table nesting deeper than 2 levels`},
		{`return {a = {b = 1}}`, ``},
	}
	for _, tc := range cases {
		lv := eval(t, L2, tc.lua)
		_, err := c2.FromLua(lv)
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || err.Error() != tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.lua, err, tc.want)
		}
	}
	// Go → Lua and JSON → Lua.
	goDeep := map[string]any{"a": []any{map[string]any{}}}
	if _, err := c2.ToLua(goDeep); err == nil || err.Error() != `$.a[1]: nesting deeper than 2 levels` {
		t.Errorf("ToLua: %v", err)
	}
	if _, err := c2.Decode([]byte(`{"a":[{}]}`)); err == nil || err.Error() != `$.a[1]: nesting deeper than 2 levels` {
		t.Errorf("Decode: %v", err)
	}
	if _, err := c2.Encode(goDeep, ""); err == nil || err.Error() != `$.a[1]: nesting deeper than 2 levels` {
		t.Errorf("Encode: %v", err)
	}
	if msg := evalString(t, L2, `local ok, e = pcall(json.decode, '[[[]]]'); return e`); msg != `json.decode: $[1][1]: nesting deeper than 2 levels` {
		t.Errorf("json.decode: %q", msg)
	}
	// A Go value that contains itself hits the depth limit instead of
	// looping forever.
	self := map[string]any{}
	self["x"] = self
	if _, err := c.ToLua(self); !errors.Is(err, ErrLimit) {
		t.Errorf("self-referencing map: %v", err)
	}
	if _, err := Encode(self, ""); !errors.Is(err, ErrLimit) {
		t.Errorf("Encode self-referencing map: %v", err)
	}
}

func TestToLuaErrors(t *testing.T) {
	t.Parallel()
	_, c := newState(t, Limits{})
	cases := []struct {
		in   any
		want string
	}{
		{math.NaN(), `$: cannot convert NaN to JSON`},
		{map[string]any{"a": []any{1.0, math.Inf(1)}}, `$.a[2]: cannot convert inf to JSON`},
		{map[string]any{"f": func() {}}, `$.f: cannot convert a Go func() to JSON`},
		{[]any{make(chan int)}, `$[1]: cannot convert a Go chan int to JSON`},
		{map[string]any{"weird key": complex(1, 2)}, `$["weird key"]: cannot convert a Go complex128 to JSON`},
		{json.Number("1x"), `$: invalid JSON number "1x"`},
		{json.Number("1e999"), `$: cannot convert inf to JSON`},
	}
	for _, tc := range cases {
		if _, err := c.ToLua(tc.in); err == nil || err.Error() != tc.want {
			t.Errorf("ToLua(%#v): got %v, want %s", tc.in, err, tc.want)
		}
		if _, err := Encode(tc.in, ""); err == nil || err.Error() != tc.want {
			t.Errorf("Encode(%#v): got %v, want %s", tc.in, err, tc.want)
		}
	}
	if _, err := c.ToLua(map[string]any{"bad": struct{ F func() }{}}); err == nil || !strings.HasPrefix(err.Error(), "$.bad: cannot convert a Go struct") {
		t.Errorf("struct with func: %v", err)
	}
}

func TestMaxBytes(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{MaxBytes: 20})
	// Encode: exactly 20 bytes is fine, 21 is not.
	if b, err := c.Encode(strings.Repeat("x", 18), ""); err != nil || len(b) != 20 {
		t.Fatalf("20 bytes: %s %v", b, err)
	}
	_, err := c.Encode(strings.Repeat("x", 19), "")
	if err == nil || err.Error() != "$: output exceeds the limit of 20 bytes" || !errors.Is(err, ErrLimit) {
		t.Fatalf("21 bytes: %v", err)
	}
	lv := eval(t, L, `return {a = {1, 2, 3}, b = {4, 5, 6, 7, 8, 9, 10}}`)
	if _, err := c.Encode(lv, ""); err == nil || !errors.Is(err, ErrLimit) || !strings.HasPrefix(err.Error(), "$.b[") {
		t.Fatalf("table: %v", err)
	}
	msg := evalString(t, L, `local ok, e = pcall(json.encode, {string.rep("y", 100)}); return e`)
	if msg != "json.encode: $[1]: output exceeds the limit of 20 bytes" {
		t.Fatalf("json.encode: %q", msg)
	}
	// Go values.
	if _, err := c.Encode(map[string]any{"k": []any{1, 2, 3, 4, 5, 6, 7, 8}}, ""); !errors.Is(err, ErrLimit) {
		t.Fatalf("Go value: %v", err)
	}
	// Indentation counts.
	if _, err := c.Encode([]any{1, 2, 3, 4}, "    "); !errors.Is(err, ErrLimit) {
		t.Fatalf("indented: %v", err)
	}
	// Decode: 20 bytes fine, 21 not.
	if _, err := c.Decode([]byte(`"` + strings.Repeat("x", 18) + `"`)); err != nil {
		t.Fatalf("decode 20: %v", err)
	}
	_, err = c.Decode([]byte(`"` + strings.Repeat("x", 19) + `"`))
	if err == nil || err.Error() != "input is 21 bytes, more than the limit of 20 bytes" || !errors.Is(err, ErrLimit) {
		t.Fatalf("decode 21: %v", err)
	}
	msg = evalString(t, L, `local ok, e = pcall(json.decode, string.rep(" ", 30) .. "1"); return e`)
	if msg != "json.decode: input is 31 bytes, more than the limit of 20 bytes" {
		t.Fatalf("json.decode: %q", msg)
	}
	// Defaults.
	_, cd := newState(t, Limits{})
	if cd.Limits() != (Limits{MaxDepth: 64, MaxBytes: 16 << 20, MaxNodes: 1_000_000}) {
		t.Fatalf("defaults: %+v", cd.Limits())
	}
	big := strings.Repeat("z", 16<<20)
	if _, err := Encode(big, ""); !errors.Is(err, ErrLimit) {
		t.Fatalf("package Encode default limit: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	cases := []struct{ in, want string }{
		{`{`, `unexpected end of JSON input (at byte offset 1)`},
		{`{"a":}`, `invalid character '}' looking for beginning of value (at byte offset 6)`},
		{`[1,2,]`, `invalid character ']' looking for beginning of value (at byte offset 6)`},
		{`[1] x`, `invalid character 'x' after top-level value (at byte offset 5)`},
		{``, `unexpected end of JSON input (at byte offset 0)`},
		{`nul`, `invalid character ' ' in literal null (expecting 'l') (at byte offset 3)`},
		{`1e999`, `json: cannot unmarshal number 1e999 into Go value of type float64 (at byte offset 6)`},
	}
	for _, tc := range cases {
		_, err := c.Decode([]byte(tc.in))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Decode(%q): got %v, want %s", tc.in, err, tc.want)
		}
	}
	got := evalString(t, L, `
		local ok, e = pcall(json.decode, "{")
		return tostring(ok) .. "|" .. e`)
	if got != "false|json.decode: unexpected end of JSON input (at byte offset 1)" {
		t.Fatalf("pcall: %q", got)
	}
	got = evalString(t, L, `local ok, e = pcall(json.decode, {}); return e`)
	if got != "json.decode: expected a string, got a table" {
		t.Fatalf("non-string: %q", got)
	}
	got = evalString(t, L, `local ok, e = pcall(json.decode); return e`)
	if got != "json.decode: expected a string, got nil" {
		t.Fatalf("no arg: %q", got)
	}
}

func TestModuleScript(t *testing.T) {
	t.Parallel()
	L, _ := newState(t, Limits{})
	script := `
		local doc = json.decode('{"items":[{"id":1,"tags":["a","b"]},{"id":2,"tags":[]}],"next":null}')
		assert(doc.next == nil)
		assert(#doc.items == 2 and doc.items[2].id == 2)
		table.insert(doc.items, {id = 3, tags = json.array()})
		doc.count = #doc.items
		local out = json.encode(doc)
		assert(out == '{"count":3,"items":[{"id":1,"tags":["a","b"]},{"id":2,"tags":[]},{"id":3,"tags":[]}]}', out)
		local pretty = json.encode({b = {1, 2}, a = {}}, "  ")
		assert(pretty == '{\n  "a": {},\n  "b": [\n    1,\n    2\n  ]\n}', pretty)
		assert(json.encode({x = 1}, 2) == '{\n  "x": 1\n}')
		local ok, e = pcall(json.encode, {}, {})
		assert(not ok and e == "json.encode: indent must be a string or a number, got a table", e)
		ok, e = pcall(json.encode, {}, 99)
		assert(not ok and e:find("^json.encode: indent"), e)
		ok, e = pcall(json.encode, {items = {1, 2, {fn = print}}})
		assert(not ok and e == "json.encode: $.items[3].fn: cannot convert a function to JSON", e)
		ok, e = pcall(json.decode, "{")
		assert(not ok and e:sub(1, 12) == "json.decode:", e)
		assert(json.encode(json.decode("[]")) == "[]")
		assert(json.encode(json.decode('{"a":[]}')) == '{"a":[]}')
		return "ok"`
	if got := evalString(t, L, script); got != "ok" {
		t.Fatal(got)
	}
}

// TestEncodeMatchesEncodingJSON compares Encode with encoding/json (sorted
// keys, no HTML escaping) on values where the two should agree.
func TestEncodeMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	strs := []string{"", "plain", "<a href='x'>&amp;</a>", "quote\"back\\slash", "\x00\x01\b\f\n\r\t\x1f\x7f",
		"héllo wörld ✓ 😀", "\u2028\u2029", "bad\xffutf8\xc3", "\xed\xa0\x80"}
	nums := []float64{0, 1, -1, 0.5, 1e-6, 1e-7, 1e20, 1e21, 123456.789, -2.5e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, 1 << 53}
	var vals []any
	for _, s := range strs {
		vals = append(vals, s, map[string]any{s: s})
	}
	for _, n := range nums {
		vals = append(vals, n)
	}
	vals = append(vals,
		map[string]any{"b": []any{1.0, "x", nil, true, map[string]any{}}, "a": map[string]any{"z": []any{}, "y": nil}, "A": false},
		[]any{[]any{[]any{}}, map[string]any{"k": map[string]any{"k": []any{"v"}}}},
		[]string{"a", "<"}, map[string]string{"z": "1", "a": "2"},
		struct {
			X int   `json:"a"`
			Y []int `json:"b"`
		}{1, []int{2, 3}},
	)
	for _, v := range vals {
		for _, indent := range []string{"", "  ", "\t"} {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", indent)
			if err := enc.Encode(v); err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSuffix(buf.String(), "\n")
			got, err := Encode(v, indent)
			if err != nil {
				t.Errorf("Encode(%#v): %v", v, err)
				continue
			}
			if string(got) != want {
				t.Errorf("Encode(%#v, %q):\n got %s\nwant %s", v, indent, got, want)
			}
		}
	}
}

func TestStructKeysSorted(t *testing.T) {
	t.Parallel()
	v := struct {
		Zeta  int            `json:"zeta"`
		Alpha string         `json:"alpha"`
		Inner map[string]int `json:"inner"`
	}{1, "a", map[string]int{"y": 1, "x": 2}}
	b, err := Encode(v, "")
	if err != nil || string(b) != `{"alpha":"a","inner":{"x":2,"y":1},"zeta":1}` {
		t.Fatalf("got %s %v", b, err)
	}
}

func TestLuaValuesInsideGoValues(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	arr := eval(t, L, `return json.array()`)
	v := map[string]any{"lua": arr, "s": lua.LString("x"), "n": lua.LNumber(2), "null": c.Null}
	b, err := c.Encode(v, "")
	if err != nil || string(b) != `{"lua":[],"n":2,"null":null,"s":"x"}` {
		t.Fatalf("got %s %v", b, err)
	}
	lv, err := c.ToLua(v)
	if err != nil {
		t.Fatal(err)
	}
	if lv.(*lua.LTable).RawGetString("lua") != arr {
		t.Fatal("Lua values should pass through ToLua unchanged")
	}
	// Without a Codec, a marked array is only a table.
	if b, err := Encode(arr, ""); err != nil || string(b) != `{}` {
		t.Fatalf("package Encode: %s %v", b, err)
	}
}

// TestConcurrentCodecs runs independent states on separate goroutines and the
// package-level Encode concurrently, for the race detector.
func TestConcurrentCodecs(t *testing.T) {
	t.Parallel()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			L := lua.NewState()
			defer L.Close()
			c := NewCodec(L, Limits{})
			L.SetGlobal("json", c.Module())
			for i := range 50 {
				v := map[string]any{"g": float64(g), "i": float64(i), "list": []any{"a", nil, map[string]any{"x": 1.0}}}
				lv, err := c.ToLua(v)
				if err != nil {
					t.Error(err)
					return
				}
				b1, err := c.Encode(lv, "")
				if err != nil {
					t.Error(err)
					return
				}
				b2, err := Encode(v, "")
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(b1, b2) {
					t.Errorf("%s != %s", b1, b2)
					return
				}
				if _, err := c.Decode(b1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A table reached many times (a DAG) is converted each time it is reached; the value
// count stops it long before its 2^60 expansion, in Encode, FromLua and json.encode alike.
func TestMaxNodesStopsSharedTables(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{MaxNodes: 5000})
	dag := eval(t, L, `local t = {} for i = 1, 60 do t = {t, t} end return t`)
	for name, conv := range map[string]func() error{
		"Encode":  func() error { _, err := c.Encode(dag, ""); return err },
		"FromLua": func() error { _, err := c.FromLua(dag); return err },
	} {
		err := conv()
		if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "more than 5000 values") {
			t.Fatalf("%s: %v, want the value limit", name, err)
		}
	}
	// json.encode raises it, after OnTooLarge saw it.
	var seen string
	c.OnTooLarge = func(_ *lua.LState, msg string) { seen = msg }
	msg := evalString(t, L, `local t = {} for i = 1, 60 do t = {t, t} end local ok, e = pcall(json.encode, t) return e`)
	if !strings.HasPrefix(msg, "json.encode: $[1]") || !strings.Contains(msg, "more than 5000 values") || seen != msg {
		t.Fatalf("json.encode: %q (OnTooLarge saw %q)", msg, seen)
	}
	// Within the limit a shared table converts as often as it is reached.
	small := eval(t, L, `local t = {} for i = 1, 5 do t = {t, t} end return t`)
	if _, err := c.FromLua(small); err != nil {
		t.Fatalf("small DAG: %v", err)
	}
}

func TestInterruptStopsConversion(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{})
	stop := errors.New("run cancelled")
	c.Interrupt = func() error { return stop }
	big := eval(t, L, `local t = {} for i = 1, 10000 do t[i] = i end return t`)
	if _, err := c.FromLua(big); !errors.Is(err, stop) {
		t.Fatalf("FromLua: %v, want the interrupt's error", err)
	}
	if _, err := c.Encode(big, ""); !errors.Is(err, stop) {
		t.Fatalf("Encode: %v, want the interrupt's error", err)
	}
	c.Interrupt = nil
	if _, err := c.FromLua(big); err != nil {
		t.Fatalf("FromLua without interrupt: %v", err)
	}
}

// A table reachable twice is converted twice; the size limit must stop a DAG whose
// expansion is exponential before it is built (t = {t, t} nested 60 times is 2^60
// leaves).
func TestFromLuaDAGHitsSizeLimit(t *testing.T) {
	t.Parallel()
	L, c := newState(t, Limits{MaxBytes: 1 << 20})
	v := eval(t, L, `local t = {1} for i = 1, 60 do t = {t, t} end return t`)
	_, err := c.FromLua(v)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "limit of 1048576 bytes") {
		t.Fatalf("FromLua of a 2^60-leaf DAG: %v, want the size limit", err)
	}
	if _, err := c.Encode(v, ""); !errors.Is(err, ErrLimit) {
		t.Fatalf("Encode of a 2^60-leaf DAG: %v, want the size limit", err)
	}
}
