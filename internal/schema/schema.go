package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// resourceURL is the name the schema is registered under inside the compiler. It is never
// fetched; it only gives relative references a base, and it is stripped from messages.
const (
	resourceURL  = "mem:///schema.json"
	resourceBase = "mem:///"
)

// Schema is a compiled JSON Schema. It is immutable and safe for concurrent use.
type Schema struct {
	compiled *jsonschema.Schema
	doc      any
	draft    string
}

// Compile compiles a decoded JSON Schema: a map[string]any or bool as produced by
// encoding/json (numbers may be float64, json.Number or Go integers). A string, []byte or
// json.RawMessage is taken as JSON text and handed to CompileJSON, since a schema is never a
// JSON string itself.
func Compile(schema any) (*Schema, error) {
	switch s := schema.(type) {
	case nil:
		return nil, errors.New("schema: compile: no schema given (want a JSON object or boolean)")
	case string:
		return CompileJSON([]byte(s))
	case []byte:
		return CompileJSON(s)
	case json.RawMessage:
		return CompileJSON(s)
	}
	// A round trip through encoding/json gives the library a clean tree of JSON types (Lua
	// bridges and callers hand us ints, typed slices and the like) and a private copy that
	// nobody can mutate behind the compiled schema.
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("schema: compile: the schema is not JSON-encodable: %w", err)
	}
	return CompileJSON(b)
}

// CompileJSON compiles a JSON Schema given as JSON text.
func CompileJSON(data []byte) (*Schema, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("schema: compile: no schema given (empty text; want a JSON object or boolean)")
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("schema: compile: the schema is not valid JSON: %w", err)
	}
	switch doc.(type) {
	case map[string]any, bool:
	default:
		return nil, fmt.Errorf("schema: compile: a schema must be a JSON object or boolean, got %s", jsonTypeName(doc))
	}

	c := jsonschema.NewCompiler()
	// Pin the default rather than rely on the library's "latest", which may move.
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refusingLoader{})
	if err := c.AddResource(resourceURL, doc); err != nil {
		return nil, fmt.Errorf("schema: compile: %s", cleanURLs(err.Error()))
	}
	compiled, err := c.Compile(resourceURL)
	if err != nil {
		return nil, compileError(err, doc)
	}
	return &Schema{compiled: compiled, doc: doc, draft: draftName(doc)}, nil
}

// Draft names the draft the schema was compiled under ("2020-12", "7", ...).
func (s *Schema) Draft() string { return s.draft }

// Validate checks v, a decoded JSON value, against the schema. It returns nil or a
// *ValidationError listing every problem.
func (s *Schema) Validate(v any) error {
	if p := s.ValidateErrors(v); len(p) > 0 {
		return &ValidationError{Problems: p}
	}
	return nil
}

// ValidateErrors checks v against the schema and returns one line per problem, sorted, in
// the form "$.items[2].score: must be <= 10 (got 11)"; nil when v is valid.
func (s *Schema) ValidateErrors(v any) []string {
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []string{"$: " + err.Error()}
	}
	return problems(verr, v, instancePath)
}

// ValidationError is a value that does not match its schema.
type ValidationError struct {
	// Problems holds one "location: reason" line per failed constraint, sorted.
	Problems []string
}

func (e *ValidationError) Error() string {
	return "does not match the schema: " + strings.Join(e.Problems, "; ")
}

// refusingLoader keeps compilation hermetic: the schema may only refer to itself. The
// standard metaschemas are embedded in the library and never reach a loader.
type refusingLoader struct{}

func (refusingLoader) Load(url string) (any, error) {
	return nil, errRemoteRef
}

var errRemoteRef = errors.New("references outside the schema are not allowed")

func compileError(err error, doc any) error {
	var load *jsonschema.LoadURLError
	if errors.As(err, &load) {
		if errors.Is(load.Err, errRemoteRef) {
			return fmt.Errorf("schema: compile: $ref %q is not allowed: a schema may only refer to itself "+
				"(like \"#/$defs/name\"); copy the referenced schema under $defs and point $ref there",
				cleanURLs(load.URL))
		}
		return fmt.Errorf("schema: compile: cannot load %q: %v", cleanURLs(load.URL), load.Err)
	}
	var missing *jsonschema.JSONPointerNotFoundError
	if errors.As(err, &missing) {
		return fmt.Errorf("schema: compile: $ref target %q does not exist in the schema; add it (under $defs) or fix the reference",
			cleanURLs(missing.URL))
	}
	var meta *jsonschema.SchemaValidationError
	if errors.As(err, &meta) {
		var verr *jsonschema.ValidationError
		if errors.As(meta.Err, &verr) {
			return fmt.Errorf("schema: compile: not a valid JSON Schema (draft %s): %s",
				draftName(doc), strings.Join(problems(verr, doc, schemaPointer), "; "))
		}
	}
	return fmt.Errorf("schema: compile: %s", cleanURLs(err.Error()))
}

