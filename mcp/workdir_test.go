package mcp

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
)

// The Luft-Workdir header sets where a request's relative paths resolve only when it is
// an absolute path (cleaned); anything else leaves the server's dir.
func TestWorkdirHeader(t *testing.T) {
	e := newEnv(t)
	hs := httptest.NewServer(e.srv.Handler())
	t.Cleanup(hs.Close)
	other := t.TempDir()
	for _, tc := range []struct{ name, header, want string }{
		{"absolute", other, other},
		{"absolute, uncleaned", other + "/sub/../", other},
		{"relative", "some/dir", e.dir},
		{"dot-dot", "../../..", e.dir},
		// A dir that does not exist is a tool error, not a listing elsewhere.
		{"huge", "/" + strings.Repeat("a", 60<<10), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.NewStreamableHttpClient(hs.URL+"/mcp", transport.WithHTTPHeaders(map[string]string{HeaderWorkdir: tc.header}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Initialize(ctx, initRequest()); err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				fails(t, c, "workflow_list_files", nil, "is not a directory")
				return
			}
			var got FilesResult
			ok(t, c, "workflow_list_files", nil, &got)
			if got.Dir != tc.want {
				t.Errorf("workdir header %q: listed %s, want %s", tc.header, got.Dir, tc.want)
			}
		})
	}
}
