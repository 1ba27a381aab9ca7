package lua

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// goArgs gives luaFormat plain Go arguments: float64 for numbers, string for strings;
// anything past the end is "no value", as in a Lua call.
type goArgs []any

func (a goArgs) get(i int) (any, bool) {
	if i-2 < 0 || i-2 >= len(a) {
		return nil, false
	}
	return a[i-2], true
}

func (a goArgs) number(i int) (float64, error) {
	v, ok := a.get(i)
	if !ok {
		return 0, fmt.Errorf("bad argument #%d to 'format' (number expected, got no value)", i)
	}
	switch x := v.(type) {
	case float64:
		return x, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f, nil
		}
	}
	return 0, fmt.Errorf("bad argument #%d to 'format' (number expected, got string)", i)
}

func (a goArgs) str(i int) (string, error) {
	v, ok := a.get(i)
	if !ok {
		return "", fmt.Errorf("bad argument #%d to 'format' (string expected, got no value)", i)
	}
	if f, isNum := v.(float64); isNum {
		return strconv.FormatFloat(f, 'g', 14, 64), nil
	}
	return v.(string), nil
}

func TestLuaFormat(t *testing.T) {
	long := strings.Repeat("y", 120)
	cases := []struct {
		f    string
		args goArgs
		want string // "" when err is set
		err  string
	}{
		{"plain", nil, "plain", ""},
		{"%%|%5d|%-5d|%05d|%+d|% d|%.3d|%.0d", goArgs{42.0, 42.0, 42.0, 42.0, 42.0, 7.0, 0.0}, "%|   42|42   |00042|+42| 42|007|", ""},
		{"%d %i %d", goArgs{-3.9, 3.9, math.Copysign(0, -1)}, "-3 3 0", ""},
		{"%x %X %#x %#X %o %#o %u", goArgs{255.0, 255.0, 255.0, 0.0, 8.0, 8.0, 7.0}, "ff FF 0xff 0 10 010 7", ""},
		{"%x", goArgs{-1.0}, "ffffffffffffffff", ""},
		{"%c%c%5c", goArgs{76.0, 117.0, 97.0}, "Lu    a", ""},
		{"%e|%E|%.2e|%#.0e", goArgs{12345.678, 0.00012, -1.5, 3.0}, "1.234568e+04|1.200000E-04|-1.50e+00|3.e+00", ""},
		{"%f|%.1f|%#.0f|%08.2f|%-8.2f|%+.1f", goArgs{1.5, 0.05, 2.0, -3.14159, 2.5, 1.0}, "1.500000|0.1|2.|-0003.14|2.50    |+1.0", ""},
		{"%g|%g|%g|%g|%#g|%.3G|%g", goArgs{100000.0, 1000000.0, 0.0001, 0.00001, 1.0, 1e-10, 123456789.0}, "100000|1e+06|0.0001|1e-05|1.00000|1E-10|1.23457e+08", ""},
		{"%f|%e|%g|%G|%5f|%-6f|", goArgs{math.Inf(1), math.Inf(-1), math.NaN(), math.Inf(1), math.NaN(), math.Inf(1)}, "inf|-inf|nan|INF|  nan|inf   |", ""},
		{"%s|%5s|%-5s|%.2s|%s", goArgs{"ab", "ab", "ab", "abcdef", 1.5}, "ab|   ab|ab   |ab|1.5", ""},
		{"%5s", goArgs{long}, long, ""}, // Lua 5.1: a string of 100+ bytes is kept whole
		{"%.3s", goArgs{long}, "yyy", ""},
		{"%q", goArgs{"a\"b\\c\nd\re\x00f\x01"}, "\"a\\\"b\\\\c\\\nd\\re\\000f\x01\"", ""},
		{"%d", goArgs{"12"}, "12", ""},
		{"%p", goArgs{1.0}, "", "invalid option '%p' to 'format'"},
		{"%v", goArgs{1.0}, "", "invalid option '%v' to 'format'"},
		{"%T", goArgs{1.0}, "", "invalid option '%T' to 'format'"},
		{"%[1]s", goArgs{"x"}, "", "invalid option '%[' to 'format'"},
		{"%.[1]9999999d", goArgs{1.0}, "", "invalid option '%[' to 'format'"},
		{"%ld", goArgs{1.0}, "", "invalid option '%l' to 'format'"},
		{"%F", goArgs{1.0}, "", "invalid option '%F' to 'format'"},
		{"%\x01", goArgs{1.0}, "", `invalid option '%\1' to 'format'`},
		{"%", nil, "", "invalid option '%' to 'format' (the format ends inside a conversion)"},
		{"%5", nil, "", "invalid option '%' to 'format' (the format ends inside a conversion)"},
		{"%100d", goArgs{1.0}, "", "invalid format (width or precision too long)"},
		{"%.100f", goArgs{1.0}, "", "invalid format (width or precision too long)"},
		{"%------d", goArgs{1.0}, "", "invalid format (repeated flags)"},
		{"%-----5d", goArgs{1.0}, "1    ", ""}, // five flags are allowed (the 5 is a width)
		{"%d", nil, "", "bad argument #2 to 'format' (number expected, got no value)"},
		{"%s %s", goArgs{"a"}, "", "bad argument #3 to 'format' (string expected, got no value)"},
		{"%d", goArgs{math.Inf(1)}, "", "bad argument #2 to 'format' (number has no integer representation)"},
		{"%x", goArgs{math.NaN()}, "", "bad argument #2 to 'format' (number has no integer representation)"},
		{"%d", goArgs{1e19}, "", "bad argument #2 to 'format' (number has no integer representation)"},
	}
	for _, tc := range cases {
		got, err := luaFormat(tc.f, tc.args, 1<<20)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("format(%q): %q, %v; want error %q", tc.f, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("format(%q) = %q, %v; want %q", tc.f, got, err, tc.want)
		}
	}
}

