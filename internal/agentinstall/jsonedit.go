package agentinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// member is one key of a JSON object. A value luft does not touch keeps its bytes as
// written in the file (numbers, escapes, layout); an object luft edits is held as sub and
// laid out again; a value luft writes is fresh and indented to its place.
type member struct {
	key   string
	raw   json.RawMessage
	sub   object
	isSub bool
	fresh bool
}

// object is a JSON object in file order. Duplicate keys are kept as they are.
type object []member

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// jsonDoc is a JSON config file as luft edits it: its top-level object and the layout to
// write it back in.
type jsonDoc struct {
	obj      object
	bom      bool
	compact  bool   // written on one line: keep it that way
	indent   string // the file's indent unit ("  " when it has none)
	newline  bool   // ends with a newline
	original []byte
}

// parseJSONDoc reads a config file's bytes. An empty (or blank) file is an empty object.
func parseJSONDoc(b []byte) (*jsonDoc, error) {
	d := &jsonDoc{original: b, indent: "  "}
	if rest, ok := bytes.CutPrefix(b, utf8BOM); ok {
		d.bom, b = true, rest
	}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		d.newline = true
		return d, nil
	}
	obj, err := parseObject(trimmed)
	if err != nil {
		return nil, jsonPosError(b, err)
	}
	d.obj = obj
	d.newline = bytes.HasSuffix(b, []byte("\n"))
	d.compact = !bytes.Contains(trimmed, []byte("\n"))
	d.indent = detectIndent(trimmed)
	if len(obj) == 0 { // "{}" has no layout worth keeping
		d.compact, d.newline = false, true
	}
	return d, nil
}

// parseObject parses one JSON object and nothing after it.
func parseObject(b []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("the top level is not a JSON object ({...})")
	}
	var obj object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("expected a key, found %v", tok)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		obj = append(obj, member{key: key, raw: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more data after the top-level object")
		}
		return nil, err
	}
	return obj, nil
}

// jsonPosError adds the line and column of a syntax error.
func jsonPosError(b []byte, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return errors.New("the file ends in the middle of the JSON (cut short?)")
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	off := min(int(se.Offset), len(b))
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(b[:off], '\n')
	msg := se.Error()
	if bytes.Contains(b, []byte("//")) || bytes.Contains(b, []byte("/*")) {
		msg += " (comments are not JSON; luft edits plain JSON only, so that none are lost)"
	}
	return fmt.Errorf("line %d, column %d: %s", line, col, msg)
}

// detectIndent is the whitespace before the first key of a multi-line object.
func detectIndent(b []byte) string {
	_, rest, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return "  "
	}
	ws := rest[:len(rest)-len(bytes.TrimLeft(rest, " \t"))]
	if len(ws) == 0 {
		return "  "
	}
	return string(ws)
}

// index is the position of key's last occurrence: the one JSON.parse keeps.
func (o object) index(key string) int {
	for i := len(o) - 1; i >= 0; i-- {
		if o[i].key == key {
			return i
		}
	}
	return -1
}

func (o object) get(key string) (json.RawMessage, bool) {
	if i := o.index(key); i >= 0 {
		return o[i].raw, true
	}
	return nil, false
}

// set replaces the value of key in place with a value luft writes, or appends it.
func (o object) set(key string, raw json.RawMessage) object {
	return o.put(member{key: key, raw: raw, fresh: true})
}

// setSub replaces the value of key with an object luft edited, or appends it.
func (o object) setSub(key string, sub object) object {
	return o.put(member{key: key, sub: sub, isSub: true})
}

func (o object) put(m member) object {
	if i := o.index(m.key); i >= 0 {
		o[i] = m
		return o
	}
	return append(o, m)
}

func (o object) remove(key string) object {
	out := o[:0:0]
	for _, m := range o {
		if m.key != key {
			out = append(out, m)
		}
	}
	return out
}

