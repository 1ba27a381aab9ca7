package lua

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	glua "github.com/yuin/gopher-lua"
)

// string.format, written for the sandbox. gopher-lua's passes the format to Go's fmt,
// which accepts argument indexes (%[1]s), %p, %T and %v, and allocates whatever width or
// precision they ask for before anything could check it. This one implements Lua 5.1's
// lstrlib.c str_format:
//
//   - conversions d i u c x X o e E f g G q s and %%; flags - + space # 0 (at most five);
//     a width and a precision of at most two digits each. Anything else is refused with
//     Lua's "invalid option '%p' to 'format'" or "invalid format (...)".
//   - %s without a precision passes a string of 100 bytes or more through whole, as Lua
//     5.1 does (its width is then ignored). %q quotes as Lua 5.1 does.
//   - Numbers for d i u c x X o are truncated toward zero as C's cast does; NaN, ±inf and
//     values beyond 64 bits, for which C's cast is undefined, are refused ("number has no
//     integer representation", Lua 5.3's words). Floats print as C's printf does,
//     including inf, -inf, nan and -nan.
//   - One deliberate difference: %s accepts any value and converts it with the sandbox's
//     tostring (Lua 5.2's rule), where Lua 5.1 accepts only strings and numbers; gopher-lua
//     accepted anything too, so scripts that format nil or a table keep working, and a
//     table prints by its reference name, never an address.
//
// The result is measured before every append, so no item can take it past the limit.

// fmtArgs gives luaFormat its arguments by their position in string.format's argument
// list (2 is the first after the format). Either method may fail with a Lua-style
// message (a missing argument, a value of the wrong type).
type fmtArgs interface {
	number(i int) (float64, error)
	str(i int) (string, error)
}

// formatLimitError is returned when the result would be larger than the limit.
type formatLimitError struct{ limit int }

func (e *formatLimitError) Error() string {
	return fmt.Sprintf("string limit (%d bytes) exceeded by string.format", e.limit)
}

// fmtSpec is one parsed conversion.
type fmtSpec struct {
	minus, plus, space, hash, zero bool
	width, prec                    int // -1: not given
	verb                           byte
}

const fmtFlags = "-+ #0"

