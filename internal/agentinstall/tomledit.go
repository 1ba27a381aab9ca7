package agentinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

// A TOML config is edited as text, one statement at a time, so that the user's comments,
// key order and layout survive: luft touches only the lines of its own table. Every edit is
// checked by parsing the result and comparing it with the original, changed only where
// luft meant to change it; any other difference refuses the edit.

type stmtKind int

const (
	stmtBlank stmtKind = iota
	stmtComment
	stmtTable      // [a.b]
	stmtArrayTable // [[a.b]]
	stmtKeyVal     // a.b = value (which may span lines)
)

// stmt is one statement of a TOML file: bytes [start, end), end past its newline.
type stmt struct {
	start, end int
	kind       stmtKind
	key        []string
}

// splitTOML cuts a TOML document into statements. It knows enough of TOML's lexical rules
// (strings of the four kinds, comments, arrays and inline tables spanning lines) to find
// where each statement ends; the values themselves are left to the real parser.
func splitTOML(src string) ([]stmt, error) {
	var out []stmt
	i := 0
	for i < len(src) {
		st := stmt{start: i}
		j := i
		for j < len(src) && (src[j] == ' ' || src[j] == '\t') {
			j++
		}
		switch {
		case j == len(src) || src[j] == '\n' || src[j] == '\r':
			st.kind = stmtBlank
		case src[j] == '#':
			st.kind = stmtComment
		case src[j] == '[':
			st.kind = stmtTable
			j++
			if j < len(src) && src[j] == '[' {
				st.kind = stmtArrayTable
				j++
			}
			key, _, err := parseKey(src, j)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineOf(src, i), err)
			}
			st.key = key
		default:
			key, k, err := parseKey(src, j)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", lineOf(src, i), err)
			}
			st.kind, st.key = stmtKeyVal, key
			if j, err = skipValue(src, k); err != nil {
				return nil, fmt.Errorf("line %d: %w", lineOf(src, i), err)
			}
		}
		st.end = lineEnd(src, j)
		out = append(out, st)
		i = st.end
	}
	return out, nil
}

func lineOf(src string, off int) int { return 1 + strings.Count(src[:off], "\n") }

// lineEnd is the offset just past the newline at or after i (or the end of src).
func lineEnd(src string, i int) int {
	if n := strings.IndexByte(src[i:], '\n'); n >= 0 {
		return i + n + 1
	}
	return len(src)
}

// parseKey reads a dotted key at i and returns its parts and the offset after it.
func parseKey(src string, i int) ([]string, int, error) {
	var parts []string
	for {
		for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
			i++
		}
		if i >= len(src) {
			return nil, i, errors.New("unfinished key")
		}
		switch c := src[i]; {
		case c == '"' || c == '\'':
			end, err := skipString(src, i)
			if err != nil {
				return nil, i, err
			}
			var v struct{ K string }
			if _, err := toml.Decode("K = "+src[i:end], &v); err != nil {
				return nil, i, fmt.Errorf("bad quoted key %s", src[i:end])
			}
			parts, i = append(parts, v.K), end
		case isBareKeyByte(c):
			j := i
			for j < len(src) && isBareKeyByte(src[j]) {
				j++
			}
			parts, i = append(parts, src[i:j]), j
		default:
			return nil, i, fmt.Errorf("unexpected %q in a key", c)
		}
		for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
			i++
		}
		if i < len(src) && src[i] == '.' {
			i++
			continue
		}
		return parts, i, nil
	}
}

func isBareKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// skipString returns the offset after the string that starts at i (any of the four kinds).
func skipString(src string, i int) (int, error) {
	q := src[i]
	if strings.HasPrefix(src[i:], strings.Repeat(string(q), 3)) {
		delim := strings.Repeat(string(q), 3)
		j := i + 3
		for {
			n := strings.Index(src[j:], delim)
			if n < 0 {
				return 0, errors.New("unterminated multi-line string")
			}
			k := j + n
			if q == '"' && escaped(src, j, k) {
				j = k + 1
				continue
			}
			end := k + 3
			for end < len(src) && src[end] == q && end-k < 5 { // up to two quotes may close the content
				end++
			}
			return end, nil
		}
	}
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\n':
			return 0, errors.New("unterminated string")
		case '\\':
			if q == '"' {
				j++
			}
		case q:
			return j + 1, nil
		}
	}
	return 0, errors.New("unterminated string")
}

