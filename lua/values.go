package lua

import (
	"math"
	"strconv"

	glua "github.com/yuin/gopher-lua"
)

func (v *vm) valueEffect(L *glua.LState, kind string, hash string, fresh func() any) glua.LValue {
	t := v.current
	if t == nil || t.topLevel {
		v.raiseAt(L, "luft.%s() is not allowed in a script's top-level code; call it from main()", kind)
	}
	c := Call{Key: t.br.next(), Kind: kind, Hash: hash, Where: v.where(L), PhaseID: v.phaseID()}
	val, err := v.host.Value(c, fresh)
	if err != nil {
		v.hostError(L, err)
		L.RaiseError("luft.%s: %s", kind, err)
	}
	lv, err := v.codec.ToLua(val)
	if err != nil {
		L.RaiseError("luft.%s: %s", kind, err)
	}
	return lv
}

func (v *vm) nowFn(L *glua.LState) int {
	L.Push(v.valueEffect(L, KindNow, hashStrings(KindNow), func() any {
		return float64(v.cfg.Now().UnixMilli()) / 1000
	}))
	return 1
}

// randomFn is luft.random(), luft.random(n) and luft.random(m, n): m and n must be whole
// numbers within ±2^53 with m <= n, so the interval and its size are exact.
func (v *vm) randomFn(L *glua.LState) int {
	top := L.GetTop()
	bound := func(i int, name string) int64 {
		n, ok := L.Get(i).(glua.LNumber)
		if !ok || !wholeIn(float64(n), -maxRandom, maxRandom) {
			L.RaiseError("luft.random: %s must be a whole number from -2^53 to 2^53, got %s", name, v.tostring(L, L.Get(i)))
		}
		return int64(n)
	}
	lo, hi := int64(0), int64(0)
	switch top {
	case 0:
	case 1:
		lo, hi = 1, bound(1, "n")
	default:
		lo, hi = bound(1, "m"), bound(2, "n")
	}
	if top > 0 && lo > hi {
		L.RaiseError("luft.random: the interval [%d, %d] is empty (m must be at most n)", lo, hi)
	}
	L.Push(v.valueEffect(L, KindRandom, hashStrings(KindRandom, strconv.Itoa(top), strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10)), func() any {
		r := v.cfg.Rand()
		if top == 0 {
			return r
		}
		// The size may be 2^54+1, beyond an int64's exactness in a float: pick in
		// floats and clamp, since r*size can round up to size itself.
		size := float64(hi) - float64(lo) + 1
		return math.Min(float64(lo)+math.Floor(r*size), float64(hi))
	}))
	return 1
}

func (v *vm) uuidFn(L *glua.LState) int {
	L.Push(v.valueEffect(L, KindUUID, hashStrings(KindUUID), func() any { return v.cfg.UUID() }))
	return 1
}