// luaFormat formats f with args as Lua 5.1's string.format does, refusing any result of
// more than limit bytes (limit <= 0: no limit).
func luaFormat(f string, args fmtArgs, limit int) (string, error) {
	var b strings.Builder
	add := func(s string) error {
		if limit > 0 && b.Len()+len(s) > limit {
			return &formatLimitError{limit: limit}
		}
		b.WriteString(s)
		return nil
	}
	arg := 1
	for i := 0; i < len(f); {
		if f[i] != '%' {
			j := strings.IndexByte(f[i:], '%')
			if j < 0 {
				j = len(f) - i
			}
			if err := add(f[i : i+j]); err != nil {
				return "", err
			}
			i += j
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			if err := add("%"); err != nil {
				return "", err
			}
			i++
			continue
		}
		arg++
		sp, next, err := scanFormat(f, i)
		if err != nil {
			return "", err
		}
		i = next
		if sp.verb == 'q' {
			// Quoting can make a string up to four times longer: measure first.
			s, err := args.str(arg)
			if err != nil {
				return "", err
			}
			if limit > 0 && b.Len()+quotedSize(s) > limit {
				return "", &formatLimitError{limit: limit}
			}
			b.WriteString(quoteLua(s))
			continue
		}
		// Every other item is at most 99 bytes of padding plus a number's digits, or a
		// string that already exists.
		item, err := formatItem(sp, args, arg)
		if err != nil {
			return "", err
		}
		if err := add(item); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// scanFormat parses the conversion that starts at f[i] (just after the '%').
func scanFormat(f string, i int) (fmtSpec, int, error) {
	sp := fmtSpec{width: -1, prec: -1}
	start := i
	for i < len(f) && strings.IndexByte(fmtFlags, f[i]) >= 0 {
		switch f[i] {
		case '-':
			sp.minus = true
		case '+':
			sp.plus = true
		case ' ':
			sp.space = true
		case '#':
			sp.hash = true
		case '0':
			sp.zero = true
		}
		i++
	}
	if i-start > len(fmtFlags) {
		return sp, i, errors.New("invalid format (repeated flags)")
	}
	digits := func() int {
		n := -1
		for k := 0; k < 2 && i < len(f) && isDigit(f[i]); k++ {
			n = max(n, 0)*10 + int(f[i]-'0')
			i++
		}
		return n
	}
	sp.width = digits()
	if i < len(f) && f[i] == '.' {
		i++
		sp.prec = max(digits(), 0)
	}
	if i < len(f) && isDigit(f[i]) {
		return sp, i, errors.New("invalid format (width or precision too long)")
	}
	if i >= len(f) {
		return sp, i, errors.New("invalid option '%' to 'format' (the format ends inside a conversion)")
	}
	sp.verb = f[i]
	return sp, i + 1, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// formatItem formats argument arg by sp.
func formatItem(sp fmtSpec, args fmtArgs, arg int) (string, error) {
	switch sp.verb {
	case 'd', 'i':
		n, err := intArg(args, arg)
		if err != nil {
			return "", err
		}
		mag := uint64(n)
		if n < 0 {
			mag = -mag
		}
		return fmtInteger(sp, n < 0, mag, 10, false, true), nil
	case 'o', 'u', 'x', 'X':
		n, err := intArg(args, arg)
		if err != nil {
			return "", err
		}
		base := map[byte]int{'o': 8, 'u': 10, 'x': 16, 'X': 16}[sp.verb]
		return fmtInteger(sp, false, uint64(n), base, sp.verb == 'X', false), nil
	case 'c':
		n, err := intArg(args, arg)
		if err != nil {
			return "", err
		}
		return pad(sp, "", string([]byte{byte(n)}), false), nil
	case 'e', 'E', 'f', 'g', 'G':
		x, err := args.number(arg)
		if err != nil {
			return "", err
		}
		return fmtFloat(sp, x), nil
	case 's':
		s, err := args.str(arg)
		if err != nil {
			return "", err
		}
		if sp.prec < 0 && len(s) >= 100 {
			return s, nil // Lua 5.1 keeps a long string whole, width and all
		}
		if sp.prec >= 0 && len(s) > sp.prec {
			s = s[:sp.prec]
		}
		sp.zero = false
		return pad(sp, "", s, false), nil
	}
	return "", fmt.Errorf("invalid option '%%%s' to 'format'", printableByte(sp.verb))
}

// printableByte shows a byte of a format in a message: itself when printable, else as a
// Lua decimal escape.
func printableByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return string(rune(c))
	}
	return `\` + strconv.Itoa(int(c))
}

// intArg reads an integer conversion's argument: truncated toward zero, as C's cast.
func intArg(args fmtArgs, arg int) (int64, error) {
	x, err := args.number(arg)
	if err != nil {
		return 0, err
	}
	if math.IsNaN(x) || x >= 1<<63 || x < -(1<<63) {
		return 0, fmt.Errorf("bad argument #%d to 'format' (number has no integer representation)", arg)
	}
	return int64(x), nil
}

// fmtInteger is C's %d/%i (signed) and %o/%u/%x/%X.
func fmtInteger(sp fmtSpec, neg bool, mag uint64, base int, upper, signed bool) string {
	digits := strconv.FormatUint(mag, base)
	if upper {
		digits = strings.ToUpper(digits)
	}
	if sp.prec >= 0 {
		if sp.prec == 0 && mag == 0 {
			digits = ""
		}
		if n := sp.prec - len(digits); n > 0 {
			digits = strings.Repeat("0", n) + digits
		}
	}
	prefix := ""
	switch {
	case signed && neg:
		prefix = "-"
	case signed && sp.plus:
		prefix = "+"
	case signed && sp.space:
		prefix = " "
	case sp.hash && base == 16 && mag != 0:
		prefix = "0x"
		if upper {
			prefix = "0X"
		}
	case sp.hash && base == 8 && (digits == "" || digits[0] != '0'):
		digits = "0" + digits
	}
	return pad(sp, prefix, digits, sp.zero && sp.prec < 0)
}

// pad applies the width: spaces after (flag -), zeros between prefix and body (flag 0
// where C honours it), else spaces before.
func pad(sp fmtSpec, prefix, body string, zeros bool) string {
	n := sp.width - len(prefix) - len(body)
	switch {
	case n <= 0:
		return prefix + body
	case sp.minus:
		return prefix + body + strings.Repeat(" ", n)
	case zeros:
		return prefix + strings.Repeat("0", n) + body
	}
	return strings.Repeat(" ", n) + prefix + body
}

// fmtFloat is C's %e, %E, %f, %g and %G.
func fmtFloat(sp fmtSpec, x float64) string {
	prefix := ""
	switch {
	case math.Signbit(x):
		prefix = "-"
	case sp.plus:
		prefix = "+"
	case sp.space:
		prefix = " "
	}
	upper := sp.verb == 'E' || sp.verb == 'G'
	if math.IsNaN(x) || math.IsInf(x, 0) {
		body := "inf"
		if math.IsNaN(x) {
			body = "nan"
		}
		if upper {
			body = strings.ToUpper(body)
		}
		return pad(sp, prefix, body, false)
	}
	x = math.Abs(x)
	prec := sp.prec
	if prec < 0 {
		prec = 6
	}
	var body string
	switch sp.verb {
	case 'f':
		body = strconv.FormatFloat(x, 'f', prec, 64)
		if sp.hash && prec == 0 {
			body += "."
		}
	case 'e', 'E':
		body = expForm(x, prec, sp.hash)
	default: // g, G
		if prec == 0 {
			prec = 1
		}
		exp := 0
		if x != 0 {
			e := strconv.FormatFloat(x, 'e', prec-1, 64)
			exp, _ = strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
		}
		if prec > exp && exp >= -4 {
			body = strconv.FormatFloat(x, 'f', prec-1-exp, 64)
			if sp.hash && !strings.Contains(body, ".") {
				body += "."
			}
		} else {
			body = expForm(x, prec-1, sp.hash)
		}
		if !sp.hash {
			body = trimFraction(body)
		}
	}
	if upper {
		body = strings.ToUpper(body)
	}
	return pad(sp, prefix, body, sp.zero)
}

// expForm is C's %e body: d.ddde±XX, a point even at precision 0 under '#'.
func expForm(x float64, prec int, hash bool) string {
	s := strconv.FormatFloat(x, 'e', prec, 64)
	if hash && prec == 0 {
		i := strings.IndexByte(s, 'e')
		s = s[:i] + "." + s[i:]
	}
	return s
}

// trimFraction removes the trailing zeros of a %g body's fraction, and the point if
// nothing is left after it.
func trimFraction(s string) string {
	mant, exp := s, ""
	if i := strings.IndexByte(s, 'e'); i >= 0 {
		mant, exp = s[:i], s[i:]
	}
	if strings.Contains(mant, ".") {
		mant = strings.TrimRight(mant, "0")
		mant = strings.TrimSuffix(mant, ".")
	}
	return mant + exp
}

// quoteLua is Lua 5.1's %q: the string in double quotes, with ", \ and newline escaped by
// a backslash, \r as \r and NUL as \000; every other byte as it is.
func quoteLua(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '\n':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\000`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// quotedSize is the length of quoteLua(s), measured without building it.
func quotedSize(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\\', '\n', '\r':
			n++
		case 0:
			n += 3
		}
	}
	return n
}

// luaFmtArgs reads string.format's arguments from the Lua stack.
type luaFmtArgs struct {
	v *vm
	L *glua.LState
}

func (a luaFmtArgs) number(i int) (float64, error) {
	return float64(a.L.CheckNumber(i)), nil // raises Lua's own "bad argument" error
}

func (a luaFmtArgs) str(i int) (string, error) {
	if i > a.L.GetTop() {
		return "", fmt.Errorf("bad argument #%d to 'format' (string expected, got no value)", i)
	}
	return a.v.tostring(a.L, a.L.Get(i)), nil
}

// strFormat is string.format(f, ...).
func (v *vm) strFormat(L *glua.LState) int {
	f := L.CheckString(1)
	out, err := luaFormat(f, luaFmtArgs{v: v, L: L}, v.lim.MaxStringBytes)
	if err != nil {
		var le *formatLimitError
		if errors.As(err, &le) {
			return v.raiseFatal(L, "%s", err)
		}
		L.RaiseError("%s", err)
	}
	L.Push(glua.LString(out))
	return 1
}
