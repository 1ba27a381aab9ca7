package lua

import (
	"strconv"
	"strings"
	"testing"
)

// What a script writes is capped (SPEC §3): log and print messages and the report are
// cut with a marker naming the limit; a report too big to cut ends the run with a limit
// error at its line; repeated report() calls record one report event.
func TestWriteCaps(t *testing.T) {
	small := func(c *Config) { c.Limits.MaxLogBytes, c.Limits.MaxReportBytes = 1000, 2000 }
	msgOf := func(t *testing.T, h *fakeHost, i int) string {
		t.Helper()
		logs := h.eventsOf("log")
		if len(logs) <= i {
			t.Fatalf("%d log events, want more than %d", len(logs), i)
		}
		return logs[i].Data["msg"].(string)
	}
	cutAt := func(limitBytes int, limit string) func(string) string {
		return func(s string) string {
			switch {
			case len(s) > limitBytes:
				return "message of " + strconv.Itoa(len(s)) + " bytes is over the cap"
			case !strings.Contains(s, "cut by luft") || !strings.Contains(s, limit):
				return "no marker naming " + limit + " in " + s[max(0, len(s)-100):]
			}
			return ""
		}
	}
	runCases(t, []scriptCase{
		{name: "log cut", config: small, src: `function main() log(string.rep("a", 100000), "warn") end`,
			check: func(t *testing.T, h *fakeHost) {
				if p := cutAt(1000, "limits.max_log_bytes")(msgOf(t, h, 0)); p != "" {
					t.Fatal(p)
				}
			}},
		{name: "log under the cap untouched", config: small, src: `function main() log(string.rep("a", 900)) end`,
			check: func(t *testing.T, h *fakeHost) {
				if got := msgOf(t, h, 0); got != strings.Repeat("a", 900) {
					t.Fatalf("a message under the cap was changed (%d bytes)", len(got))
				}
			}},
		{name: "print cut, later arguments not joined", config: small,
			src: `function main() local s = string.rep("p", 800) print(s, s, s, s, s, s) end`,
			check: func(t *testing.T, h *fakeHost) {
				if p := cutAt(1000, "limits.max_log_bytes")(msgOf(t, h, 0)); p != "" {
					t.Fatal(p)
				}
			}},
		{name: "string report cut", config: small, src: `function main() report(string.rep("r", 100000)) end`,
			check: func(t *testing.T, h *fakeHost) {
				reps := h.eventsOf("report")
				if len(reps) != 1 {
					t.Fatalf("%d report events, want 1", len(reps))
				}
				if p := cutAt(2000, "limits.max_report_bytes")(reps[0].Data["value"].(string)); p != "" {
					t.Fatal(p)
				}
			}},
		{name: "table report keeps its shape", config: small,
			src: `function main() report({markdown = string.rep("m", 100000), n = 3}) end`,
			check: func(t *testing.T, h *fakeHost) {
				v := h.eventsOf("report")[0].Data["value"].(map[string]any)
				if v["n"] != 3.0 {
					t.Fatalf("the report's other fields were changed: %v", v["n"])
				}
				if p := cutAt(2000, "limits.max_report_bytes")(v["markdown"].(string)); p != "" {
					t.Fatal(p)
				}
			}},
		{name: "table report too big", config: small, kind: KindLimit, errSub: "limits.max_report_bytes",
			src: "function main()\n  local t = {}\n  for i = 1, 5000 do t[i] = i end\n  report(t)\nend",
			check: func(t *testing.T, h *fakeHost) {
				if len(h.eventsOf("report")) != 0 {
					t.Fatal("a refused report was recorded")
				}
			}},
		{name: "table report too big names the line", config: small, errSub: "test.lua:4:",
			src: "function main()\n  local t = {}\n  for i = 1, 5000 do t[i] = i end\n  pcall(report, t)\nend"},
		{name: "cyclic report", errSub: "test.lua:3: report: the value cannot be stored as JSON: $.self: cycle",
			src: "function main()\n  local t = {} t.self = t\n  report(t)\nend",
			check: func(t *testing.T, h *fakeHost) {
				if len(h.eventsOf("report")) != 0 {
					t.Fatal("a refused report was recorded")
				}
			}},
		{name: "deep report", errSub: "table nesting deeper than 64 levels",
			src: "function main()\n  local t = {}\n  for i = 1, 100000 do t = {t} end\n  report(t)\nend",
			check: func(t *testing.T, h *fakeHost) {
				if len(h.eventsOf("report")) != 0 {
					t.Fatal("a refused report was recorded")
				}
			}},
		{name: "repeated reports record one event", src: `function main()
  local s = string.rep("x", 100000)
  for i = 1, 200 do report(s .. i) end
end`, check: func(t *testing.T, h *fakeHost) {
			if n := len(h.eventsOf("report")); n != 1 {
				t.Fatalf("%d report events, want 1", n)
			}
		}},
	})
}
