package event

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSizeMatchesEncoding(t *testing.T) {
	cases := map[string]any{
		"nil":       nil,
		"string":    "hello",
		"escapes":   "a\"b\\c\nd\te\x01<>&",
		"unicode":   "héllo wörld ✓",
		"bools":     []any{true, false},
		"numbers":   []any{0.0, 1.5, -3.0, 1e21, 123456789.0, 7, int64(-42), 1e-7, -0.25},
		"integers":  []any{0, 9, 10, 99, 100, -1, -10, int64(1) << 62, 999999999999999.0},
		"nested":    map[string]any{"a": []any{"x", map[string]any{"b": nil}}, "c\n": "d"},
		"strings":   []string{"a", "b<"},
		"maps":      []map[string]any{{"k": "v"}, {}},
		"emptymap":  map[string]any{},
		"emptyList": []any{},
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			// Exact, except that a number that is not a whole one below 1e15 may be
			// counted as 24 bytes.
			slack := 0
			if name == "numbers" {
				slack = 24 * 9
			}
			if got := Size(v); got < len(b) || got > len(b)+slack {
				t.Errorf("Size = %d, encoding is %d bytes: %s", got, len(b), b)
			}
		})
	}
}

func TestCut(t *testing.T) {
	cases := []struct {
		name string
		s    string
		max  int
		cut  bool
	}{
		{"fits", "short", 100, false},
		{"exact", strings.Repeat("a", 98), 100, false},
		{"ascii", strings.Repeat("a", 10000), 1000, true},
		{"multibyte", strings.Repeat("é✓", 5000), 1000, true},
		{"escapes", strings.Repeat("<\x01", 5000), 1000, true},
		{"tiny cap", strings.Repeat("a", 500), 10, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Cut(c.s, c.max, "limits.max_log_bytes")
			if !c.cut {
				if got != c.s {
					t.Fatalf("a string that fits was changed: %q", got)
				}
				return
			}
			if !strings.Contains(got, "cut by luft") || !strings.Contains(got, "limits.max_log_bytes") {
				t.Fatalf("no marker naming the limit: %q", got[max(0, len(got)-120):])
			}
			if !utf8.ValidString(got) {
				t.Fatalf("cut in the middle of a character")
			}
			prefix, _, _ := strings.Cut(got, " …[cut by luft")
			if !strings.HasPrefix(c.s, prefix) {
				t.Fatalf("the kept part is not a prefix of the input")
			}
			if c.max >= 200 && StringSize(got) > c.max {
				t.Fatalf("cut string takes %d encoded bytes, more than %d", StringSize(got), c.max)
			}
		})
	}
}

func TestCutMarkerSaysHowMuch(t *testing.T) {
	got := Cut(strings.Repeat("x", 3<<20), 1<<20, "limits.max_log_bytes")
	if !strings.Contains(got, "of 3.0 MiB not kept") {
		t.Fatalf("marker does not name the sizes: %q", got[len(got)-100:])
	}
}

func TestFit(t *testing.T) {
	big := strings.Repeat("y", 50000)
	cases := []struct {
		name string
		v    any
		max  int
		ok   bool
	}{
		{"small", map[string]any{"a": "b"}, 100, true},
		{"one long string", big, 1000, true},
		{"table with long strings", map[string]any{"markdown": big, "title": "t", "items": []any{big, "short", 3.0}}, 2000, true},
		{"many small strings", func() any {
			l := make([]any, 2000)
			for i := range l {
				l[i] = strings.Repeat("z", 300)
			}
			return l
		}(), 300000, true},
		{"structure too big", func() any {
			l := make([]any, 5000)
			for i := range l {
				l[i] = float64(i)
			}
			return l
		}(), 1000, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := json.Marshal(c.v)
			out, ok := Fit(c.v, c.max, "limits.max_report_bytes")
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			after, _ := json.Marshal(c.v)
			if string(before) != string(after) {
				t.Fatalf("Fit changed its input")
			}
			if !ok {
				return
			}
			b, err := json.Marshal(out)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > c.max {
				t.Fatalf("fitted value is %d bytes, more than %d", len(b), c.max)
			}
			if len(before) > c.max && !strings.Contains(string(b), "cut by luft") {
				t.Fatalf("no cut marker in %s", b[:min(len(b), 200)])
			}
		})
	}
}

func TestFitKeepsShortStrings(t *testing.T) {
	v := map[string]any{"title": "keep me", "body": strings.Repeat("b", 100000)}
	out, ok := Fit(v, 10000, "limits.max_report_bytes")
	if !ok {
		t.Fatal("did not fit")
	}
	m := out.(map[string]any)
	if m["title"] != "keep me" {
		t.Fatalf("a short string was cut: %q", m["title"])
	}
	if body := m["body"].(string); len(body) < 9000 {
		t.Fatalf("the long string was cut more than needed: %d bytes left", len(body))
	}
}

// BenchmarkSizeAgentDone measures what the cap check adds to every event: an agent_done
// payload as the runtime builds it.
func BenchmarkSizeAgentDone(b *testing.B) {
	type usage struct{ Input, Output, Cached int }
	data := map[string]any{"call_key": "main/1/par[17]/1", "name": "reviewer", "status": "ok", "cached": false,
		"tokens": 1234, "usage": usage{1000, 234, 0}, "elapsed_ms": int64(812), "attempts": 1,
		"backend": "mock", "model": "mock-1", "cost": 0.0012}
	for b.Loop() {
		Size(data)
	}
}
