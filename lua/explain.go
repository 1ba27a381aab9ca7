package lua

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	glua "github.com/yuin/gopher-lua"
)

// gopher-lua reports a call or an index of nil without the name involved ("attempt to call
// a non-function object"), which leaves a newcomer guessing. explain finds the name on the
// script line the error points at and says what is missing: a global that is not defined
// ("`converge` is not defined"), or a host library a workflow does not get ("`io` is not
// available in workflow scripts"). Reading an undefined global still gives nil as in any
// Lua; only the messages change.

// unavailable are names scripts might expect from stock Lua but do not get (SPEC §3), with
// what to do instead.
var unavailable = map[string]string{
	"io":             "give an agent a tool instead (agent{tools={\"read_file\"}, ...}), or pass data in with --args",
	"os":             "use luft.now() for the time and args for settings; give an agent a tool for anything on the host",
	"require":        "load another workflow file with workflow(path, args) instead, or define the functions in this script",
	"dofile":         "load another workflow file with workflow(path, args) instead",
	"loadfile":       "load another workflow file with workflow(path, args) instead",
	"load":           "scripts cannot compile code at run time; write the code in the script, or load a workflow file with workflow(path, args)",
	"loadstring":     "scripts cannot compile code at run time; write the code in the script, or load a workflow file with workflow(path, args)",
	"debug":          "there is no debug library; use log(msg) to trace a script",
	"package":        "there are no modules; load another workflow file with workflow(path, args)",
	"module":         "there are no modules; load another workflow file with workflow(path, args)",
	"collectgarbage": "memory is managed by luft",
	"getfenv":        "environments cannot be changed in workflow scripts",
	"setfenv":        "environments cannot be changed in workflow scripts",
	"newproxy":       "use setmetatable on a table instead",
	"coroutine":      "use parallel(items, fn) or pipeline(items, stages) for concurrency",
}

var luaKeywords = map[string]bool{"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "goto": true, "if": true, "in": true, "local": true, "nil": true,
	"not": true, "or": true, "repeat": true, "return": true, "then": true, "true": true, "until": true, "while": true}

var (
	indexNilRe = regexp.MustCompile(`^attempt to index a non-table object\(nil\) with key '([^']*)'$`)
	// a name (possibly dotted) followed by call syntax: name(, name{, name", name'
	calleeRe = regexp.MustCompile(`(^|[^\w.:])([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*[({"']`)
	// a name indexed: name.key, name:key or name[
	indexedRe = regexp.MustCompile(`(^|[^\w.:])([A-Za-z_]\w*)\s*(?:[.:]\s*([A-Za-z_]\w*)|\[)`)
)

// explainUnavailable is the message for using a name scripts do not get.
func explainUnavailable(name string) string {
	return fmt.Sprintf("`%s` is not available in workflow scripts; %s", name, unavailable[name])
}

