package mcp

import (
	"context"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

const secret = "sk-secret-0123456789"

// pathFixture lays out a workspace with a .env holding a key, a good and a broken
// workflow, and links out of it, next to a folder outside it.
func pathFixture(t *testing.T, ws string) (outside string) {
	t.Helper()
	outside = t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(ws, ".env"), "OPENAI_API_KEY="+secret+"\n")
	write(filepath.Join(ws, "env.txt"), "OPENAI_API_KEY="+secret+"\n")
	write(filepath.Join(ws, "ok.lua"), helloScript)
	write(filepath.Join(ws, "broken.lua"), "local key = \""+secret+"\" "+secret+" = = 1\n")
	write(filepath.Join(outside, "x.lua"), helloScript)
	write(filepath.Join(outside, "leak.lua"), "x = "+secret+" +\n")
	for link, target := range map[string]string{"link.lua": filepath.Join(outside, "x.lua"), "out": outside} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	return outside
}

// Without MCP roots, paths lead only to .lua files inside the server's workspace: a .env
// is refused whatever it holds, as are paths outside (absolute, .., a symlink), and a
// syntax error in a file names the file and the line, never its tokens. Nothing starts.
func TestPathsConfinedToTheWorkspace(t *testing.T) {
	bothWays(t, func(t *testing.T, newEnv func(*testing.T, ...func(*Options)) *env) {
		e := newEnv(t)
		outside := pathFixture(t, e.dir)
		for _, tool := range []string{"workflow_execute", "workflow_validate"} {
			for _, tc := range []struct {
				path string
				want []string
			}{
				{".env", []string{"not a .lua file"}},
				{"env.txt", []string{"not a .lua file"}},
				{filepath.Join(e.dir, ".env"), []string{"not a .lua file"}},
				{filepath.Join(outside, "x.lua"), []string{"outside the server's workspace " + e.dir}},
				{filepath.Join(outside, "leak.lua"), []string{"outside the server's workspace"}},
				{"../" + filepath.Base(outside) + "/x.lua", []string{"outside the server's workspace"}},
				{"link.lua", []string{"leads outside", "through a symlink"}},
				{"out/x.lua", []string{"leads outside", "through a symlink"}},
				{"/proc/self/environ", []string{"not a .lua file"}},
			} {
				res := callTool(t, e.c, tool, map[string]any{"path": tc.path})
				got := text(res)
				if !res.IsError {
					t.Errorf("%s{path: %s}: not refused: %s", tool, tc.path, got)
				}
				for _, w := range tc.want {
					if !strings.Contains(got, w) {
						t.Errorf("%s{path: %s}: %q lacks %q", tool, tc.path, got, w)
					}
				}
				if strings.Contains(got, secret) {
					t.Errorf("%s{path: %s}: the error quotes the file: %s", tool, tc.path, got)
				}
			}
		}
		// A syntax error in a file: where, not what.
		res := callTool(t, e.c, "workflow_execute", map[string]any{"path": "broken.lua"})
		if got := text(res); !res.IsError || !strings.Contains(got, "broken.lua:1") || !strings.Contains(got, "syntax error") || strings.Contains(got, secret) {
			t.Errorf("workflow_execute{path: broken.lua}: %s", got)
		}
		var v ValidateResult
		ok(t, e.c, "workflow_validate", map[string]any{"path": "broken.lua"}, &v)
		if v.OK || !strings.Contains(v.Error, "broken.lua:1") || strings.Contains(v.Error, secret) {
			t.Errorf("workflow_validate{path: broken.lua}: %+v", v)
		}
		// The same script given as source is the caller's own: its error may quote it.
		src, _ := os.ReadFile(filepath.Join(e.dir, "broken.lua"))
		fails(t, e.c, "workflow_execute", map[string]any{"script": string(src)}, "syntax error near")

		var page RunsPage
		ok(t, e.c, "workflow_list_runs", nil, &page)
		if len(page.Runs) != 0 {
			t.Errorf("refused paths started runs: %+v", page.Runs)
		}
		runs, _ := os.ReadDir(filepath.Join(e.dir, "runs"))
		if len(runs) != 0 {
			t.Errorf("refused paths left run folders: %v", runs)
		}

		// Listing: only inside the workspace, never through a link.
		fails(t, e.c, "workflow_list_files", map[string]any{"dir": "/"}, "outside the server's workspace")
		fails(t, e.c, "workflow_list_files", map[string]any{"dir": outside}, "outside the server's workspace")
		fails(t, e.c, "workflow_list_files", map[string]any{"dir": ".."}, "outside the server's workspace")
		fails(t, e.c, "workflow_list_files", map[string]any{"dir": "out"}, "is not a directory")
		var files FilesResult
		ok(t, e.c, "workflow_list_files", nil, &files)
		var names []string
		for _, f := range files.Files {
			names = append(names, f.Path)
		}
		if !slices.Equal(names, []string{"broken.lua", "ok.lua"}) {
			t.Errorf("workspace listing: %v (want the two regular .lua files, no links)", names)
		}

		// A .lua file inside runs.
		var ex ExecuteResult
		ok(t, e.c, "workflow_execute", map[string]any{"path": "ok.lua"}, &ex)
		ok(t, e.c, "workflow_await", map[string]any{"run_id": ex.RunID}, nil)
	})
}

