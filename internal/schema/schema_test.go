package schema

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// readJSON decodes a fixture from testdata.
func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("testdata/%s: %v", name, err)
	}
}

func TestCompileErrors(t *testing.T) {
	var cases []struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Error  string          `json:"error"`
	}
	readJSON(t, "bad_schemas.json", &cases)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			// A JSON string in the fixture stands for schema text handed to Compile.
			var input any
			var text string
			if bytes.HasPrefix(tc.Schema, []byte(`"`)) && json.Unmarshal(tc.Schema, &text) == nil {
				input = text
			} else if err := json.Unmarshal(tc.Schema, &input); err != nil {
				t.Fatal(err)
			}
			_, err := Compile(input)
			if err == nil {
				t.Fatalf("Compile succeeded, want an error containing %q", tc.Error)
			}
			if !strings.Contains(err.Error(), tc.Error) {
				t.Fatalf("error %q\ndoes not contain %q", err, tc.Error)
			}
			if !strings.HasPrefix(err.Error(), "schema: compile: ") {
				t.Errorf("error %q does not name the operation", err)
			}
			if strings.Contains(err.Error(), resourceBase) {
				t.Errorf("error %q leaks the internal resource name", err)
			}
		})
	}
}

func TestValidateErrors(t *testing.T) {
	var cases []struct {
		Name   string   `json:"name"`
		Schema any      `json:"schema"`
		Value  any      `json:"value"`
		Want   []string `json:"want"`
	}
	readJSON(t, "validate_cases.json", &cases)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			s, err := Compile(tc.Schema)
			if err != nil {
				t.Fatal(err)
			}
			got := s.ValidateErrors(tc.Value)
			if !reflect.DeepEqual(got, tc.Want) {
				t.Fatalf("ValidateErrors:\n got  %q\n want %q", got, tc.Want)
			}
			err = s.Validate(tc.Value)
			if (err == nil) != (tc.Want == nil) {
				t.Fatalf("Validate = %v, want problems %q", err, tc.Want)
			}
			if err != nil {
				for _, p := range tc.Want {
					if !strings.Contains(err.Error(), p) {
						t.Errorf("Validate error %q misses %q", err, p)
					}
				}
			}
		})
	}
}

func TestCompileInputForms(t *testing.T) {
	const text = `{"type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}, "required": ["n"]}`
	goValue := map[string]any{
		"type":       "object",
		"properties": map[string]map[string]any{"n": {"type": "integer", "maximum": 10}},
		"required":   []string{"n"},
	}
	tests := []struct {
		name  string
		input any
	}{
		{"string", text},
		{"bytes", []byte(text)},
		{"raw message", json.RawMessage(text)},
		{"go values", goValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Compile(tc.input)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(map[string]any{"n": 3}); err != nil {
				t.Errorf("valid value rejected: %v", err)
			}
			if err := s.Validate(map[string]any{"n": 11.0}); err == nil {
				t.Error("invalid value accepted")
			}
			if s.Draft() != "2020-12" {
				t.Errorf("Draft() = %q, want 2020-12", s.Draft())
			}
		})
	}
}

func TestDraftSelection(t *testing.T) {
	tests := []struct {
		schema string
		draft  string
		// value is valid under draft 7 (items as a tuple) and not under 2020-12, where an
		// array "items" is not even a valid schema; prefixItems is ignored by draft 7.
		value []any
		valid bool
	}{
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}], "additionalItems": false}`, "7", []any{"a"}, true},
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}], "additionalItems": false}`, "7", []any{"a", "b"}, false},
		{`{"$schema": "http://json-schema.org/draft-07/schema#", "prefixItems": [{"type": "string"}]}`, "7", []any{1.0}, true},
		{`{"prefixItems": [{"type": "string"}]}`, "2020-12", []any{1.0}, false},
		{`{"$schema": "https://json-schema.org/draft/2020-12/schema", "prefixItems": [{"type": "string"}], "items": false}`, "2020-12", []any{"a", "b"}, false},
	}
	for _, tc := range tests {
		s, err := CompileJSON([]byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		if s.Draft() != tc.draft {
			t.Errorf("%s: Draft() = %q, want %q", tc.schema, s.Draft(), tc.draft)
		}
		if got := s.Validate(tc.value) == nil; got != tc.valid {
			t.Errorf("%s: valid(%v) = %v, want %v", tc.schema, tc.value, got, tc.valid)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	s, err := CompileJSON(mustRead(t, "examples/code_review.json"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := s.Example("same seed")
			if err != nil {
				t.Error(err)
				return
			}
			_ = s.ValidateErrors(map[string]any{"verdict": 1})
			b, _ := json.Marshal(v)
			results[i] = string(b)
		}()
	}
	wg.Wait()
	for _, r := range results[1:] {
		if r != results[0] {
			t.Fatalf("concurrent Example calls disagree:\n%s\n%s", results[0], r)
		}
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
