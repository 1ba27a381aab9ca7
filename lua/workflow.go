package lua

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/luft-run/luft/event"
	glua "github.com/yuin/gopher-lua"
)

// workflowFn is the Go half of workflow(path [, args]).
func (v *vm) workflowFn(L *glua.LState) int {
	t := v.checkEffect(L, "workflow()")
	where := v.where(L)
	shown, name, args, err := v.workflowArgs(L)
	if err != nil {
		return fail(L, where, "%s", err)
	}
	v.checkNesting(L, t, "workflow()")
	dir := scriptDir(t.wf.prog)
	path := filepath.Join(dir, name)
	key := t.br.next()
	c := Call{Key: key, Kind: KindWorkflow, Hash: hashStrings("workflow", path), Where: where, PhaseID: v.phaseID()}
	prog, err := v.workflowProgram(L, c, dir, name, shown)
	if err != nil {
		return fail(L, where, "%s", err)
	}
	child, err := v.newWorkflow(prog, args)
	if err != nil {
		return fail(L, where, "workflow %q: %s", shown, err)
	}
	s := &subRun{v: v, t: t, key: key, path: path, shown: shown, where: where, wf: child, start: v.cfg.Now()}
	v.emit(event.WorkflowStarted, map[string]any{"span_id": key, "path": path, "args": args})
	s.runTop(prog)
	return v.yield(L)
}

// workflowArgs reads workflow(path [, args]): the path as messages show it (cut to
// shownWorkflowPath bytes), the path checked and cleaned, and args as plain data.
func (v *vm) workflowArgs(L *glua.LState) (shown, name string, args any, err error) {
	p, ok := L.Get(1).(glua.LString)
	if !ok || p == "" {
		return "", "", nil, errors.New("workflow: argument 1 must be the path of a workflow file")
	}
	if a := L.Get(2); a != glua.LNil {
		if _, ok := a.(*glua.LTable); !ok {
			return "", "", nil, fmt.Errorf("workflow: argument 2 (args) must be a table, got a %s", a.Type())
		}
		if args, err = v.codec.FromLua(a); err != nil {
			return "", "", nil, fmt.Errorf("workflow: args: %s", err)
		}
	}
	shown = string(p)
	if len(shown) > shownWorkflowPath {
		shown = shown[:shownWorkflowPath] + "…"
	}
	if name, err = WorkflowName(string(p)); err != nil {
		return "", "", nil, fmt.Errorf("workflow %q: %s", shown, err)
	}
	return shown, name, args, nil
}

// workflowProgram is the compiled workflow name in dir, loaded through the host and
// compiled once per run.
func (v *vm) workflowProgram(L *glua.LState, c Call, dir, name, shown string) (*Program, error) {
	path := filepath.Join(dir, name)
	if prog, ok := v.protos[path]; ok {
		return prog, nil
	}
	src, err := v.host.LoadWorkflow(c, dir, name)
	if err != nil {
		v.hostError(L, err)
		return nil, fmt.Errorf("workflow %q: %s", shown, err)
	}
	prog, err := CompileFile(path, src)
	if err != nil {
		return nil, fmt.Errorf("workflow %q: %s", shown, err)
	}
	v.protos[path] = prog
	return prog, nil
}

// subRun is one workflow() call while its child runs: the child's top level, then its
// main, each a task of its own; the caller resumes when either fails or main returns.
type subRun struct {
	v                       *vm
	t                       *task // the caller
	key, path, shown, where string
	wf                      *workflowState
	start                   time.Time
}

// runTop runs the child's top-level chunk (effects refused) and, when it defines a valid
// main and meta, its main.
func (s *subRun) runTop(prog *Program) {
	fn := s.v.L.NewFunctionFromProto(prog.proto)
	fn.Env = s.wf.env
	top := s.v.newTask(s.t.ctx, fn, nil, &branch{path: s.key + "/top"}, s.wf, func(_ []glua.LValue, err error) {
		if err != nil {
			s.done(s.v.scriptError(err, KindInvalid))
			return
		}
		if err := s.v.checkWorkflow(s.wf); err != nil {
			s.done(err)
			return
		}
		s.runMain()
	})
	top.topLevel = true
	s.v.runq = append(s.v.runq, top)
}

func (s *subRun) runMain() {
	mainFn := s.wf.env.RawGetString("main").(*glua.LFunction)
	m := s.v.newTask(s.t.ctx, mainFn, nil, &branch{path: s.key + "/wf"}, s.wf, func(_ []glua.LValue, err error) {
		if err != nil {
			s.done(s.v.scriptError(err, KindRuntime))
			return
		}
		s.done(nil)
	})
	s.v.runq = append(s.v.runq, m)
}

// done emits workflow_done and resumes the caller with (true, the child's report) or
// (false, the message of its failure).
func (s *subRun) done(err error) {
	v := s.v
	data := map[string]any{"span_id": s.key, "path": s.path, "ok": err == nil, "elapsed_ms": v.cfg.Now().Sub(s.start).Milliseconds()}
	if err != nil {
		msg := fmt.Sprintf("workflow %q failed: %s", s.shown, err)
		if s.where != "" { // empty when workflow() is a tail call
			msg = s.where + ": " + msg
		}
		data["error"] = msg
		v.emit(event.WorkflowDone, data)
		v.resumeLater(s.t, glua.LFalse, glua.LString(msg))
		return
	}
	rep, cerr := v.codec.ToLua(s.wf.report)
	if cerr != nil {
		rep = glua.LNil
	}
	v.emit(event.WorkflowDone, data)
	v.resumeLater(s.t, glua.LTrue, rep)
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
