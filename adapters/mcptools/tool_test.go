package mcptools

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

func TestExposedName(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	long := strings.Repeat("x", 70)
	cases := []struct {
		server, remote string
		want           string // exact, or "" to check only the shape
		prefix         string
	}{
		{"search", "web_search", "search__web_search", ""},
		{"fs", "read-file", "fs__read-file", ""},
		{"fs", "read.file", "", "fs__read_file_"},
		{"fs", "läs", "", "fs__l_s_"},
		{"fs", "", "", "fs___"},
		{"fs", long, "", "fs__xxxx"},
		{"fs", strings.Repeat("y", 60), "", "fs__yyyy"}, // clean but too long with the prefix
	}
	seen := map[string]string{}
	for _, tc := range cases {
		got := ExposedName(tc.server, tc.remote)
		if !valid.MatchString(got) {
			t.Errorf("ExposedName(%q, %q) = %q: not [A-Za-z0-9_-]{1,64}", tc.server, tc.remote, got)
		}
		if tc.want != "" && got != tc.want {
			t.Errorf("ExposedName(%q, %q) = %q, want %q", tc.server, tc.remote, got, tc.want)
		}
		if tc.prefix != "" && !strings.HasPrefix(got, tc.prefix) {
			t.Errorf("ExposedName(%q, %q) = %q, want prefix %q", tc.server, tc.remote, got, tc.prefix)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%q and %q both became %q", other, tc.remote, got)
		}
		seen[got] = tc.remote
	}
	// Names that rewrite to the same text stay apart through the hash.
	if a, b := ExposedName("s", "a.b"), ExposedName("s", "a:b"); a == b {
		t.Errorf("a.b and a:b both became %q", a)
	}
	if a, b := ExposedName("s", long+"1"), ExposedName("s", long+"2"); a == b {
		t.Errorf("two long names that differ at the end both became %q", a)
	}
}

func TestDestructive(t *testing.T) {
	yes, no := mcp.ToBoolPtr(true), mcp.ToBoolPtr(false)
	cases := []struct {
		name        string
		readOnly    *bool
		destructive *bool
		want        bool
	}{
		{"no hints (MCP would assume destructive)", nil, nil, false},
		{"destructive", nil, yes, true},
		{"destructive, not read-only", no, yes, true},
		{"destructive but read-only", yes, yes, false},
		{"not destructive", nil, no, false},
		{"read-only", yes, nil, false},
	}
	c := &conn{server: Server{Name: "s", URL: "http://127.0.0.1:1/"}}
	for _, tc := range cases {
		mt := mcp.Tool{Name: "t", Annotations: mcp.ToolAnnotation{ReadOnlyHint: tc.readOnly, DestructiveHint: tc.destructive}}
		tl, err := newTool(c, mt)
		if err != nil {
			t.Fatal(err)
		}
		if got := tl.Spec().Destructive; got != tc.want {
			t.Errorf("%s: Destructive = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRender(t *testing.T) {
	cases := []struct {
		name string
		res  *mcp.CallToolResult
		want string
	}{
		{"nothing", &mcp.CallToolResult{}, ""},
		{"texts joined", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("a"), mcp.NewTextContent("b")}}, "a\nb"},
		{"audio", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewAudioContent("AAAA", "audio/wav")}},
			"[audio audio/wav, 3 bytes, not shown]"},
		{"image without type", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewImageContent("AAA=", "")}},
			"[image of unknown type, 2 bytes, not shown]"},
		{"blob resource", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewEmbeddedResource(
			mcp.BlobResourceContents{URI: "file:///x.bin", MIMEType: "application/octet-stream", Blob: "AA=="})}},
			"[resource file:///x.bin, application/octet-stream, 1 bytes, not shown]"},
		{"structured only", &mcp.CallToolResult{StructuredContent: map[string]any{"n": 1}}, `{"n":1}`},
		{"text wins over structured", &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("t")}, StructuredContent: map[string]any{"n": 1}}, "t"},
	}
	for _, tc := range cases {
		if got := render(tc.res); got != tc.want {
			t.Errorf("%s: render = %q, want %q", tc.name, got, tc.want)
		}
	}
}
