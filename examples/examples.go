// Package examples embeds the example workflows (every one runs on the mock backend in
// the tests), so a luft binary can show them: the MCP server serves them as resources.
package examples

import (
	"embed"
	"io/fs"
	"path"
	"strings"
)

//go:embed *.lua lib/*.lua
var files embed.FS

// Example is one example workflow.
type Example struct {
	Name        string // its path under examples/, slash-separated, without .lua
	Description string // the first line of its leading comment
}

// List returns the examples, sorted by name.
func List() []Example {
	var out []Example
	_ = fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".lua" {
			return nil
		}
		src, _ := fs.ReadFile(files, p)
		out = append(out, Example{Name: strings.TrimSuffix(p, ".lua"), Description: describe(string(src))})
		return nil
	})
	return out
}

// Source returns an example's Lua source by name ("hello", "lib/summarize"; a trailing
// .lua is accepted).
func Source(name string) (string, bool) {
	name = strings.TrimSuffix(name, ".lua") + ".lua"
	if !fs.ValidPath(name) {
		return "", false
	}
	b, err := fs.ReadFile(files, name)
	return string(b), err == nil
}

// describe is the first comment line of a script without its "name.lua — " lead.
func describe(src string) string {
	line, _, _ := strings.Cut(src, "\n")
	line, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
	if !ok {
		return ""
	}
	line = strings.TrimSpace(line)
	if _, rest, found := strings.Cut(line, " — "); found {
		return rest
	}
	return line
}