// escaped reports whether the byte at k is preceded by an odd run of backslashes after from.
func escaped(src string, from, k int) bool {
	n := 0
	for p := k - 1; p >= from && src[p] == '\\'; p-- {
		n++
	}
	return n%2 == 1
}

// skipValue returns the offset of the end of the line where the value after "=" at i ends.
func skipValue(src string, i int) (int, error) {
	for i < len(src) && (src[i] == ' ' || src[i] == '\t') {
		i++
	}
	if i >= len(src) || src[i] != '=' {
		return 0, errors.New(`expected "=" after a key`)
	}
	depth := 0
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '"', '\'':
			end, err := skipString(src, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case '#':
			n := strings.IndexByte(src[j:], '\n')
			if n < 0 {
				return len(src), nil
			}
			j += n - 1
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		case '\n':
			if depth <= 0 {
				return j, nil
			}
		}
	}
	return len(src), nil
}

// tomlEntry is luft's table in a TOML config: [table...] with keys command and args,
// and a [table....tools.NAME] sub-table for each tool it has settings for.
type tomlEntry struct {
	table   []string
	command string
	args    []string
	// tools are the per-tool settings luft adds (Codex: approval_mode for the tools that
	// start work), by tool name; a tool's table the file already has is left as it is.
	tools map[string]map[string]string
}

// body is the table's keys as TOML lines.
func (e tomlEntry) body() string {
	var b bytes.Buffer
	err := toml.NewEncoder(&b).Encode(struct {
		Command string   `toml:"command"`
		Args    []string `toml:"args"`
	}{e.command, e.args})
	if err != nil {
		panic(fmt.Sprintf("agentinstall: encoding a TOML table: %v", err)) // strings only
	}
	return b.String()
}

func (e tomlEntry) header() string {
	return "[" + strings.Join(e.table, ".") + "]"
}

func (e tomlEntry) snippet() string {
	return e.header() + "\n" + e.body() + e.toolTables(nil)
}

// toolTables is the [table....tools.NAME] tables of the tools not in have, in name
// order, each after a blank line.
func (e tomlEntry) toolTables(have map[string]any) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(e.tools)) {
		if _, ok := have[name]; ok {
			continue
		}
		var kv bytes.Buffer
		if err := toml.NewEncoder(&kv).Encode(e.tools[name]); err != nil {
			panic(fmt.Sprintf("agentinstall: encoding a TOML table: %v", err)) // strings only
		}
		key := strings.Join(e.table, ".") + ".tools." + name
		if !isBareKey(name) {
			q, _ := json.Marshal(name)
			key = strings.Join(e.table, ".") + ".tools." + string(q)
		}
		b.WriteString("\n[" + key + "]\n" + kv.String())
	}
	return b.String()
}

func isBareKey(k string) bool {
	for i := 0; i < len(k); i++ {
		if !isBareKeyByte(k[i]) {
			return false
		}
	}
	return k != ""
}

// wantTOML is luft's table as the document should hold it: command, args, and its tools
// with luft's tables added to those the file has.
func (e tomlEntry) wantTOML(cur map[string]any) (map[string]any, map[string]any) {
	want := map[string]any{"command": e.command, "args": e.args}
	have, _ := cur["tools"].(map[string]any)
	if len(e.tools) == 0 {
		return want, have
	}
	tools := maps.Clone(have)
	if tools == nil {
		tools = map[string]any{}
	}
	for name, kv := range e.tools {
		if _, ok := tools[name]; !ok {
			m := map[string]any{}
			for k, v := range kv {
				m[k] = v
			}
			tools[name] = m
		}
	}
	want["tools"] = tools
	return want, have
}

// decodeTOML parses a document into plain maps.
func decodeTOML(src string) (map[string]any, error) {
	m := map[string]any{}
	if _, err := toml.Decode(src, &m); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return nil, err
	}
	return m, nil
}