func TestLuaFormatLimit(t *testing.T) {
	for _, tc := range []struct {
		f    string
		args goArgs
	}{
		{"%s%s", goArgs{strings.Repeat("x", 60), strings.Repeat("x", 60)}},
		{"%q", goArgs{strings.Repeat("\x00", 30)}},
		{strings.Repeat("%99d", 2), goArgs{1.0, 1.0}},
		{strings.Repeat("a", 101), nil},
	} {
		_, err := luaFormat(tc.f, tc.args, 100)
		var le *formatLimitError
		if !errors.As(err, &le) || err.Error() != "string limit (100 bytes) exceeded by string.format" {
			t.Errorf("format(%q) with a 100-byte limit: %v", tc.f, err)
		}
	}
}

// luaFormatErr is the shape of every error luaFormat may return besides the limit.
var luaFormatErr = regexp.MustCompile(`^(invalid option '%(.|\\\d+)?' to 'format'( \(the format ends inside a conversion\))?|invalid format \((repeated flags|width or precision too long)\)|bad argument #\d+ to 'format' \((number|string) expected, got (no value|string)\)|bad argument #\d+ to 'format' \(number has no integer representation\))$`)

// FuzzFormat checks luft's string.format against its rules on any format and
// arguments: it never panics, its result never passes the limit, its errors are
// Lua-style, and what it accepts is made only of Lua 5.1's conversions.
func FuzzFormat(f *testing.F) {
	for _, seed := range []string{"%d", "%5.2f|%-3s|%%", "%[1]s%[1]s", "%.[1]9999999d", "%p %T %v", "%#x %o %e %G %q",
		"%99.99f", "%-+ #0d", "%c%c", "%", "%100d", "%s%s%s%s%s%s%s%s"} {
		f.Add(seed, 3.25, "hello", -1e300)
	}
	const limit = 4096
	f.Fuzz(func(t *testing.T, format string, x float64, s string, y float64) {
		args := goArgs{x, s, y, s, x, y, s, x}
		out, err := luaFormat(format, args, limit)
		if err != nil {
			var le *formatLimitError
			if errors.As(err, &le) {
				return
			}
			if !luaFormatErr.MatchString(err.Error()) {
				t.Fatalf("format(%q): error %q is not Lua-style", format, err)
			}
			return
		}
		if len(out) > limit {
			t.Fatalf("format(%q): %d bytes, over the %d-byte limit", format, len(out), limit)
		}
		if !strings.Contains(format, "%") && out != format {
			t.Fatalf("format(%q) = %q, want the format itself", format, out)
		}
		// Every conversion the format holds is one of Lua 5.1's.
		for i := 0; i < len(format); i++ {
			if format[i] != '%' {
				continue
			}
			i++
			if format[i] == '%' {
				continue
			}
			for i < len(format) && strings.IndexByte("-+ #0123456789.", format[i]) >= 0 {
				i++
			}
			if !strings.ContainsRune("diouxXceEfgGqs", rune(format[i])) {
				t.Fatalf("format(%q) accepted the conversion %q", format, format[i])
			}
		}
	})
}