// marshal writes the object compactly; encode lays it out.
func (o object) marshal() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(marshalValue(m.key))
		b.WriteByte(':')
		if m.isSub {
			b.Write(m.sub.marshal())
		} else {
			b.Write(m.raw)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// layout writes the object at nesting depth: one member a line with the file's indent, or
// all on one line when indent is "". Untouched values are copied as they were.
func (o object) layout(b *bytes.Buffer, depth int, indent string) {
	if len(o) == 0 {
		b.WriteString("{}")
		return
	}
	nl, sep := "\n", ": "
	if indent == "" {
		nl, sep = "", ":"
	}
	b.WriteString("{" + nl)
	for i, m := range o {
		b.WriteString(strings.Repeat(indent, depth+1))
		b.Write(marshalValue(m.key))
		b.WriteString(sep)
		switch {
		case m.isSub:
			m.sub.layout(b, depth+1, indent)
		case m.fresh && indent != "":
			_ = json.Indent(b, m.raw, strings.Repeat(indent, depth+1), indent) // marshalled by luft: valid
		default:
			b.Write(m.raw)
		}
		if i < len(o)-1 {
			b.WriteByte(',')
		}
		b.WriteString(nl)
	}
	b.WriteString(strings.Repeat(indent, depth) + "}")
}

// marshalValue encodes v without HTML escaping (a path with & stays readable).
func marshalValue(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("agentinstall: encoding %T: %v", v, err)) // only strings, slices and maps of them
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// encode is the document's bytes in its own layout.
func (d *jsonDoc) encode() []byte {
	var out bytes.Buffer
	if d.bom {
		out.Write(utf8BOM)
	}
	indent := d.indent
	if d.compact {
		indent = ""
	}
	d.obj.layout(&out, 0, indent)
	if d.newline {
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// nestedObject parses the value at key as an object; a missing key is an empty object.
func (d *jsonDoc) nestedObject(key string) (object, bool, error) {
	raw, ok := d.obj.get(key)
	if !ok {
		return nil, false, nil
	}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, true, fmt.Errorf("%q is not an object (it is %s)", key, describeJSON(raw))
	}
	obj, err := parseObject(raw)
	return obj, true, err
}

// describeJSON names the kind of a JSON value for an error.
func describeJSON(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "empty"
	}
	switch t[0] {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

// jsonEqual reports whether two JSON values are the same data.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// jsonEntry is where an agent keeps luft in a JSON config: container.luft = fields.
type jsonEntry struct {
	container string
	fields    object // the keys luft owns in its entry, in the order they are written
}

// snippet is the entry as a user would paste it, for errors that ask them to.
func (e jsonEntry) snippet() string {
	var b bytes.Buffer
	_ = json.Indent(&b, object{{key: "luft", raw: e.fields.marshal()}}.marshal(), "", "  ")
	return fmt.Sprintf("under %q: %s", e.container, strings.TrimSpace(b.String()))
}

// installJSON sets container.luft's fields, keeping every other key of the entry, the
// container and the file. It reports whether anything changed.
func installJSON(d *jsonDoc, e jsonEntry) (bool, error) {
	container, _, err := d.nestedObject(e.container)
	if err != nil {
		return false, err
	}
	var entry object
	if raw, ok := container.get("luft"); ok {
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return false, fmt.Errorf("%s.luft is not an object (it is %s); remove it, then run luft install again", e.container, describeJSON(raw))
		}
		if entry, err = parseObject(raw); err != nil {
			return false, err
		}
	}
	changed := false
	for _, f := range e.fields {
		if old, ok := entry.get(f.key); ok && jsonEqual(old, f.raw) {
			continue
		}
		entry, changed = entry.set(f.key, f.raw), true
	}
	if !changed {
		return false, nil
	}
	container = container.setSub("luft", entry)
	d.obj = d.obj.setSub(e.container, container)
	return true, nil
}

// uninstallJSON removes container.luft, and the container when nothing else is left in it.
func uninstallJSON(d *jsonDoc, e jsonEntry) (bool, error) {
	container, ok, err := d.nestedObject(e.container)
	if err != nil || !ok {
		return false, err
	}
	if _, ok := container.get("luft"); !ok {
		return false, nil
	}
	container = container.remove("luft")
	if len(container) == 0 {
		d.obj = d.obj.remove(e.container)
	} else {
		d.obj = d.obj.setSub(e.container, container)
	}
	return true, nil
}

// registeredJSON reports whether container.luft exists.
func registeredJSON(d *jsonDoc, e jsonEntry) bool {
	container, _, err := d.nestedObject(e.container)
	if err != nil {
		return false
	}
	_, ok := container.get("luft")
	return ok
}
