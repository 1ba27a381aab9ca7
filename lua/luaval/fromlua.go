package luaval

import (
	"cmp"
	"math"
	"slices"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// FromLua converts a Lua value to nil, bool, float64, string, []any or
// map[string]any following the rules in the package documentation. Errors are
// *PathError values naming the offending value's path.
func (c *Codec) FromLua(v lua.LValue) (any, error) {
	w := getWalker(c, c.lim)
	out, err := w.fromLua(v, 0)
	putWalker(w)
	return out, err
}

func (w *walker) fromLua(v lua.LValue, depth int) (any, error) {
	if err := w.visit(); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case lua.LString:
		return string(x), w.grow(len(x) + 2)
	case lua.LNumber:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, w.errorf("cannot convert %s to JSON", numName(f))
		}
		return f, w.grow(1)
	case lua.LBool:
		return bool(x), w.grow(4)
	case *lua.LTable:
		return w.tableFromLua(x, depth)
	case *lua.LNilType, nil:
		return nil, w.grow(4)
	case *lua.LUserData:
		if w.c != nil && x == w.c.Null {
			return nil, w.grow(4)
		}
	}
	return nil, w.errorf("cannot convert %s to JSON", typeName(v))
}

// grow counts n more bytes of JSON output toward the size limit. It only ever
// undercounts (no escapes, one digit per number), so FromLua refuses a value only when
// Encode would refuse it too.
func (w *walker) grow(n int) error {
	w.size += n
	if w.size > w.maxBytes {
		return w.sizeError()
	}
	return nil
}

func numName(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case f > 0:
		return "inf"
	}
	return "-inf"
}

// tableShape is the JSON shape chosen for a Lua table.
type tableShape struct {
	array  bool
	n      int  // array length (max index) for arrays
	sorted bool // array entries are in ascending index order
}

// enterTable checks the depth and cycle conditions for t and pushes it on the
// ancestor stack; leaveTable pops it.
func (w *walker) enterTable(t *lua.LTable, depth int) error {
	for _, a := range w.anc {
		if a == t {
			return w.errorf("cycle: the table contains itself")
		}
	}
	if depth+1 > w.maxDepth {
		return w.depthError("table ")
	}
	w.anc = append(w.anc, t)
	return nil
}

func (w *walker) leaveTable() {
	w.anc[len(w.anc)-1] = nil
	w.anc = w.anc[:len(w.anc)-1]
}

// releaseEntries clears and drops w.kv[start:].
func (w *walker) releaseEntries(start int) {
	clear(w.kv[start:])
	w.kv = w.kv[:start]
}

// keyStats accumulates what collect learns about a table's keys.
type keyStats struct {
	nStr, nNum int
	maxInt     int
	sorted     bool
	firstStr   string
	firstNum   string
	badNum     string // first number key that is not a valid array index
}

// collect appends t's pairs (in pairs() order, which is deterministic) to
// w.kv and decides whether t is a JSON array or object. For objects every
// entry's key is set (number keys in decimal); for arrays every entry's idx.
func (w *walker) collect(t *lua.LTable) (tableShape, error) {
	marked := w.c != nil && t.Metatable == lua.LValue(w.c.arrayMT)
	st := keyStats{sorted: true}
	// The array part first, by index: LTable.Next would box every index.
	n := t.MaxN()
	for i := 1; i <= n; i++ {
		if v := t.RawGetInt(i); v != lua.LNil {
			if st.nNum == 0 {
				st.firstNum = strconv.Itoa(i)
			}
			st.nNum++
			st.maxInt = i
			w.kv = append(w.kv, entry{num: true, idx: i, v: v})
		}
	}
	// Then the hash part, in insertion order. Next(0) would skip the first
	// hash key, so start from nil when the array part is empty.
	var from lua.LValue = lua.LNil
	if n > 0 {
		from = boxedIndex(n)
	}
	for k, v := t.Next(from); k != lua.LNil; k, v = t.Next(k) {
		switch key := k.(type) {
		case lua.LString:
			if st.nStr == 0 {
				st.firstStr = string(key)
			}
			st.nStr++
			w.kv = append(w.kv, entry{key: string(key), v: v})
		case lua.LNumber:
			if err := w.numKey(&st, float64(key), v); err != nil {
				return tableShape{}, err
			}
		default:
			return tableShape{}, w.errorf("table key of type %s cannot be converted to JSON", k.Type())
		}
	}
	if marked {
		if st.nStr > 0 {
			return tableShape{}, w.errorf("table marked as json.array has string key %q", st.firstStr)
		}
		if st.badNum != "" {
			return tableShape{}, w.errorf("table marked as json.array has key %s; array keys must be 1, 2, 3, ...", st.badNum)
		}
		// Holes encode as null; bound them so a stray t[1e8] cannot turn
		// into a huge array.
		if st.maxInt > st.nNum && st.maxInt > w.maxBytes/5 {
			return tableShape{}, w.wrap(limitError("sparse array index " + strconv.Itoa(st.maxInt) + " exceeds the output size limit"))
		}
		return tableShape{array: true, n: st.maxInt, sorted: st.sorted}, nil
	}
	if st.nStr > 0 && st.nNum > 0 {
		return tableShape{}, w.errorf("table mixes string and number keys (%q and %s)", st.firstStr, st.firstNum)
	}
	if st.nNum > 0 && st.badNum == "" && st.maxInt == st.nNum {
		return tableShape{array: true, n: st.nNum, sorted: st.sorted}, nil
	}
	if st.nNum > 0 {
		// An object keyed by integers: its keys are the decimal strings.
		for i := len(w.kv) - st.nNum; i < len(w.kv); i++ {
			if e := &w.kv[i]; e.idx > 0 {
				e.key = strconv.Itoa(e.idx)
			}
		}
	}
	return tableShape{}, nil
}