// cleanURLs removes the internal resource name from library messages so that a reference
// reads as the user wrote it.
func cleanURLs(s string) string {
	s = strings.ReplaceAll(s, resourceURL, "")
	return strings.ReplaceAll(s, resourceBase, "")
}

func draftName(doc any) string {
	obj, _ := doc.(map[string]any)
	uri, _ := obj["$schema"].(string)
	switch {
	case uri == "":
		return "2020-12"
	case strings.Contains(uri, "draft-07"):
		return "7"
	case strings.Contains(uri, "draft-06"):
		return "6"
	case strings.Contains(uri, "draft-04"):
		return "4"
	case strings.Contains(uri, "2019-09"):
		return "2019-09"
	case strings.Contains(uri, "2020-12"):
		return "2020-12"
	}
	return uri
}

// locationStyle renders an error's instance location.
type locationStyle int

const (
	instancePath  locationStyle = iota // $.items[2].score, for values
	schemaPointer                      // /properties/x/type, for schemas
)

// problems flattens the library's error tree into sorted, de-duplicated lines. Only leaves
// carry a reason; inner nodes ("allOf failed", "validation failed") add nothing a reader
// can act on.
func problems(verr *jsonschema.ValidationError, instance any, style locationStyle) []string {
	p := message.NewPrinter(language.English)
	seen := map[string]bool{}
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		var loc string
		if style == schemaPointer {
			loc = "at " + pointer(e.InstanceLocation)
		} else {
			loc = path(e.InstanceLocation, instance)
		}
		line := loc + ": " + describe(e.ErrorKind, p)
		if !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	walk(verr)
	sort.Strings(out)
	return out
}

// path renders a location as $.a.b[2]["odd key"]. Whether a token is an array index depends
// on the value, so the instance is walked alongside.
func path(tokens []string, instance any) string {
	var sb strings.Builder
	sb.WriteString("$")
	cur := instance
	for _, tok := range tokens {
		switch c := cur.(type) {
		case []any:
			sb.WriteString("[" + tok + "]")
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(c) {
				cur = c[i]
			} else {
				cur = nil
			}
			continue
		case map[string]any:
			cur = c[tok]
		default:
			cur = nil
		}
		if isIdent(tok) {
			sb.WriteString("." + tok)
		} else {
			sb.WriteString("[" + strconv.Quote(tok) + "]")
		}
	}
	return sb.String()
}

func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "the root"
	}
	var sb strings.Builder
	for _, tok := range tokens {
		tok = strings.ReplaceAll(tok, "~", "~0")
		sb.WriteString("/" + strings.ReplaceAll(tok, "/", "~1"))
	}
	return sb.String()
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		digit := r >= '0' && r <= '9'
		if !letter && (i == 0 || !digit) {
			return false
		}
	}
	return true
}

// describe words a failed constraint as an instruction ("must be <= 10"), which reads better
// to a model being re-prompted than the library's "maximum: got 11, want 10".
func describe(k jsonschema.ErrorKind, p *message.Printer) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		if len(k.Missing) == 1 {
			return fmt.Sprintf("missing required property %q", k.Missing[0])
		}
		return "missing required properties " + quoteAll(k.Missing)
	case *kind.AdditionalProperties:
		if len(k.Properties) == 1 {
			return fmt.Sprintf("property %q is not allowed", k.Properties[0])
		}
		return "properties " + quoteAll(k.Properties) + " are not allowed"
	case *kind.Minimum:
		return fmt.Sprintf("must be >= %s (got %s)", rat(k.Want), rat(k.Got))
	case *kind.Maximum:
		return fmt.Sprintf("must be <= %s (got %s)", rat(k.Want), rat(k.Got))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be > %s (got %s)", rat(k.Want), rat(k.Got))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be < %s (got %s)", rat(k.Want), rat(k.Got))
	case *kind.MultipleOf:
		return fmt.Sprintf("must be a multiple of %s (got %s)", rat(k.Want), rat(k.Got))
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long (got %d)", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long (got %d)", k.Want, k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items (got %d)", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items (got %d)", k.Want, k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d properties (got %d)", k.Want, k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d properties (got %d)", k.Want, k.Got)
	case *kind.Pattern:
		return fmt.Sprintf("must match pattern %q (got %q)", k.Want, k.Got)
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s (got %s): %v", k.Want, display(k.Got), k.Err)
	case *kind.UniqueItems:
		return fmt.Sprintf("items must be unique, but items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.FalseSchema:
		return "no value is allowed here"
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %d more items than allowed", k.Count)
	}
	return k.LocalizedString(p)
}

func rat(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func display(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case map[string]any, []any:
		return jsonTypeName(v)
	}
	return fmt.Sprint(v)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64, json.Number, int, int64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