// lookup follows path through nested tables.
func lookup(m map[string]any, path []string) (any, bool) {
	var cur any = m
	for _, p := range path {
		t, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = t[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// withEntry is a copy of m where path's table has the keys of set, or is removed (set ==
// nil); the tables on the way are copied, not shared.
func withEntry(m map[string]any, path []string, set map[string]any) map[string]any {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]any{}
	}
	if len(path) == 1 {
		if set == nil {
			delete(out, path[0])
			return out
		}
		t, _ := out[path[0]].(map[string]any)
		t = maps.Clone(t)
		if t == nil {
			t = map[string]any{}
		}
		maps.Copy(t, set)
		out[path[0]] = t
		return out
	}
	child, _ := out[path[0]].(map[string]any)
	out[path[0]] = withEntry(child, path[1:], set)
	return out
}

// normalise turns the decoder's []any of maps and typed slices into comparable values. An
// empty table counts as absent: removing luft's table may or may not leave its parent
// behind, depending on whether the file also names the parent.
func normalise(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if m, ok := x.(map[string]any); ok && len(normalise(m).(map[string]any)) == 0 {
				continue
			}
			out[k] = normalise(x)
		}
		return out
	case []map[string]any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = normalise(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = normalise(x)
		}
		return out
	case []string:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = x
		}
		return out
	}
	return v
}

func sameTOML(a, b map[string]any) bool {
	return reflect.DeepEqual(normalise(a), normalise(b))
}

// inlineParent reports whether the table holding luft's is written as a key = value (an
// inline table), which a [parent.luft] header may not add to.
func inlineParent(stmts []stmt, table []string) bool {
	var cur []string
	for _, s := range stmts {
		switch s.kind {
		case stmtTable, stmtArrayTable:
			cur = s.key
		case stmtKeyVal:
			if slices.Equal(append(slices.Clone(cur), s.key...), table[:len(table)-1]) {
				return true
			}
		}
	}
	return false
}

// findTable is the index of the [path] header statement, or -1.
func findTable(stmts []stmt, path []string) int {
	for i, s := range stmts {
		if s.kind == stmtTable && slices.Equal(s.key, path) {
			return i
		}
	}
	return -1
}

// tableEnd is the index after the last key of the table whose header is at h: trailing
// blank lines and comments belong to what follows.
func tableEnd(stmts []stmt, h int) int {
	end := h + 1
	for i := h + 1; i < len(stmts); i++ {
		if stmts[i].kind == stmtTable || stmts[i].kind == stmtArrayTable {
			break
		}
		if stmts[i].kind == stmtKeyVal {
			end = i + 1
		}
	}
	return end
}

// installTOML returns src with luft's table set to e, keeping every other byte it can.
func installTOML(src string, e tomlEntry) (string, bool, error) {
	doc, err := decodeTOML(src)
	if err != nil {
		return "", false, err
	}
	cur, exists := lookup(doc, e.table)
	var t map[string]any
	if exists {
		var ok bool
		if t, ok = cur.(map[string]any); !ok {
			return "", false, fmt.Errorf("%s is not a table; remove it, then run luft install again", strings.Join(e.table, "."))
		}
	}
	want, haveTools := e.wantTOML(t)
	if _, ok := t["tools"]; ok && haveTools == nil {
		return "", false, fmt.Errorf("%s.tools is not a table; remove it, then run luft install again", strings.Join(e.table, "."))
	}
	missing := e.toolTables(haveTools)
	if exists && missing == "" &&
		reflect.DeepEqual(normalise(t["command"]), normalise(want["command"])) &&
		reflect.DeepEqual(normalise(t["args"]), normalise(want["args"])) {
		return src, false, nil
	}
	stmts, err := splitTOML(src)
	if err != nil {
		return "", false, err
	}
	var out string
	if !exists {
		if inlineParent(stmts, e.table) {
			return "", false, fmt.Errorf("%s is an inline table, which TOML does not let a %s table extend", e.table[0], e.header())
		}
		sep := ""
		switch {
		case src == "":
		case strings.HasSuffix(src, "\n\n"):
		case strings.HasSuffix(src, "\n"):
			sep = "\n"
		default:
			sep = "\n\n"
		}
		out = src + sep + e.header() + "\n" + e.body() + missing
	} else {
		h := findTable(stmts, e.table)
		if h < 0 {
			return "", false, fmt.Errorf("%s is written in a form luft install does not edit (not a %s table of its own); remove it, then run luft install again", strings.Join(e.table, "."), e.header())
		}
		out = replaceKeys(src, stmts, h, e)
		if missing != "" {
			// At the end of the file: a table header may come anywhere after its parent.
			if !strings.HasSuffix(out, "\n") {
				out += "\n"
			}
			out += missing
		}
	}
	got, err := decodeTOML(out)
	if err != nil || !sameTOML(got, withEntry(doc, e.table, want)) {
		return "", false, fmt.Errorf("the file cannot take a %s table where luft would add it (is %s an inline table?)", e.header(), e.table[0])
	}
	return out, true, nil
}

