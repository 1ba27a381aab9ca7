package tui

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
)

// Reading event fields. Live events carry Go values (int, int64, structs such as
// agent.Usage); stored events carry what encoding/json decodes (float64, maps).

func str(d map[string]any, k string) string {
	switch v := d[k].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

func num(v any) float64 {
	switch n := v.(type) {
	case int:
		return float64(n)
	case int64:
		return float64(n)
	case int32:
		return float64(n)
	case uint64:
		return float64(n)
	case float64:
		return n
	case float32:
		return float64(n)
	case json.Number:
		f, _ := n.Float64()
		return f
	case *float64:
		if n != nil {
			return *n
		}
	}
	return 0
}

func intOf(d map[string]any, k string) int { return int(num(d[k])) }

func msOf(d map[string]any, k string) time.Duration {
	return time.Duration(num(d[k]) * float64(time.Millisecond))
}

// fields reads a nested object: a map as it is, anything else (a struct of a live event)
// through its JSON form.
func fields(v any) map[string]any {
	switch m := v.(type) {
	case nil:
		return nil
	case map[string]any:
		return m
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

func timeOf(v any) time.Time {
	switch t := v.(type) {
	case time.Time:
		return t
	case string:
		if p, err := time.Parse(time.RFC3339Nano, t); err == nil {
			return p
		}
	}
	return time.Time{}
}

// Log levels, lowest first.
var levels = []string{"trace", "debug", "info", "warn", "error"}

// levelRank is the rank of a log level; an unknown level counts as info.
func levelRank(s string) int {
	for i, l := range levels {
		if s == l {
			return i
		}
	}
	return 2
}

// Formatting numbers, durations and money.

// fmtDur is a finished duration: 850ms, 4.2s, 42s, 1m12s, 1h03m.
func fmtDur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", float64(d.Milliseconds())/1000)
	}
	return fmtClock(d)
}

// fmtClock is a running duration in whole seconds: 0s, 42s, 1m12s, 1h03m.
func fmtClock(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}

// fmtTok is a token count: 950, 1.2k, 15.2k, 3.4M.
func fmtTok(n int) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d", n)
	case n < 999_950:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprintf("%.1fM", float64(n)/1e6)
}

// fmtCost is a short amount for status lines: $0.04, $12.30, $0.0012.
func fmtCost(c float64) string {
	if c > 0 && c < 0.01 {
		return fmt.Sprintf("$%.4f", c)
	}
	return fmt.Sprintf("$%.2f", c)
}

// fmtAt is a point in time as a person reads it: the time of day, with the date when it
// is not today.
func fmtAt(t, now time.Time, loc *time.Location) string {
	t, now = t.In(loc), now.In(loc)
	if y, m, d := t.Date(); y == now.Year() && m == now.Month() && d == now.Day() {
		return t.Format("15:04:05 MST")
	}
	return t.Format("2006-01-02 15:04:05 MST")
}

// Making text safe for a terminal.

// cleanText removes escape sequences and control characters except newlines; tabs become
// spaces. Text the run produced (a model's output, a script's log) goes through it before
// it is kept, so it can never move the cursor or recolour the screen.
func cleanText(s string) string {
	if isPlain(s, true) {
		return s
	}
	s = ansi.Strip(s)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteByte('\n')
		case r == '\t':
			b.WriteString("    ")
		case r == utf8.RuneError, unicode.IsControl(r), r == '\u2028', r == '\u2029':
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Clean is cleanText for the CLI's own output on a terminal (a report, an error, a
// script shown before it runs): the same filter as every view of this package.
func Clean(s string) string { return cleanText(s) }

// CleanLine is oneLine for the CLI's own output on a terminal: a table cell or a line of
// its own.
func CleanLine(s string) string { return oneLine(s) }

// oneLine is cleanText on one line: newlines become spaces and the ends are trimmed.
func oneLine(s string) string {
	s = clipLine(s)
	if isPlain(s, false) {
		return strings.TrimSpace(s)
	}
	s = cleanText(s)
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
	return s
}

// isPlain reports whether s has nothing cleanText would change.
func isPlain(s string, newlines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && !(newlines && c == '\n') || c == 0x7f {
			return false
		}
		if c >= 0x80 {
			return false // not ASCII: let the slow path judge (C1 controls, line separators)
		}
	}
	return true
}

// lastLine is the last non-blank line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, " \n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

// Fitting text to columns. Widths are terminal cells.

func width(s string) int { return ansi.StringWidth(s) }

// trunc cuts s to at most w cells, ending in "…" when it was cut.
func trunc(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if width(s) <= w {
		return s
	}
	if w == 1 {
		return "…"
	}
	return ansi.Truncate(s, w, "…")
}

// pad cuts or pads s to exactly w cells, left aligned.
func pad(s string, w int) string {
	s = trunc(s, w)
	if n := w - width(s); n > 0 {
		s += strings.Repeat(" ", n)
	}
	return s
}

// padLeft cuts or pads s to exactly w cells, right aligned.
func padLeft(s string, w int) string {
	s = trunc(s, w)
	if n := w - width(s); n > 0 {
		s = strings.Repeat(" ", n) + s
	}
	return s
}

func clamp(v, lo, hi int) int {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// join joins the non-empty parts with " · ".
func join(parts ...string) string {
	out := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, " · ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// maxLine bounds the text a view shows on one line: a log message may be a megabyte.
const maxLine = 4 << 10

// clipLine cuts s to maxLine bytes on a rune boundary, saying how much is left out.
func clipLine(s string) string {
	if len(s) <= maxLine {
		return s
	}
	n := maxLine
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf(" … (%d bytes more; luft logs shows them all)", len(s)-n)
}

// waits says what of a finished agent's time was not its own: "queued 3.0s", "approval
// 5m27s", or "" when it waited for nothing worth a word (under a tenth of a second:
// handing on a slot takes a few milliseconds).
func (a *Agent) waits() string {
	const worth = 100 * time.Millisecond
	var parts []string
	if a.Queued >= worth {
		parts = append(parts, "queued "+fmtDur(a.Queued))
	}
	if a.Approval >= worth {
		parts = append(parts, "approval "+fmtDur(a.Approval))
	}
	return strings.Join(parts, ", ")
}
