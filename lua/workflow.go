package lua

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/luft-run/luft/event"
	glua "github.com/yuin/gopher-lua"
)

// workflowFn is the Go half of workflow(path [, args]).
func (v *vm) workflowFn(L *glua.LState) int {
	t := v.checkEffect(L, "workflow()")
	where := v.where(L)
	p, ok := L.Get(1).(glua.LString)
	if !ok || p == "" {
		return fail(L, where, "workflow: argument 1 must be the path of a workflow file")
	}
	var args any
	if a := L.Get(2); a != glua.LNil {
		if _, ok := a.(*glua.LTable); !ok {
			return fail(L, where, "workflow: argument 2 (args) must be a table, got a %s", a.Type())
		}
		var err error
		if args, err = v.codec.FromLua(a); err != nil {
			return fail(L, where, "workflow: args: %s", err)
		}
	}
	shown := string(p)
	if len(shown) > shownWorkflowPath {
		shown = shown[:shownWorkflowPath] + "…"
	}
	name, err := WorkflowName(string(p))
	if err != nil {
		return fail(L, where, "workflow %q: %s", shown, err)
	}
	v.checkNesting(L, t, "workflow()")
	dir := scriptDir(t.wf.prog)
	path := filepath.Join(dir, name)
	key := t.br.next()
	c := Call{Key: key, Kind: KindWorkflow, Hash: hashStrings("workflow", path), Where: where, PhaseID: v.phaseID()}
	prog, ok := v.protos[path]
	if !ok {
		src, err := v.host.LoadWorkflow(c, dir, name)
		if err != nil {
			v.hostError(L, err)
			return fail(L, where, "workflow %q: %s", shown, err)
		}
		prog, err = CompileFile(path, src)
		if err != nil {
			return fail(L, where, "workflow %q: %s", shown, err)
		}
		v.protos[path] = prog
	}
	child, err := v.newWorkflow(prog, args)
	if err != nil {
		return fail(L, where, "workflow %q: %s", shown, err)
	}
	start := v.cfg.Now()
	v.emit(event.WorkflowStarted, map[string]any{"span_id": key, "path": path, "args": args})
	done := func(err error) {
		data := map[string]any{"span_id": key, "path": path, "ok": err == nil, "elapsed_ms": v.cfg.Now().Sub(start).Milliseconds()}
		if err != nil {
			msg := fmt.Sprintf("workflow %q failed: %s", shown, err)
			if where != "" { // empty when workflow() is a tail call
				msg = where + ": " + msg
			}
			data["error"] = msg
			v.emit(event.WorkflowDone, data)
			v.resumeLater(t, glua.LFalse, glua.LString(msg))
			return
		}
		rep, cerr := v.codec.ToLua(child.report)
		if cerr != nil {
			rep = glua.LNil
		}
		v.emit(event.WorkflowDone, data)
		v.resumeLater(t, glua.LTrue, rep)
	}
	fn := v.L.NewFunctionFromProto(prog.proto)
	fn.Env = child.env
	top := v.newTask(t.ctx, fn, nil, &branch{path: key + "/top"}, child, func(_ []glua.LValue, err error) {
		if err != nil {
			done(v.scriptError(err, KindInvalid))
			return
		}
		if err := v.checkWorkflow(child); err != nil {
			done(err)
			return
		}
		mainFn := child.env.RawGetString("main").(*glua.LFunction)
		m := v.newTask(t.ctx, mainFn, nil, &branch{path: key + "/wf"}, child, func(_ []glua.LValue, err error) {
			if err != nil {
				done(v.scriptError(err, KindRuntime))
				return
			}
			done(nil)
		})
		v.runq = append(v.runq, m)
	})
	top.topLevel = true
	v.runq = append(v.runq, top)
	return v.yield(L)
}

// maxWorkflowPath is the longest path workflow() takes (Linux's PATH_MAX); error messages
// quote at most shownWorkflowPath bytes of it.
const (
	maxWorkflowPath   = 4096
	shownWorkflowPath = 200
)

// WorkflowName checks the path a script gave workflow() and returns it cleaned: a .lua
// file inside the calling script's folder, named relative to it. Symlinks are the host's
// to check (Host.LoadWorkflow); everything that can be refused without the file system
// is refused here. Other doors that load a workflow inside a folder (MCP's paths inside
// the client's roots) check the path relative to that folder with it.
func WorkflowName(p string) (string, error) {
	switch {
	case len(p) > maxWorkflowPath:
		return "", fmt.Errorf("the path is longer than %d bytes", maxWorkflowPath)
	case strings.IndexByte(p, 0) >= 0:
		return "", errors.New("the path contains a NUL byte")
	case filepath.IsAbs(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`):
		return "", errors.New("absolute paths are not allowed: give a path relative to the calling script's folder")
	case !strings.HasSuffix(p, ".lua"):
		return "", errors.New("only .lua files can be loaded as workflows")
	}
	name := filepath.Clean(p)
	if name == ".." || strings.HasPrefix(name, "../") || strings.HasPrefix(name, `..\`) {
		return "", errors.New("the path leaves the calling script's folder (..): only files inside it can be loaded")
	}
	return name, nil
}

// scriptDir is the folder workflow() paths of prog are relative to.
func scriptDir(prog *Program) string {
	if prog.Path == "" {
		return "."
	}
	return filepath.Dir(prog.Path)
}
