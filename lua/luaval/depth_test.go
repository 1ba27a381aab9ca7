package luaval

import "testing"

func TestDeeper(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     any
		limit int
		want  bool
	}{
		{"scalar", 7, 0, false},
		{"flat object at 1", map[string]any{"a": 1}, 1, false},
		{"object in object at 1", map[string]any{"a": map[string]any{}}, 1, true},
		{"array of arrays at 2", []any{[]any{1}}, 2, false},
		{"array of arrays of arrays at 2", []any{[]any{[]any{}}}, 2, true},
		{"deep one among flat ones", map[string]any{"a": 1, "b": []any{1, []any{2}}}, 2, true},
	} {
		if got := Deeper(tc.v, tc.limit); got != tc.want {
			t.Errorf("%s: Deeper = %v, want %v", tc.name, got, tc.want)
		}
	}
}
