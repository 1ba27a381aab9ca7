package mcp

import (
	"strings"
	"testing"

	"github.com/luft-run/luft/examples"
	"github.com/luft-run/luft/skills"
	"github.com/mark3labs/mcp-go/mcp"
)

func readResource(t *testing.T, e *env, uri string) (string, error) {
	t.Helper()
	var req mcp.ReadResourceRequest
	req.Params.URI = uri
	res, err := e.c.ReadResource(t.Context(), req)
	if err != nil {
		return "", err
	}
	if len(res.Contents) != 1 {
		t.Fatalf("%s: %d contents", uri, len(res.Contents))
	}
	tc, ok := res.Contents[0].(mcp.TextResourceContents)
	if !ok {
		t.Fatalf("%s: %T", uri, res.Contents[0])
	}
	return tc.Text, nil
}

// The skill's files, the examples list and every example are resources; the template
// names them; an unknown one is an error that says where the list is.
func TestResources(t *testing.T) {
	e := newEnv(t)
	res, err := e.c.ListResources(t.Context(), mcp.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	uris := map[string]bool{}
	for _, r := range res.Resources {
		uris[r.URI] = true
	}
	for _, f := range skills.Files() {
		want, _ := skills.Read(f)
		if !uris["luft://skill/"+f] {
			t.Errorf("skill file %s not listed", f)
		}
		if got, err := readResource(t, e, "luft://skill/"+f); err != nil || got != want {
			t.Errorf("read skill %s: %v", f, err)
		}
	}
	list, err := readResource(t, e, "luft://examples")
	if err != nil || !uris["luft://examples"] {
		t.Fatal(err)
	}
	for _, ex := range examples.List() {
		if !strings.Contains(list, `"luft://example/`+ex.Name+`"`) || !uris["luft://example/"+ex.Name] {
			t.Errorf("example %s missing from the list", ex.Name)
		}
		want, _ := examples.Source(ex.Name)
		if got, err := readResource(t, e, "luft://example/"+ex.Name); err != nil || got != want {
			t.Errorf("read example %s: %v", ex.Name, err)
		}
	}
	tmpls, err := e.c.ListResourceTemplates(t.Context(), mcp.ListResourceTemplatesRequest{})
	if err != nil || len(tmpls.ResourceTemplates) != 1 || tmpls.ResourceTemplates[0].URITemplate.Raw() != "luft://example/{name}" {
		t.Fatalf("templates: %+v %v", tmpls, err)
	}
	for _, bad := range []string{"luft://example/nope", "luft://example/../go.mod", "luft://skill/nope.md"} {
		if _, err := readResource(t, e, bad); err == nil {
			t.Errorf("%s: read without error", bad)
		}
	}
}