// numKey records a number key found in the hash part of a table.
func (w *walker) numKey(st *keyStats, f float64, v lua.LValue) error {
	if f != math.Trunc(f) || math.IsInf(f, 0) {
		return w.errorf("table key %s is not an integer", lua.LVAsString(lua.LNumber(f)))
	}
	e := entry{num: true, v: v}
	if f >= 1 && f <= maxArrayIndex {
		e.idx = int(f)
		if e.idx <= st.maxInt {
			st.sorted = false
		} else {
			st.maxInt = e.idx
		}
	} else {
		e.key = intString(f)
		if st.badNum == "" {
			st.badNum = e.key
		}
	}
	if st.nNum == 0 {
		st.firstNum = intString(f)
	}
	st.nNum++
	w.kv = append(w.kv, e)
	return nil
}

// smallIndexes holds boxed LNumbers 0..len-1, so restarting LTable.Next
// after the array part of a small array does not allocate.
var smallIndexes = func() (a [1024]lua.LValue) {
	for i := range a {
		a[i] = lua.LNumber(i)
	}
	return a
}()

func boxedIndex(n int) lua.LValue {
	if n < len(smallIndexes) {
		return smallIndexes[n]
	}
	return lua.LNumber(n)
}

// maxArrayIndex bounds the keys treated as array positions.
const maxArrayIndex = math.MaxInt32

// intString formats an integral float64 in decimal, without exponent.
func intString(f float64) string {
	if f == 0 {
		return "0"
	}
	if f >= math.MinInt64 && f < math.MaxInt64 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func (w *walker) tableFromLua(t *lua.LTable, depth int) (any, error) {
	if err := w.enterTable(t, depth); err != nil {
		return nil, err
	}
	start := len(w.kv)
	shape, err := w.collect(t)
	if err != nil {
		return nil, err
	}
	count := len(w.kv) - start
	// Brackets and commas; in an array the holes too ("null,"), in an object the keys
	// (quotes and colon).
	if err := w.grow(2 + max(count-1, 0)); err != nil {
		return nil, err
	}
	if shape.array {
		if err := w.grow(5 * (shape.n - count)); err != nil {
			return nil, err
		}
	} else {
		for i := start; i < start+count; i++ {
			if err := w.grow(len(w.kv[i].key) + 3); err != nil {
				return nil, err
			}
		}
	}
	var out any
	if shape.array {
		arr := make([]any, shape.n)
		for i := start; i < start+count; i++ {
			e := w.kv[i]
			w.pushIdx(e.idx)
			v, err := w.fromLua(e.v, depth+1)
			if err != nil {
				return nil, err
			}
			w.pop()
			arr[e.idx-1] = v
		}
		out = arr
	} else {
		m := make(map[string]any, count)
		for i := start; i < start+count; i++ {
			e := w.kv[i]
			w.pushObjKey(e)
			v, err := w.fromLua(e.v, depth+1)
			if err != nil {
				return nil, err
			}
			w.pop()
			m[e.key] = v
		}
		out = m
	}
	w.releaseEntries(start)
	w.leaveTable()
	return out, nil
}

// pushObjKey pushes the path segment of an object entry: number keys print
// as [k], string keys as .key or ["key"].
func (w *walker) pushObjKey(e entry) {
	if e.num {
		w.pushNumKey(e.key)
		return
	}
	w.pushKey(e.key)
}

// sortEntries orders w.kv[start:start+count] for output: arrays by index,
// objects by key.
func (w *walker) sortEntries(start, count int, shape tableShape) {
	region := w.kv[start : start+count]
	if shape.array {
		if !shape.sorted {
			slices.SortFunc(region, func(a, b entry) int { return cmp.Compare(a.idx, b.idx) })
		}
		return
	}
	if len(region) > 1 {
		slices.SortFunc(region, func(a, b entry) int { return cmp.Compare(a.key, b.key) })
	}
}
