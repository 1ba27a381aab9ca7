package event

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// What a script writes (log messages, report values, event payloads) is capped so that no
// script can fill the disk (SPEC §3). A value over its cap keeps its shape: its longest
// strings are cut, each ending in a marker that says how much was cut and which limit
// did it, so the value stays valid JSON of the same type and still reads.

// DefaultMaxBytes is the default cap of one log message, report value or event payload.
const DefaultMaxBytes = 1 << 20

// cutMarker is the longest marker Cut appends, in encoded bytes; Fit budgets it for every
// string it cuts.
const cutMarker = 96

// Cut returns s cut to at most max bytes of JSON-encoded text, the cut part replaced by a
// marker naming the bytes cut and the limit (e.g. "limits.max_log_bytes"). s is returned
// as is when it fits. The cut falls on a UTF-8 boundary.
func Cut(s string, max int, limit string) string {
	if stringSizeUpTo(s, max) <= max {
		return s
	}
	marker := func(kept int) string {
		return fmt.Sprintf(" …[cut by luft: %s of %s not kept (%s)]", FormatBytes(int64(len(s)-kept)), FormatBytes(int64(len(s))), limit)
	}
	room := max - 2 - len(marker(0)) // 2: the quotes
	if room < 0 {
		room = 0
	}
	kept := prefixFitting(s, room)
	return s[:kept] + marker(kept)
}

// prefixFitting is the longest prefix of s, ending on a rune boundary, whose encoded
// length is at most room.
func prefixFitting(s string, room int) int {
	size := 0
	for i := 0; i < len(s); i++ {
		size += int(byteSizes[s[i]])
		if size > room {
			for i > 0 && !utf8.RuneStart(s[i]) {
				i--
			}
			return i
		}
	}
	return len(s)
}

// Size is the length in bytes of v's JSON encoding as encoding/json writes it (HTML
// characters escaped). It walks the values scripts can produce (maps with string keys,
// slices, strings, numbers, bools and nil) without allocating, so it is cheap enough to
// take on every event; other values are encoded to be measured.
func Size(v any) int {
	return sizeWith(v, StringSize)
}

// sizeWith is Size with each string value (not map key) measured by str: the one walker
// behind Size, and behind Fit, which measures strings only up to its cap and records them.
func sizeWith(v any, str func(string) int) int {
	switch x := v.(type) {
	case nil:
		return 4
	case string:
		return str(x)
	case bool:
		if x {
			return 4
		}
		return 5
	case int:
		return intSize(int64(x))
	case int64:
		return intSize(x)
	case float64:
		return floatSize(x)
	case map[string]any:
		n := 1 + len(x) // braces and the commas between entries
		for k, e := range x {
			n += StringSize(k) + 1 + sizeWith(e, str) // ':'
		}
		return max(n, 2)
	case []any:
		n := 1 + len(x)
		for _, e := range x {
			n += sizeWith(e, str)
		}
		return max(n, 2)
	case []string:
		n := 1 + len(x)
		for _, e := range x {
			n += str(e)
		}
		return max(n, 2)
	case []map[string]any:
		n := 1 + len(x)
		for _, e := range x {
			n += sizeWith(e, str)
		}
		return max(n, 2)
	}
	// Go values of other types come from luft itself, not from scripts. A struct of
	// numbers (usage counters on every agent_done) has a bound known from its type;
	// anything else is measured by encoding it.
	if n, ok := fixedSize(reflect.TypeOf(v)); ok {
		return n
	}
	b, err := json.Marshal(v)
	if err != nil {
		return len(fmt.Sprint(v))
	}
	return len(b)
}

// fixedSizes caches fixedSize by type.
var fixedSizes sync.Map // reflect.Type → int (-1: not fixed)

// fixedSize is an upper bound of the JSON size of any value of struct type t whose fields
// are all numbers or bools: each field at most its name, quotes, colon, comma and 24
// characters of number.
func fixedSize(t reflect.Type) (int, bool) {
	if t == nil || t.Kind() != reflect.Struct {
		return 0, false
	}
	if n, ok := fixedSizes.Load(t); ok {
		return n.(int), n.(int) >= 0
	}
	n := 2
	for f := range t.Fields() {
		switch f.Type.Kind() {
		case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
			n += len(f.Name) + 4 + 24
		default:
			n = -1
		}
		if n < 0 {
			break
		}
	}
	fixedSizes.Store(t, n)
	return n, n >= 0
}

