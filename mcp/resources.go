package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/luft-run/luft/examples"
	"github.com/luft-run/luft/skills"
	"github.com/mark3labs/mcp-go/mcp"
)

// Resource URIs.
const (
	skillURI    = "luft://skill/"   // + a file of the skill: SKILL.md, references/api.md, ...
	examplesURI = "luft://examples" // the examples list
	exampleURI  = "luft://example/" // + an example's name
	exampleTmpl = exampleURI + "{name}"
)

// addResources serves the authoring skill (SKILL.md and its references), the examples
// list and each example's source.
func (s *Server) addResources() {
	for _, name := range skills.Files() {
		desc := "How to write luft workflows: the skill's reference " + name + "."
		if name == "SKILL.md" {
			desc = "How to write luft workflows (start here): the Lua API, patterns and the references to read next."
		}
		s.mcp.AddResource(mcp.NewResource(skillURI+name, "skill: "+name,
			mcp.WithResourceDescription(desc), mcp.WithMIMEType("text/markdown")),
			func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
				text, err := skills.Read(name)
				if err != nil {
					return nil, err
				}
				return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "text/markdown", Text: text}}, nil
			})
	}
	s.mcp.AddResource(mcp.NewResource(examplesURI, "examples",
		mcp.WithResourceDescription("The example workflows: name, what each shows and its URI (luft://example/{name})."),
		mcp.WithMIMEType("application/json")), s.readExamples)
	for _, ex := range examples.List() {
		s.mcp.AddResource(mcp.NewResource(exampleURI+ex.Name, "example: "+ex.Name,
			mcp.WithResourceDescription(ex.Description), mcp.WithMIMEType("text/x-lua")), s.readExample)
	}
	s.mcp.AddResourceTemplate(mcp.NewResourceTemplate(exampleTmpl, "example",
		mcp.WithTemplateDescription("An example workflow's Lua source by name (luft://examples lists them)."),
		mcp.WithTemplateMIMEType("text/x-lua")), s.readExample)
}

func (s *Server) readExamples(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	type item struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		URI         string `json:"uri"`
	}
	list := []item{}
	for _, ex := range examples.List() {
		list = append(list, item{Name: ex.Name, Description: ex.Description, URI: exampleURI + ex.Name})
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}, nil
}

func (s *Server) readExample(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
	name, ok := strings.CutPrefix(req.Params.URI, exampleURI)
	if !ok {
		return nil, fmt.Errorf("resource %s: not an example URI (luft://example/{name})", req.Params.URI)
	}
	src, ok := examples.Source(name)
	if !ok {
		return nil, fmt.Errorf("no example %q: luft://examples lists them", name)
	}
	return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "text/x-lua", Text: src}}, nil
}