type roots []string

func (r roots) ListRoots(context.Context, mcp.ListRootsRequest) (*mcp.ListRootsResult, error) {
	res := &mcp.ListRootsResult{Roots: []mcp.Root{}}
	for _, d := range r {
		res.Roots = append(res.Roots, mcp.Root{URI: (&url.URL{Scheme: "file", Path: d}).String(), Name: filepath.Base(d)})
	}
	return res, nil
}

// A client that declares MCP roots confines paths to them (asked on every call), not to
// the server's workspace; one whose roots name no local folder gets no paths.
func TestPathsConfinedToTheClientsRoots(t *testing.T) {
	e := newEnv(t)
	pathFixture(t, e.dir)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "mine.lua"), []byte(helloScript), 0o600); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.srv.Handler())
	t.Cleanup(hs.Close)
	connect := func(r roots) *client.Client {
		// mcp-go sends roots/list on the session's GET stream, which is how clients on
		// the protocol versions before 2026-07-28 (the ones in use) receive it.
		//lint:ignore SA1019 the deprecated GET stream is what a legacy-protocol client answers roots/list on, and this tests that path; Client.Listen carries notifications only, and without the stream roots/list times out
		tr, err := transport.NewStreamableHTTP(hs.URL+"/mcp", transport.WithContinuousListening())
		if err != nil {
			t.Fatal(err)
		}
		c := client.NewClient(tr, client.WithRootsHandler(r))
		t.Cleanup(func() { c.Close() })
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		init := initRequest()
		init.Params.Capabilities.Roots = &struct {
			ListChanged bool `json:"listChanged,omitempty"`
		}{}
		if _, err := c.Initialize(context.Background(), init); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := connect(roots{root})
	var ex ExecuteResult
	ok(t, c, "workflow_execute", map[string]any{"path": filepath.Join(root, "mine.lua")}, &ex)
	ok(t, c, "workflow_await", map[string]any{"run_id": ex.RunID}, nil)
	var files FilesResult
	ok(t, c, "workflow_list_files", nil, &files)
	if files.Dir != root || len(files.Files) != 1 || files.Files[0].Path != "mine.lua" {
		t.Errorf("listing of the root: %+v", files)
	}
	// The server's workspace is not the client's root.
	fails(t, c, "workflow_execute", map[string]any{"path": filepath.Join(e.dir, "ok.lua")}, "outside the client's MCP roots ("+root+")")
	fails(t, c, "workflow_list_files", map[string]any{"dir": e.dir}, "outside the client's MCP roots")
	fails(t, c, "workflow_list_files", map[string]any{"dir": "/"}, "outside the client's MCP roots")

	none := connect(roots{})
	fails(t, none, "workflow_execute", map[string]any{"path": filepath.Join(root, "mine.lua")}, "name no local folder")
	fails(t, none, "workflow_list_files", nil, "name no local folder")
	// A script needs no path.
	ok(t, none, "workflow_validate", map[string]any{"script": helloScript}, nil)
}

// Through the stdio relay (luft mcp serve) the daemon's roots/list reaches the client:
// the relay keeps the session's GET stream open and relays it.
func TestPathsRootsThroughTheRelay(t *testing.T) {
	d := newStandIn(t, nil)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "mine.lua"), []byte(helloScript), 0o600); err != nil {
		t.Fatal(err)
	}
	init := initRequest()
	init.Params.Capabilities.Roots = &struct {
		ListChanged bool `json:"listChanged,omitempty"`
	}{}
	c := relayClientInit(t, d, init, client.WithRootsHandler(roots{root}))
	var files FilesResult
	ok(t, c, "workflow_list_files", nil, &files)
	if files.Dir != root || len(files.Files) != 1 {
		t.Errorf("listing through the relay: %+v", files)
	}
	var ex ExecuteResult
	ok(t, c, "workflow_execute", map[string]any{"path": filepath.Join(root, "mine.lua")}, &ex)
	ok(t, c, "workflow_await", map[string]any{"run_id": ex.RunID}, nil)
	fails(t, c, "workflow_list_files", map[string]any{"dir": "/"}, "outside the client's MCP roots")
}
