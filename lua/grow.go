package lua

import (
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/luft-run/luft/event"
	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
)

// gopher-lua keeps every integer key below MaxArrayIndex (2^26) in a table's array part,
// and a key past the end of that part fills the gap with nils, one append at a time,
// inside a single instruction: `{[1]=1, [2]=2, [50000000]=3}` allocated 3.2 GB over 7 s
// that neither the memory watchdog nor a cancel could stop. C Lua would put such a key in
// the hash part; gopher-lua cannot be told to. So every table write whose key could be
// far past the end is checked before it happens:
//
//   - `t[k] = v` becomes `t[indexGlobal(t, k)] = v` (through locals when t is not a plain
//     name, so it is still evaluated once and in the same order);
//   - a constructor field `[k] = v` becomes `[fieldGlobal(k, i)] = v`, i being the
//     field's position (the table being built cannot hold more than i-1 slots before it);
//   - rawset and table.insert check their key in Go.
//
// A write may grow a table's array part by at most growSlots empty slots at once (see
// growLimit); one that would leave a longer run of nils ends the run with a limit error at
// the script line. Dense growth (t[#t+1] = v) is never refused: it is paid for by the
// instructions that make it, which the memory watchdog and cancellation see.

// indexGlobal and fieldGlobal are the globals the rewritten writes call. Like
// concatGlobal they are not valid Lua names, so no script can reach or replace them.
const (
	indexGlobal = "luft index"
	fieldGlobal = "luft field"
)

// freeKey is the largest constant key the rewrite leaves alone: a gap of that many slots
// costs 1 MiB at most, less than the smallest growLimit.
const freeKey = 1 << 16

// slotBytes is what one array slot (an LValue interface) costs.
const slotBytes = 16

// growLimit is how many empty slots one write may add to a table's array part: 1/1024 of
// the memory limit (262,144 slots, 4 MiB, for the default 4 GiB), never fewer than
// freeKey. A gap of that size costs about five times its bytes in append growth and a few
// milliseconds. Without a memory limit the default's value holds, since a gap fill cannot
// be interrupted by a cancel or a timeout either.
func growLimit(memLimit int64) int {
	if memLimit <= 0 {
		memLimit = 4 << 30
	}
	return max(freeKey, int(memLimit/1024/slotBytes))
}

// mayGrow tells whether a write with this key needs the check: any computed key, and
// numeric constants above freeKey.
func mayGrow(key ast.Expr) bool {
	switch k := key.(type) {
	case *ast.StringExpr, *ast.NilExpr, *ast.TrueExpr, *ast.FalseExpr:
		return false
	case *ast.NumberExpr:
		f, err := strconv.ParseFloat(k.Value, 64)
		if err != nil {
			n, ierr := strconv.ParseInt(k.Value, 0, 64)
			if ierr != nil {
				return true
			}
			f = float64(n)
		}
		return f > freeKey
	}
	return true
}

func isConst(e ast.Expr) bool {
	switch e.(type) {
	case *ast.StringExpr, *ast.NumberExpr, *ast.NilExpr, *ast.TrueExpr, *ast.FalseExpr:
		return true
	}
	return false
}

func identAt(name string, at ast.PositionHolder) *ast.IdentExpr {
	id := &ast.IdentExpr{Value: name}
	id.SetLine(at.Line())
	id.SetLastLine(at.LastLine())
	return id
}

func callAt(fn string, args []ast.Expr, at ast.PositionHolder) ast.Expr {
	call := &ast.FuncCallExpr{Func: identAt(fn, at), Args: args}
	call.SetLine(at.Line())
	call.SetLastLine(at.LastLine())
	return call
}

func localAt(name string, e ast.Expr, at ast.PositionHolder) ast.Stmt {
	s := &ast.LocalAssignStmt{Names: []string{name}, Exprs: []ast.Expr{e}}
	s.SetLine(at.Line())
	s.SetLastLine(at.LastLine())
	return s
}

// guardAssign rewrites the indexed targets of an assignment whose keys may grow a table.
// When every such target's table is a plain name, the name is passed to the check as it
// is (reading a name twice has no effect). Otherwise every indexed target's table and key
// are evaluated into locals first, left to right as the assignment would, inside a do
// block so the locals' scope ends with the statement (a goto past it stays legal).
func guardAssign(s *ast.AssignStmt) ast.Stmt {
	needs, simple := false, true
	for _, lhs := range s.Lhs {
		if a, ok := lhs.(*ast.AttrGetExpr); ok && mayGrow(a.Key) {
			needs = true
			if _, ok := a.Object.(*ast.IdentExpr); !ok {
				simple = false
			}
		}
	}
	if !needs {
		return s
	}
	if simple {
		for _, lhs := range s.Lhs {
			if a, ok := lhs.(*ast.AttrGetExpr); ok && mayGrow(a.Key) {
				obj := a.Object.(*ast.IdentExpr)
				a.Key = callAt(indexGlobal, []ast.Expr{identAt(obj.Value, obj), a.Key}, a)
			}
		}
		return s
	}
	var block []ast.Stmt
	for i, lhs := range s.Lhs {
		a, ok := lhs.(*ast.AttrGetExpr)
		if !ok {
			continue
		}
		tname := fmt.Sprintf("luft t%d", i)
		block = append(block, localAt(tname, a.Object, a))
		a.Object = identAt(tname, a)
		if isConst(a.Key) && !mayGrow(a.Key) {
			continue
		}
		key := a.Key
		if mayGrow(key) {
			key = callAt(indexGlobal, []ast.Expr{identAt(tname, a), key}, a)
		}
		kname := fmt.Sprintf("luft k%d", i)
		block = append(block, localAt(kname, key, a))
		a.Key = identAt(kname, a)
	}
	do := &ast.DoBlockStmt{Stmts: append(block, s)}
	do.SetLine(s.Line())
	do.SetLastLine(s.LastLine())
	return do
}

