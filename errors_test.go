package luft_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft"
)

// Every way a run stops maps to one typed error (errors.As) or sentinel (errors.Is),
// with the runtime's message.
func TestTypedErrors(t *testing.T) {
	hang, _ := blockOn("hang")
	eng := newEngine(t, luft.Options{}, luft.WithBackend("hang", hang))
	for _, tc := range []struct {
		name    string
		script  luft.Script
		status  luft.Status // "" = refused by Start
		check   func(error) bool
		message string
	}{
		{"syntax", luft.Script{Source: "function main( report(1) end"}, "",
			func(err error) bool { var e *luft.ScriptError; return errors.As(err, &e) && e.Kind == "syntax" }, "syntax error"},
		{"no main", luft.Script{Source: "x = 1"}, luft.StatusFailed,
			func(err error) bool { var e *luft.ScriptError; return errors.As(err, &e) && e.Kind == "invalid" }, "main"},
		{"runtime error", luft.Script{Path: "w.lua", Source: "function main()\n  error('boom')\nend"}, luft.StatusFailed,
			func(err error) bool {
				var e *luft.ScriptError
				return errors.As(err, &e) && e.Kind == "runtime" && e.Where == "w.lua:2" && e.Msg == "boom"
			}, "w.lua:2: boom"},
		{"agent calls", luft.Script{Source: "function main() agent{prompt='a'} agent{prompt='b'} end", MaxAgentCalls: 1}, luft.StatusFailed,
			func(err error) bool { var e *luft.LimitError; return errors.As(err, &e) }, "agent"},
		{"call depth", luft.Script{Source: "local function f(n) return f(n + 1) + 1 end\nfunction main() f(1) end"}, luft.StatusFailed,
			func(err error) bool { var e *luft.LimitError; return errors.As(err, &e) }, "call depth"},
		{"token budget", luft.Script{Source: "function main() budget{tokens=1} agent{prompt='a'} agent{prompt='b'} end"}, luft.StatusFailed,
			func(err error) bool { var e *luft.BudgetError; return errors.As(err, &e) && !e.Time }, "budget exceeded: tokens=1"},
		// The calls hang until their run stops, so only the limit can end these runs.
		{"time budget", luft.Script{Source: "function main() budget{time_ms=1} agent{prompt='hang', backend='hang'} end"}, luft.StatusSuspended,
			func(err error) bool { var e *luft.BudgetError; return errors.As(err, &e) && e.Time }, "time budget"},
		{"timeout", luft.Script{Source: "function main() agent{prompt='hang', backend='hang'} end", Timeout: time.Millisecond}, luft.StatusFailed,
			func(err error) bool { return errors.Is(err, luft.ErrTimeout) }, "--timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := eng.Run(t.Context(), tc.script)
			if err == nil {
				t.Fatalf("no error (%s)", res.Status)
			}
			if !tc.check(err) {
				t.Fatalf("error %T %v is not the expected kind", err, err)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("error %q does not mention %q", err, tc.message)
			}
			if res.Status != tc.status {
				t.Fatalf("status %q, want %q", res.Status, tc.status)
			}
			if tc.status != "" {
				info, serr := eng.Status(t.Context(), res.RunID)
				if serr != nil || info.Status != tc.status || info.Error == "" {
					t.Fatalf("stored: %s %q %v", info.Status, info.Error, serr)
				}
			}
		})
	}
}

// A run id that names no run, or more than one, is a *NotFoundError everywhere a run id
// is taken.
func TestNotFound(t *testing.T) {
	eng := newEngine(t, luft.Options{})
	var ids []string
	for range 2 {
		res, err := eng.Run(t.Context(), luft.Script{Source: "function main() end"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.RunID)
	}
	prefix := ""
	for i := range ids[0] {
		if ids[0][i] != ids[1][i] {
			break
		}
		prefix = ids[0][:i+1]
	}
	if prefix == "" {
		t.Fatalf("runs %v share no prefix", ids)
	}
	for _, ref := range []string{"ffffffff-no-such-run", prefix} {
		ambiguous := ref == prefix
		check := func(what string, err error) {
			t.Helper()
			var nf *luft.NotFoundError
			if !errors.As(err, &nf) || nf.Ref != ref || nf.Ambiguous != ambiguous {
				t.Errorf("%s(%q): %T %v, want a *NotFoundError (ambiguous %v)", what, ref, err, err, ambiguous)
			}
		}
		_, err := eng.Status(t.Context(), ref)
		check("Status", err)
		_, err = eng.Resume(t.Context(), ref)
		check("Resume", err)
		check("Cancel", eng.Cancel(t.Context(), ref))
		for _, err := range eng.Events(t.Context(), ref, 0) {
			check("Events", err)
		}
	}
}
