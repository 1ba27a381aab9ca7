package mcp

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// Every property of every output schema is a schema object: the official TypeScript SDK
// client (Claude Code's) rejects the whole tools/list when one is the boolean schema
// true, which the schema generator makes of an `any` field without a description.
func TestOutputSchemasSuitTheTypeScriptSDK(t *testing.T) {
	e := newSubEnv(t, nil)
	res, err := e.c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		b, err := json.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			OutputSchema map[string]any `json:"outputSchema"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if v.OutputSchema == nil {
			t.Errorf("%s has no output schema", tool.Name)
			continue
		}
		checkProperties(t, tool.Name+".outputSchema", v.OutputSchema)
	}
}

// checkProperties fails for a boolean schema under "properties" or "items", anywhere.
func checkProperties(t *testing.T, at string, schema map[string]any) {
	t.Helper()
	if props, ok := schema["properties"].(map[string]any); ok {
		for name, p := range props {
			sub, ok := p.(map[string]any)
			if !ok {
				t.Errorf("%s.properties.%s is %v, not a schema object", at, name, p)
				continue
			}
			checkProperties(t, fmt.Sprintf("%s.properties.%s", at, name), sub)
		}
	}
	if items, ok := schema["items"]; ok {
		sub, ok := items.(map[string]any)
		if !ok {
			t.Errorf("%s.items is %v, not a schema object", at, items)
			return
		}
		checkProperties(t, at+".items", sub)
	}
}
