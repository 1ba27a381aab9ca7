package luaval

import (
	"fmt"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// smallObjects returns n objects shaped like typical fan-out items.
func smallObjects(n int) []any {
	items := make([]any, n)
	for i := range items {
		items[i] = map[string]any{
			"id":    float64(i),
			"name":  fmt.Sprintf("item-%d", i),
			"ok":    i%2 == 0,
			"score": float64(i) / 7,
			"tags":  []any{"a", "b"},
		}
	}
	return items
}

func benchSetup(b *testing.B) (*Codec, []any, lua.LValue, []byte) {
	L := lua.NewState()
	b.Cleanup(L.Close)
	c := NewCodec(L, Limits{})
	items := smallObjects(10000)
	lv, err := c.ToLua(items)
	if err != nil {
		b.Fatal(err)
	}
	data, err := Encode(items, "")
	if err != nil {
		b.Fatal(err)
	}
	return c, items, lv, data
}

func BenchmarkToLua10k(b *testing.B) {
	c, items, _, _ := benchSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.ToLua(items); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFromLua10k(b *testing.B) {
	c, _, lv, _ := benchSetup(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.FromLua(lv); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeLua10k(b *testing.B) {
	c, _, lv, data := benchSetup(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.encodeString(lv, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeGo10k(b *testing.B) {
	_, items, _, data := benchSetup(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(items, ""); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode10k(b *testing.B) {
	c, _, _, data := benchSetup(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
