package mcp

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Paths a client names (workflow_execute, workflow_validate, workflow_list_files) lead
// only to .lua files inside its scope: the folders of its MCP roots when it declared the
// roots capability (asked with roots/list on every such call, so a change of roots
// applies at once), else the server's workspace (Server.Workdir: the directory the
// client's `luft mcp serve` runs in, sent by the relay). A file is opened through an
// os.Root on the folder that holds it, as workflow() opens its files
// (runtime.ReadWorkflowFile), so no symlink leads out of the scope; errors name the file,
// never its contents.

// rootsTimeout bounds the wait for a client's answer to roots/list.
const rootsTimeout = 10 * time.Second

// scope is where a request's paths may lead.
type scope struct {
	dirs []string // absolute and clean
	// roots is true when dirs are the client's MCP roots (false: the workspace).
	roots bool
}

func (sc scope) String() string {
	if !sc.roots {
		return "the server's workspace " + sc.dirs[0]
	}
	return "the client's MCP roots (" + strings.Join(sc.dirs, ", ") + ")"
}

// canListRoots reports whether the request's client declared the roots capability.
func canListRoots(ctx context.Context) bool {
	cs, ok := server.ClientSessionFromContext(ctx).(server.SessionWithClientInfo)
	return ok && cs.GetClientCapabilities().Roots != nil
}

// scope asks the client for its roots when it has them; a client that declared roots
// but cannot answer, or names no local folder, gets no path at all.
func (s *Server) scope(ctx context.Context, tool string) (scope, error) {
	if !canListRoots(ctx) {
		return scope{dirs: []string{s.Workdir(ctx)}}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, rootsTimeout)
	defer cancel()
	res, err := s.mcp.RequestRoots(rctx, mcp.ListRootsRequest{Request: mcp.Request{Method: string(mcp.MethodListRoots)}})
	if err != nil {
		return scope{}, fmt.Errorf("%s: paths are confined to your MCP roots, and asking for them (roots/list) failed: %v; give the workflow as script instead", tool, err)
	}
	var sc scope
	sc.roots = true
	for _, r := range res.Roots {
		if d, ok := rootDir(r.URI); ok {
			sc.dirs = append(sc.dirs, d)
		}
	}
	if len(sc.dirs) == 0 {
		return scope{}, fmt.Errorf("%s: paths are confined to your MCP roots, and they name no local folder (file:// URI); add one, or give the workflow as script", tool)
	}
	return sc, nil
}

// rootDir is the folder of a file:// root URI.
func rootDir(uri string) (string, bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(u.Path) {
		return "", false
	}
	return filepath.Clean(u.Path), true
}

// within finds the folder of sc that holds abs and abs relative to it ("." for the folder
// itself). A folder is tried as given and with its symlinks resolved, so a root named
// through a link still holds the paths under its real name.
func (sc scope) within(abs string) (dir, rel string, ok bool) {
	for _, d := range sc.dirs {
		cands := []string{d}
		if real, err := filepath.EvalSymlinks(d); err == nil && real != d {
			cands = append(cands, real)
		}
		for _, c := range cands {
			r, err := filepath.Rel(c, abs)
			if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				continue
			}
			return c, r, true
		}
	}
	return "", "", false
}

// absPath is p resolved in the request's workdir.
func (s *Server) absPath(ctx context.Context, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.Workdir(ctx), p)
	}
	return filepath.Clean(p)
}

// shown is a path as error messages quote it.
func shown(p string) string { return fmt.Sprintf("%q", event.Cut(p, 300, "…")) }

// readWorkflowPath reads the .lua file path names, inside the request's scope.
func (s *Server) readWorkflowPath(ctx context.Context, tool, path string) ([]byte, string, error) {
	if len(path) > 4096 || strings.IndexByte(path, 0) >= 0 {
		return nil, "", fmt.Errorf("%s: path %s is not a file name", tool, shown(path))
	}
	abs := s.absPath(ctx, path)
	if !strings.HasSuffix(abs, ".lua") {
		return nil, "", fmt.Errorf("%s: path %s is not a .lua file: only workflow files can be run (workflow_list_files lists them)", tool, shown(path))
	}
	sc, err := s.scope(ctx, tool)
	if err != nil {
		return nil, "", err
	}
	dir, rel, ok := sc.within(abs)
	if !ok {
		return nil, "", fmt.Errorf("%s: path %s is outside %s: give a workflow inside it, or its source as script", tool, shown(path), sc)
	}
	// The same checks as workflow()'s paths, relative to the folder that holds the file.
	if rel, err = lua.WorkflowName(rel); err != nil {
		return nil, "", fmt.Errorf("%s: path %s: %v", tool, shown(path), err)
	}
	b, err := runtime.ReadWorkflowFile(dir, rel)
	switch {
	case errors.Is(err, runtime.ErrOutsideFolder):
		return nil, "", fmt.Errorf("%s: path %s leads outside %s through a symlink: give a workflow inside it", tool, shown(path), sc)
	case errors.Is(err, fs.ErrNotExist):
		return nil, "", fmt.Errorf("%s: read workflow %s: no such file (workflow_list_files lists the workflows here)", tool, shown(path))
	case err != nil:
		return nil, "", fmt.Errorf("%s: %v", tool, err)
	case len(b) > MaxScript:
		return nil, "", fmt.Errorf("%s: read workflow %s: %d bytes, more than the %d a workflow may have", tool, shown(path), len(b), MaxScript)
	}
	return b, filepath.Join(dir, rel), nil
}

// listDir is the folder workflow_list_files lists, inside the request's scope: dir, or
// by default the workdir (the first root when the workdir is outside the client's roots).
// It returns the folder of the scope that holds it and the directory relative to that.
func (s *Server) listDir(ctx context.Context, dir string) (abs, root, rel string, err error) {
	const tool = "workflow_list_files"
	if len(dir) > 4096 || strings.IndexByte(dir, 0) >= 0 {
		return "", "", "", fmt.Errorf("%s: dir %s is not a directory name", tool, shown(dir))
	}
	sc, err := s.scope(ctx, tool)
	if err != nil {
		return "", "", "", err
	}
	abs = s.Workdir(ctx)
	if dir != "" {
		abs = s.absPath(ctx, dir)
	} else if _, _, ok := sc.within(abs); !ok {
		abs = sc.dirs[0]
	}
	root, rel, ok := sc.within(abs)
	if !ok {
		return "", "", "", fmt.Errorf("%s: %s is outside %s: list a directory inside it", tool, shown(abs), sc)
	}
	return abs, root, rel, nil
}

// openDir opens rel inside root for a walk that cannot leave root (os.Root follows a
// symlink only while it stays inside).
func openDir(root, rel string) (*os.Root, fs.FS, string, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, nil, "", err
	}
	fsys := r.FS()
	name := filepath.ToSlash(rel)
	fi, err := fs.Stat(fsys, name)
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		r.Close()
		return nil, nil, "", err
	}
	return r, fsys, name, nil
}
