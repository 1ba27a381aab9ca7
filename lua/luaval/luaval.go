package luaval

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// Default limits, used when a Limits field is zero (or negative).
const (
	DefaultMaxDepth = 64
	DefaultMaxBytes = 16 << 20
	DefaultMaxNodes = 1_000_000
)

// Limits bound conversions. Zero values mean the defaults.
type Limits struct {
	// MaxDepth is the deepest allowed nesting of arrays/objects (tables);
	// the outermost container is level 1. Default 64.
	MaxDepth int
	// MaxBytes caps the size of encoded JSON output and of JSON input to
	// Decode. Default 16 MiB.
	MaxBytes int
	// MaxNodes caps how many values one Encode or FromLua visits. A table
	// reached twice is visited twice, so a table shared many times (t = {t, t}
	// nested 60 times) would expand to 2^60 values: the count stops it however
	// small its JSON would start. Default 1,000,000.
	MaxNodes int
}

func (l Limits) normalized() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxNodes <= 0 {
		l.MaxNodes = DefaultMaxNodes
	}
	return l
}

// ErrLimit is matched (errors.Is) by every error caused by a depth or size
// limit.
var ErrLimit = errors.New("luaval: limit exceeded")

// ErrTooLarge is matched (errors.Is) by the errors of the limits on what a
// conversion builds: the output size and the number of values. It also
// matches ErrLimit.
var ErrTooLarge = errors.New("luaval: value too large")

type limitError string

func (e limitError) Error() string        { return string(e) }
func (e limitError) Is(target error) bool { return target == ErrLimit }

type tooLargeError string

func (e tooLargeError) Error() string { return string(e) }
func (e tooLargeError) Is(target error) bool {
	return target == ErrLimit || target == ErrTooLarge
}

// PathError is a conversion error located at a JSON path such as
// "$.items[3].fn" (array positions are 1-based, as in Lua).
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

// Registry keys under which the per-state sentinels are kept.
const (
	regNull  = "luft.luaval.null"
	regArray = "luft.luaval.array"
)

// nullValue is the Go value stored in the json.null userdata.
type nullValue struct{}

// Codec converts values for one *lua.LState. Create it with NewCodec.
type Codec struct {
	// L is the state the Codec creates tables for.
	L *lua.LState
	// Null is the per-state json.null sentinel.
	Null *lua.LUserData

	// Interrupt, when set, is asked every few thousand values of a conversion
	// of Lua values; a non-nil error stops the conversion with that error (the
	// VM passes its context's cause, so a cancel or timeout ends even a huge
	// conversion).
	Interrupt func() error
	// OnTooLarge, when set, is called by the json module's functions with an
	// error matching ErrTooLarge (and its message) before they raise it; it may
	// raise an error of its own instead. The VM ends the run there, with the
	// script position.
	OnTooLarge func(L *lua.LState, msg string)

	arrayMT *lua.LTable
	lim     Limits
}

// NewCodec returns a Codec for L. The json.null sentinel and the array
// marker are created on first use and kept in L's registry, so all Codecs of
// one state (and its coroutines) agree on them.
func NewCodec(L *lua.LState, lim Limits) *Codec {
	c := &Codec{L: L, lim: lim.normalized()}
	reg := L.G.Registry
	if ud, ok := reg.RawGetString(regNull).(*lua.LUserData); ok {
		c.Null = ud
	} else {
		c.Null = newNull(L)
		reg.RawSetString(regNull, c.Null)
	}
	if mt, ok := reg.RawGetString(regArray).(*lua.LTable); ok {
		c.arrayMT = mt
	} else {
		mt := L.CreateTable(0, 2)
		// Protected: getmetatable returns this string and scripts cannot
		// modify the marker shared by every array of the state.
		mt.RawSetString("__metatable", lua.LString("json.array"))
		c.arrayMT = mt
		reg.RawSetString(regArray, mt)
	}
	return c
}

func newNull(L *lua.LState) *lua.LUserData {
	ud := L.NewUserData()
	ud.Value = nullValue{}
	mt := L.CreateTable(0, 4)
	mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LString("json.null"))
		return 1
	}))
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("attempt to index json.null (a JSON null value) with key %s", keyDesc(L.Get(2)))
		return 0
	}))
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("attempt to set key %s on json.null (a JSON null value)", keyDesc(L.Get(2)))
		return 0
	}))
	mt.RawSetString("__metatable", lua.LString("json.null"))
	ud.Metatable = mt
	return ud
}

func keyDesc(v lua.LValue) string {
	if s, ok := v.(lua.LString); ok {
		return strconv.Quote(string(s))
	}
	return v.String()
}

// Limits returns the codec's effective limits (defaults filled in).
func (c *Codec) Limits() Limits { return c.lim }

// IsArray reports whether t carries the array marker (json.array, or an
// array produced by Decode/ToLua).
func (c *Codec) IsArray(t *lua.LTable) bool {
	return t != nil && t.Metatable == lua.LValue(c.arrayMT)
}

// NewArray returns an empty table with room for n elements, marked as a JSON
// array.
func (c *Codec) NewArray(n int) *lua.LTable {
	t := c.L.CreateTable(n, 0)
	t.Metatable = c.arrayMT
	return t
}

