package luaval

import (
	"maps"
	"slices"
)

// Deeper reports whether decoded JSON nests objects and arrays more than limit levels
// (the outermost is level 1): a front door refuses with it, before a run starts, the
// args that the conversion to Lua under that depth limit would refuse.
func Deeper(v any, limit int) bool {
	var kids []any
	switch x := v.(type) {
	case map[string]any:
		kids = slices.Collect(maps.Values(x))
	case []any:
		kids = x
	default:
		return false
	}
	if limit <= 0 {
		return true
	}
	for _, k := range kids {
		if Deeper(k, limit-1) {
			return true
		}
	}
	return false
}
