package lua

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// An error object nothing caught reads as its __tostring, else as its JSON: never "{}"
// for an object that says what it is, never a Go address, and a __tostring that
// misbehaves (raises, loops, recurses, tries to wait, breaks a limit) only means the
// object is shown as JSON.
func TestUncaughtErrorObjects(t *testing.T) {
	const custom = `setmetatable({code=2}, {__tostring=function(e) return "custom " .. e.code end})`
	cases := []struct {
		name, raise string
		want        string // the whole error message
	}{
		{"a table reads as JSON", `{code=1, msg="x"}`, `{"code":1,"msg":"x"}`},
		{"__tostring", custom, "custom 2"},
		{"__tostring over a message field", `setmetatable({message="m"}, {__tostring=function() return "shown" end})`, "shown"},
		{"__tostring returning a number", `setmetatable({}, {__tostring=function() return 42 end})`, "42"},
		{"__tostring using pcall", `setmetatable({}, {__tostring=function() local _, m = pcall(error, "inner", 0) return "wrapped " .. m end})`, "wrapped inner"},
		{"__tostring that raises", `setmetatable({code=3}, {__tostring=function() error("no") end})`, `{"code":3}`},
		{"__tostring that raises itself", `setmetatable({code=4}, {__tostring=error})`, `{"code":4}`},
		{"__tostring returning a table", `setmetatable({code=5}, {__tostring=function(e) return e end})`, `{"code":5}`},
		{"__tostring that loops", `setmetatable({code=6}, {__tostring=function() while true do end end})`, `{"code":6}`},
		{"__tostring that recurses", `setmetatable({code=7}, {__tostring=tostring})`, `{"code":7}`},
		{"__tostring that calls an agent", `setmetatable({code=8}, {__tostring=function() return agent{prompt="x"}.text end})`, `{"code":8}`},
		{"__tostring that breaks a limit", `setmetatable({code=9}, {__tostring=function() return string.rep("x", 2^40) end})`, `{"code":9}`},
		{"a __tostring that is not a function", `setmetatable({}, {__tostring="not a function"})`, `{}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost()
			start := time.Now()
			_, err := runScript(t, h, "function main() error("+tc.raise+") end")
			if err == nil {
				t.Fatal("the run succeeded")
			}
			if ErrorKindOf(err) != KindRuntime {
				t.Errorf("error kind %q, want %q (%v)", ErrorKindOf(err), KindRuntime, err)
			}
			if got := strings.TrimPrefix(err.Error(), "test.lua:1: "); got != tc.want {
				t.Errorf("error = %q, want %q", err, tc.want)
			}
			if len(h.calls) != 0 {
				t.Errorf("%d agent calls, want none", len(h.calls))
			}
			if d := time.Since(start); d > time.Minute { // a hang guard, with room for a busy machine
				t.Errorf("the run took %s to end", d)
			}
		})
	}
}

// A branch's error slot reads the same way.
func TestBranchErrorObjectTostring(t *testing.T) {
	runCases(t, []scriptCase{
		{name: "branch", src: `function main()
  local r = parallel({1}, function() error(setmetatable({}, {__tostring=function() return "custom" end})) end)
  report(r[1].error)
end`, want: `"custom"`},
	})
}

// A huge rendering is cut with a marker.
func TestErrorObjectTextIsCapped(t *testing.T) {
	for _, raise := range []string{
		`setmetatable({}, {__tostring=function() return string.rep("é", 100000) end})`,
		`{string.rep("y", 100000)}`,
	} {
		_, err := runScript(t, newFakeHost(), "function main() error("+raise+") end")
		if err == nil {
			t.Fatal("the run succeeded")
		}
		msg := err.Error()
		if len(msg) > maxErrorObjectText+100 || !strings.Contains(msg, "bytes more)") {
			t.Errorf("error of %d bytes, want at most about %d ending in a marker: …%s", len(msg), maxErrorObjectText, msg[max(0, len(msg)-60):])
		}
		if !utf8.ValidString(msg) {
			t.Errorf("the cut split a character")
		}
	}
}