// explain rewrites a "file.lua:N: attempt to ..." message about nil to name what is
// missing; any other message comes back unchanged.
func (v *vm) explain(msg string) string {
	if !strings.Contains(msg, "attempt to ") {
		return msg
	}
	where, rest := splitWhere(msg)
	if where == "" {
		return msg
	}
	line, before := v.sourceLine(where)
	if line == "" {
		return msg
	}
	// Names inside string literals and comments are not the callee: `f("x")` must never
	// be read as a call of x.
	line = blankLiterals(line)
	// A name declared as a local, a parameter or a loop variable up to this line is not a
	// global: its message stays as it is.
	local := func(name string) bool {
		re, err := regexp.Compile(`\blocal\s+(?:function\s+)?(?:[\w\s,]*,\s*)?` + name + `\b|\bfunction\b[^(\n]*\([^)]*\b` + name + `\b|\bfor\s+(?:[\w\s,]*,\s*)?` + name + `\b`)
		return err == nil && re.MatchString(before)
	}
	env := v.envForExplain()
	defined := func(name string) bool {
		return env != nil && env.RawGetString(name) != glua.LNil
	}
	if rest == "attempt to call a non-function object" {
		for _, m := range calleeRe.FindAllStringSubmatch(line, -1) {
			name := strings.Join(strings.Fields(strings.ReplaceAll(m[2], ".", " . ")), "")
			first, _, dotted := strings.Cut(name, ".")
			if luaKeywords[first] || local(first) || strings.Contains(line, "function "+name) {
				continue
			}
			if _, ok := unavailable[first]; ok && !defined(first) {
				return where + ": " + explainUnavailable(first)
			}
			if !dotted && !defined(name) {
				return fmt.Sprintf("%s: `%s` is not defined (attempt to call a nil value; a typo, or a function defined only later?)", where, name)
			}
			if dotted && v.fieldMissing(env, name) {
				return fmt.Sprintf("%s: `%s` is not defined (attempt to call a nil value)", where, name)
			}
		}
		return msg
	}
	if m := indexNilRe.FindStringSubmatch(rest); m != nil {
		for _, mm := range indexedRe.FindAllStringSubmatch(line, -1) {
			name := mm[2]
			if mm[3] != "" && mm[3] != m[1] || luaKeywords[name] || local(name) {
				continue
			}
			if _, ok := unavailable[name]; ok && !defined(name) {
				return where + ": " + explainUnavailable(name)
			}
			if !defined(name) {
				return fmt.Sprintf("%s: `%s` is not defined (attempt to index a nil value with key '%s')", where, name, m[1])
			}
		}
	}
	return msg
}

// blankLiterals returns line with the contents of its string literals ("…", '…', [[…]])
// replaced by spaces and a trailing -- comment removed, so the name patterns only see code.
func blankLiterals(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"' || b[i] == '\'':
			q := b[i]
			for i++; i < len(b) && b[i] != q; i++ {
				if b[i] == '\\' && i+1 < len(b) {
					b[i] = ' '
					i++
				}
				b[i] = ' '
			}
		case b[i] == '[' && i+1 < len(b) && b[i+1] == '[':
			for i += 2; i < len(b) && !(b[i] == ']' && i+1 < len(b) && b[i+1] == ']'); i++ {
				b[i] = ' '
			}
			i++
		case b[i] == '-' && i+1 < len(b) && b[i+1] == '-':
			return string(b[:i])
		}
	}
	return string(b)
}

// fieldMissing reports whether a dotted name a.b.c ends in nil when looked up from env.
func (v *vm) fieldMissing(env *glua.LTable, dotted string) bool {
	if env == nil {
		return false
	}
	parts := strings.Split(dotted, ".")
	var cur glua.LValue = env
	for _, p := range parts {
		t, ok := cur.(*glua.LTable)
		if !ok {
			return false // not a table we can follow (a local, a userdata): say nothing
		}
		cur = t.RawGetString(p)
	}
	return cur == glua.LNil
}

// envForExplain is the global table of the workflow that is running (the root's when no
// task is current).
func (v *vm) envForExplain() *glua.LTable {
	if v.current != nil && v.current.wf != nil {
		return v.current.wf.env
	}
	if v.root != nil {
		return v.root.env
	}
	return nil
}

// sourceLine returns the text of "file.lua:N" from the scripts this run compiled, and the
// source up to the end of that line.
func (v *vm) sourceLine(where string) (line, before string) {
	i := strings.LastIndexByte(where, ':')
	if i < 0 {
		return "", ""
	}
	n, err := strconv.Atoi(where[i+1:])
	if err != nil || n < 1 {
		return "", ""
	}
	src := v.srcs[where[:i]]
	if len(src) > 256<<10 { // a script this large is generated, not typed: spare the matcher
		return "", ""
	}
	s := src
	for ln := 1; ; ln++ {
		line, rest, more := strings.Cut(s, "\n")
		if ln == n {
			return line, src[:len(src)-len(rest)]
		}
		if !more {
			return "", ""
		}
		s = rest
	}
}