// guardFields rewrites the keyed fields of a constructor whose keys may grow the table.
func guardFields(e *ast.TableExpr) {
	for i, f := range e.Fields {
		if f.Key == nil || !mayGrow(f.Key) {
			continue
		}
		at := f.Key
		pos := &ast.NumberExpr{Value: strconv.Itoa(i + 1)}
		pos.SetLine(at.Line())
		pos.SetLastLine(at.LastLine())
		f.Key = callAt(fieldGlobal, []ast.Expr{f.Key, pos}, at)
	}
}

// arrayKey is the integer key of lv when gopher-lua would store it in a table's array
// part.
func arrayKey(lv glua.LValue) (int, bool) {
	n, ok := lv.(glua.LNumber)
	if !ok {
		return 0, false
	}
	f := float64(n)
	if f != math.Trunc(f) || f < 1 || f >= float64(glua.MaxArrayIndex) {
		return 0, false
	}
	return int(f), true
}

// ltableArray is the index of LTable's array field. gopher-lua does not say how long a
// table's array part is (Len and MaxN scan back over trailing nils), so it is read
// through reflection; TestTableArrayFieldFound fails if a new gopher-lua renames it.
var ltableArray = func() []int {
	f, ok := reflect.TypeFor[glua.LTable]().FieldByName("array")
	if !ok || f.Type.Kind() != reflect.Slice {
		return nil
	}
	return f.Index
}()

// arrayLen is the length of tb's array part.
func arrayLen(tb *glua.LTable) int {
	if ltableArray == nil {
		return tb.MaxN()
	}
	return reflect.ValueOf(tb).Elem().FieldByIndex(ltableArray).Len()
}

// checkGrow ends the run when writing key k to tb would add more than growLimit empty
// slots to its array part.
func (v *vm) checkGrow(L *glua.LState, tb *glua.LTable, k int, what string) {
	if gap := k - 1 - arrayLen(tb); gap > v.growSlots {
		v.refuseGrow(L, gap, what)
	}
}

func (v *vm) refuseGrow(L *glua.LState, gap int, what string) {
	mem := "the default 4 GiB memory limit"
	if v.lim.MaxMemoryBytes > 0 {
		mem = "the " + event.FormatBytes(v.lim.MaxMemoryBytes) + " memory limit"
	}
	v.raiseFatal(L, "table growth limit (%d empty slots at once, 1/1024 of %s) exceeded: %s would grow a table's array part by %d empty slots (%s); use string keys for a sparse table",
		v.growSlots, mem, what, gap, event.FormatBytes(int64(gap)*slotBytes))
}

// indexFn is indexGlobal(t, k): it returns k, after checking the table a `t[k] = v`
// would really write to (following __newindex tables as gopher-lua's settable does;
// a __newindex function does its own writes, which are checked in turn).
func (v *vm) indexFn(L *glua.LState) int {
	key := L.Get(2)
	if k, ok := arrayKey(key); ok && k > v.growSlots {
		cur := L.Get(1)
		for range glua.MaxTableGetLoop {
			tb, ok := cur.(*glua.LTable)
			if !ok {
				break
			}
			next := L.GetMetaField(tb, "__newindex")
			if tb.RawGetInt(k) != glua.LNil || next == glua.LNil {
				v.checkGrow(L, tb, k, fmt.Sprintf("t[%d]", k))
				break
			}
			cur = next
		}
	}
	L.SetTop(2)
	return 1
}

// fieldFn is fieldGlobal(k, i): the key of a constructor's i-th field, checked against a
// table of at most i-1 array slots.
func (v *vm) fieldFn(L *glua.LState) int {
	key := L.Get(1)
	if k, ok := arrayKey(key); ok && k > v.growSlots {
		if gap := k - int(L.CheckNumber(2)); gap > v.growSlots {
			v.refuseGrow(L, gap, fmt.Sprintf("the table constructor's [%d]", k))
		}
	}
	L.SetTop(1)
	return 1
}

// rawset is the base library's rawset with the growth check.
func (v *vm) rawset(L *glua.LState) int {
	tb := L.CheckTable(1)
	key, val := L.CheckAny(2), L.CheckAny(3)
	if k, ok := arrayKey(key); ok && k > v.growSlots {
		v.checkGrow(L, tb, k, fmt.Sprintf("rawset(t, %d, v)", k))
	}
	L.RawSet(tb, key, val)
	return 0
}

// tableInsert is gopher-lua's table.insert with the growth check: a position past the
// end is a plain write there.
func (v *vm) tableInsert(L *glua.LState) int {
	tb := L.CheckTable(1)
	switch L.GetTop() {
	case 1:
		L.RaiseError("wrong number of arguments")
	case 2:
		tb.Append(L.Get(2))
		return 0
	}
	pos := L.CheckInt(2)
	if k, ok := arrayKey(glua.LNumber(pos)); ok && k > v.growSlots {
		v.checkGrow(L, tb, k, fmt.Sprintf("table.insert(t, %d, v)", k))
	}
	tb.Insert(pos, L.CheckAny(3))
	return 0
}
