package planner

import (
	"encoding/json"
	"fmt"
)

// MockFile is a --mock-file for the mockfile backend covering every agent name the dry
// run of a script used, plus a default for names built at run time. An agent that asks
// for a schema gets no scripted output, so the mockfile backend answers with a valid
// example of its schema; every other agent gets a line of text naming it, which a report
// built from the replies shows. name is the file's name, for the text's hint. Edit the
// replies to script a test.
func MockFile(chk Check, name string) []byte {
	responses := map[string]any{}
	for _, u := range chk.Uses {
		reply := map[string]any{"status": "ok"}
		if !u.Schema {
			reply["text"] = fmt.Sprintf("Scripted reply of agent %q (edit %s to change it).", u.Name, name)
		}
		responses[u.Name] = reply
	}
	def := map[string]any{"status": "ok",
		"text": fmt.Sprintf("Scripted default reply for an agent %s names no reply for (edit it to change it).", name)}
	b, _ := json.MarshalIndent(map[string]any{"responses": responses, "default": def}, "", "  ")
	return append(b, '\n')
}
