package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
)

// bind decodes a tool call's arguments into v, refusing unknown fields and wrong types
// with a message that names the field and the tool.
func bind(req mcp.CallToolRequest, v any) error {
	raw := req.GetRawArguments()
	if raw == nil {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return fmt.Errorf("%s: arguments are not JSON: %v", req.Params.Name, err)
	}
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te):
			return fmt.Errorf("%s: argument %q must be %s, not %s", req.Params.Name, te.Field, jsonKind(te.Type.Kind().String()), te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("%s: unknown argument %s (see the tool's input schema)", req.Params.Name, strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return fmt.Errorf("%s: bad arguments: %v", req.Params.Name, err)
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return goKind
}