// replaceKeys rewrites the command and args statements of the table at h (adding the
// missing ones after its last key), leaving its other keys alone.
func replaceKeys(src string, stmts []stmt, h int, e tomlEntry) string {
	lines := map[string]string{}
	for _, l := range strings.SplitAfter(e.body(), "\n") {
		if k, _, ok := strings.Cut(l, " ="); ok {
			lines[k] = l
		}
	}
	end := tableEnd(stmts, h)
	var b strings.Builder
	b.WriteString(src[:stmts[h].end])
	done := map[string]bool{}
	for i := h + 1; i < end; i++ {
		s := stmts[i]
		if s.kind == stmtKeyVal && len(s.key) == 1 && lines[s.key[0]] != "" && !done[s.key[0]] {
			b.WriteString(lines[s.key[0]])
			done[s.key[0]] = true
			continue
		}
		b.WriteString(src[s.start:s.end])
		if !strings.HasSuffix(src[s.start:s.end], "\n") {
			b.WriteByte('\n')
		}
	}
	for _, k := range []string{"command", "args"} {
		if !done[k] {
			b.WriteString(lines[k])
		}
	}
	if end < len(stmts) {
		b.WriteString(src[stmts[end].start:])
	}
	return b.String()
}

// uninstallTOML removes luft's table and its sub-tables.
func uninstallTOML(src string, e tomlEntry) (string, bool, error) {
	doc, err := decodeTOML(src)
	if err != nil {
		return "", false, err
	}
	if _, ok := lookup(doc, e.table); !ok {
		return src, false, nil
	}
	stmts, err := splitTOML(src)
	if err != nil {
		return "", false, err
	}
	drop := make([]bool, len(stmts))
	found := false
	for i, s := range stmts {
		if (s.kind == stmtTable || s.kind == stmtArrayTable) && len(s.key) >= len(e.table) && slices.Equal(s.key[:len(e.table)], e.table) {
			found = true
			end := tableEnd(stmts, i)
			for j := i; j < end; j++ {
				drop[j] = true
			}
			// One blank line before the table goes with it when a blank line or the end
			// of the file follows, so no double gap is left behind.
			if i > 0 && stmts[i-1].kind == stmtBlank && (end == len(stmts) || stmts[end].kind == stmtBlank) {
				drop[i-1] = true
			}
		}
	}
	if !found {
		return "", false, fmt.Errorf("%s is written in a form luft install does not edit (not a %s table of its own); remove it by hand", strings.Join(e.table, "."), e.header())
	}
	var b strings.Builder
	for i, s := range stmts {
		if !drop[i] {
			b.WriteString(src[s.start:s.end])
		}
	}
	out := b.String()
	got, err := decodeTOML(out)
	if err != nil || !sameTOML(got, withEntry(doc, e.table, nil)) {
		return "", false, fmt.Errorf("removing %s would change other settings; remove it by hand", e.header())
	}
	return out, true, nil
}

// registeredTOML reports whether the document has luft's table.
func registeredTOML(src string, e tomlEntry) bool {
	doc, err := decodeTOML(src)
	if err != nil {
		return false
	}
	_, ok := lookup(doc, e.table)
	return ok
}