// MarkArray marks t as a JSON array. It fails if t already has a different
// metatable; marking twice is fine.
func (c *Codec) MarkArray(t *lua.LTable) error {
	switch t.Metatable {
	case lua.LValue(c.arrayMT):
		return nil
	case nil, lua.LNil:
		t.Metatable = c.arrayMT
		return nil
	}
	return errors.New("table already has a metatable")
}

// ---------------------------------------------------------------------------
// walker: per-call scratch state (path, ancestors, sort buffers, output).

type segKind uint8

const (
	segKey    segKind = iota // .key or ["key"]
	segIndex                 // [i], 1-based
	segNumKey                // [k], a Lua number key of an object
)

type seg struct {
	kind segKind
	idx  int
	key  string
}

// entry is one key/value pair of a Lua table being converted.
type entry struct {
	key string // object key (string keys, or number keys in decimal)
	idx int    // array position (1-based), 0 if not a valid one
	num bool   // the Lua key is a number
	v   lua.LValue
}

type walker struct {
	c        *Codec // nil for the package-level Encode
	maxDepth int
	maxBytes int
	maxNodes int
	nodes    int
	indent   string
	// size is, for FromLua, a lower bound of the JSON size of what was converted so
	// far: a table reachable twice is converted twice, so without it a small DAG
	// (t = {t, t} nested 60 times) would expand to 2^60 values.
	size int

	path []seg
	anc  []*lua.LTable
	kv   []entry
	keys []string
	buf  []byte
}

var walkers = sync.Pool{New: func() any { return new(walker) }}

func getWalker(c *Codec, lim Limits) *walker {
	w := walkers.Get().(*walker)
	w.c = c
	w.maxDepth = lim.MaxDepth
	w.maxBytes = lim.MaxBytes
	w.maxNodes = lim.MaxNodes
	w.nodes = 0
	return w
}

const maxPooledScratch = 1 << 16

func putWalker(w *walker) {
	w.c = nil
	w.indent = ""
	w.size = 0
	w.path = w.path[:0]
	clear(w.anc[:cap(w.anc)])
	w.anc = w.anc[:0]
	// kv and keys are cleared incrementally by their users on success; on
	// error paths they may still hold references.
	clear(w.kv)
	w.kv = w.kv[:0]
	clear(w.keys)
	w.keys = w.keys[:0]
	w.buf = w.buf[:0]
	if cap(w.kv) > maxPooledScratch || cap(w.keys) > maxPooledScratch || cap(w.buf) > 1<<20 {
		return
	}
	walkers.Put(w)
}

func (w *walker) pushKey(k string) { w.path = append(w.path, seg{kind: segKey, key: k}) }
func (w *walker) pushIdx(i int)    { w.path = append(w.path, seg{kind: segIndex, idx: i}) }
func (w *walker) pushNumKey(k string) {
	w.path = append(w.path, seg{kind: segNumKey, key: k})
}
func (w *walker) pop() { w.path = w.path[:len(w.path)-1] }

func (w *walker) pathString() string {
	var b strings.Builder
	b.WriteByte('$')
	for _, s := range w.path {
		switch s.kind {
		case segIndex:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.idx))
			b.WriteByte(']')
		case segNumKey:
			b.WriteByte('[')
			b.WriteString(s.key)
			b.WriteByte(']')
		default:
			if isIdent(s.key) {
				b.WriteByte('.')
				b.WriteString(s.key)
			} else {
				b.WriteByte('[')
				b.WriteString(strconv.Quote(s.key))
				b.WriteByte(']')
			}
		}
	}
	return b.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func (w *walker) errorf(format string, args ...any) error {
	return &PathError{Path: w.pathString(), Err: fmt.Errorf(format, args...)}
}

func (w *walker) wrap(err error) error {
	return &PathError{Path: w.pathString(), Err: err}
}

// visit counts one value of a conversion against MaxNodes and looks at the
// codec's Interrupt every 4096 values.
func (w *walker) visit() error {
	w.nodes++
	if w.nodes > w.maxNodes {
		return w.wrap(tooLargeError("more than " + strconv.Itoa(w.maxNodes) +
			" values (is one table reached many times, such as t = {t, t} nested? each time it is reached it is converted again)"))
	}
	if w.nodes&4095 == 0 && w.c != nil && w.c.Interrupt != nil {
		if err := w.c.Interrupt(); err != nil {
			return w.wrap(err)
		}
	}
	return nil
}

func (w *walker) depthError(what string) error {
	return w.wrap(limitError(fmt.Sprintf("%snesting deeper than %d levels", what, w.maxDepth)))
}

// typeName names a Lua value's type for error messages.
func typeName(v lua.LValue) string {
	switch v.Type() {
	case lua.LTUserData:
		return "a userdata"
	case lua.LTFunction:
		return "a function"
	case lua.LTThread:
		return "a thread"
	case lua.LTChannel:
		return "a channel"
	case lua.LTTable:
		return "a table"
	case lua.LTNumber:
		return "a number"
	case lua.LTString:
		return "a string"
	case lua.LTBool:
		return "a boolean"
	}
	return v.Type().String()
}
