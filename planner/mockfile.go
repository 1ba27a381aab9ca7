package planner

import (
	"encoding/json"
)

// MockFile is a --mock-file for the mockfile backend covering every agent name the dry
// run of a script used, each with an ok reply (a schema's call gets a valid example of its
// schema), plus a default for names built at run time. Edit the replies to script a test.
func MockFile(chk Check) []byte {
	responses := map[string]any{}
	for _, name := range chk.Agents {
		responses[name] = map[string]any{"status": "ok"}
	}
	b, _ := json.MarshalIndent(map[string]any{"responses": responses, "default": map[string]any{"status": "ok"}}, "", "  ")
	return append(b, '\n')
}