// floatSize is the length encoding/json writes for f when f is a whole number of up to 15
// digits (counts, ids, milliseconds), and otherwise 24, which no float64 exceeds: an
// upper bound is enough for a cap, and formatting every number would cost more than the
// rest of the measure.
func floatSize(f float64) int {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return intSize(int64(f))
	}
	return 24
}

func intSize(n int64) int {
	size := 1
	if n < 0 {
		size++
		if n == math.MinInt64 {
			return 20
		}
		n = -n
	}
	for n >= 10 {
		n /= 10
		size++
	}
	return size
}

// StringSize is the length of s as a JSON string, quotes included.
func StringSize(s string) int {
	return stringSizeUpTo(s, math.MaxInt)
}

// stringSizeUpTo is StringSize, except that once the size passes limit it stops
// counting and returns a size above limit: a 15 MB string need not be read to the end to
// know that it is over a 1 MiB cap.
func stringSizeUpTo(s string, limit int) int {
	n := 2 + len(s)
	if n > limit {
		return n // every byte takes at least one
	}
	for i := 0; i < len(s); i++ {
		n += int(byteSizes[s[i]]) - 1
		if n > limit {
			return n
		}
	}
	return n
}

// byteSizes is how many bytes encoding/json writes for each byte of a string: control
// characters and <, >, & become \u00XX, quote and backslash (and \n, \r, \t) two bytes.
// A byte of an invalid UTF-8 sequence becomes \ufffd; it is counted as one byte, which
// is close enough for a cap.
var byteSizes = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			t[c] = 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			t[c] = 6
		default:
			t[c] = 1
		}
	}
	return t
}()

// Fit returns v with its longest strings cut (see Cut) so that its JSON encoding takes
// at most max bytes. v itself is not changed; maps and slices on the way to a cut string
// are copied. ok is false when v does not fit even with every string cut to its marker:
// its structure alone is too big.
func Fit(v any, max int, limit string) (out any, ok bool) {
	// Strings are measured only up to max+1: one longer is cut anyway, so its saving
	// is underestimated, never over, and the result still fits.
	var lens []int
	size := sizeWith(v, func(s string) int {
		n := stringSizeUpTo(s, max+1)
		lens = append(lens, n)
		return n
	})
	if size <= max {
		return v, true
	}
	// Cut every string longer than a threshold t down to t (plus its marker); the
	// largest t that saves enough is found by a binary search over the saving, which
	// falls as t grows.
	saving := func(t int) int {
		n := 0
		for _, l := range lens {
			if l > t+cutMarker {
				n += l - t - cutMarker
			}
		}
		return n
	}
	need := size - max
	if saving(0) < need {
		return v, false
	}
	lo, hi := 0, slices.Max(lens)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if saving(mid) >= need {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return cutStrings(v, lo+cutMarker, limit), true
}

// cutStrings copies v with every string longer than max encoded bytes cut to max.
func cutStrings(v any, max int, limit string) any {
	switch x := v.(type) {
	case string:
		return Cut(x, max, limit)
	case map[string]any:
		m := maps.Clone(x)
		for k, e := range m {
			m[k] = cutStrings(e, max, limit)
		}
		return m
	case []any:
		s := slices.Clone(x)
		for i, e := range s {
			s[i] = cutStrings(e, max, limit)
		}
		return s
	case []string:
		s := slices.Clone(x)
		for i, e := range s {
			s[i] = Cut(e, max, limit)
		}
		return s
	case []map[string]any:
		s := slices.Clone(x)
		for i, e := range s {
			s[i] = cutStrings(e, max, limit).(map[string]any)
		}
		return s
	}
	return v
}

// FormatBytes writes n as bytes, KiB, MiB or GiB with one decimal.
func FormatBytes(n int64) string {
	switch {
	case n < 1<<10:
		return strconv.FormatInt(n, 10) + " B"
	case n < 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	case n < 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
}
