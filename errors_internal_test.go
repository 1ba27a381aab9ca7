package luft

import (
	"errors"
	"fmt"
	"testing"

	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// typed maps each error the runtime can end a run or a lookup with, as the runtime
// wraps it, and keeps the chain: errors.Is still finds the runtime's sentinels.
func TestTypedMapping(t *testing.T) {
	div := &lua.ScriptError{Kind: lua.KindDivergence, Where: "w.lua:4",
		Msg: "LUFT1001 divergence at call main/2/par[3]/1: its inputs differ from the journal"}
	for _, tc := range []struct {
		in   error
		want func(error) bool
	}{
		{fmt.Errorf("run x: %w", storage.ErrRunNotFound), func(err error) bool {
			var e *NotFoundError
			return errors.As(err, &e) && !e.Ambiguous && errors.Is(err, storage.ErrRunNotFound)
		}},
		{fmt.Errorf("run 01: %w", storage.ErrAmbiguousRun), func(err error) bool { var e *NotFoundError; return errors.As(err, &e) && e.Ambiguous }},
		{runtime.ErrTimeBudget, func(err error) bool { var e *BudgetError; return errors.As(err, &e) && e.Time }},
		{&lua.ScriptError{Kind: lua.KindLimit, Msg: "budget exceeded: usd=1", Cause: runtime.ErrBudgetExceeded}, func(err error) bool {
			var e *BudgetError
			return errors.As(err, &e) && !e.Time && e.Msg == "budget exceeded: usd=1"
		}},
		{&lua.ScriptError{Kind: lua.KindLimit, Msg: "memory limit"}, func(err error) bool { var e *LimitError; return errors.As(err, &e) }},
		{fmt.Errorf("resume: %w", div), func(err error) bool {
			var e *DivergenceError
			return errors.As(err, &e) && e.CallKey == "main/2/par[3]/1" && e.Where == "w.lua:4"
		}},
		{&lua.ScriptError{Kind: lua.KindSyntax, Where: "w.lua:1", Msg: "syntax error"}, func(err error) bool {
			var e *ScriptError
			return errors.As(err, &e) && e.Kind == "syntax" && err.Error() == "w.lua:1: syntax error"
		}},
		{&lua.ScriptError{Kind: lua.KindCancelled, Msg: "run stopped", Cause: runtime.ErrCancelled}, func(err error) bool {
			var e *ScriptError
			return !errors.As(err, &e) && errors.Is(err, ErrCancelled)
		}},
		{runtime.ErrShutdown, func(err error) bool { return errors.Is(err, ErrShutdown) }},
		{errors.New("disk on fire"), func(err error) bool { return err.Error() == "disk on fire" }},
	} {
		if got := typed(tc.in, "x"); !tc.want(got) {
			t.Errorf("typed(%v) = %T %v", tc.in, got, got)
		}
	}
	if typed(nil, "") != nil {
		t.Error("typed(nil) is not nil")
	}
}
