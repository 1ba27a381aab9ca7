package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
)

// Load reads and compiles a workflow without running it. Errors are the caller's input
// errors: a missing file or a syntax error (a *lua.ScriptError of kind syntax).
func (s *Service) Load(spec Spec) (*lua.Program, []byte, error) {
	src := spec.Source
	if src == nil {
		b, err := s.opts.ReadFile(spec.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("read workflow %s: %w", spec.Path, err)
		}
		src = b
	}
	name := spec.Path
	if name == "" {
		name = "workflow.lua"
	}
	if spec.Quiet {
		prog, err := lua.CompileFile(name, src)
		return prog, src, err
	}
	prog, err := lua.Compile(name, spec.Path, src)
	return prog, src, err
}

// Start records a new run, then runs it on its own goroutine. A compile error is returned
// at once and nothing is recorded.
func (s *Service) Start(ctx context.Context, spec Spec) (*Run, error) {
	prog, src, err := s.Load(spec)
	if err != nil {
		return nil, err
	}
	if spec.Class == "" {
		spec.Class = agent.ClassInteractive
	}
	if spec.Concurrency <= 0 {
		spec.Concurrency = 8
	}
	id := uuid.Must(uuid.NewV7()).String()
	if spec.Plan != nil && s.opts.StateDir != "" {
		// A planned script lives in its run's folder: the user can edit it there and rerun
		// it with --workflow, and a resume reads it from there.
		spec.Path = filepath.Join(s.RunDir(id), "workflow.lua")
	}
	if spec.Path == "" {
		spec.Path = "workflow.lua" // the name the script is pinned and resumed under
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("start run: encode its spec: %w", err)
	}
	argsJSON, _ := json.Marshal(spec.Args)
	if err := s.opts.Store.CreateRun(ctx, storage.Run{
		ID: id, Workflow: spec.Path, ScriptHash: sha(src), Status: storage.StatusRunning,
		Args: argsJSON, Attempt: 1, PID: s.opts.PID, Spec: specJSON,
		Node: s.opts.Node, LeaseUntil: s.leaseUntil(),
	}); err != nil {
		return nil, fmt.Errorf("start run: %w", err)
	}
	if err := s.pin(ctx, id, spec.Path, src); err != nil {
		return nil, err
	}
	if spec.Plan != nil {
		if err := s.JournalPlan(ctx, id, spec.Plan.Calls); err != nil {
			return nil, err
		}
	}
	return s.launch(ctx, id, 1, "", spec, prog, nil, nil, ResumeSpec{}), nil
}

// pin stores a copy of a script the run loaded, in the store and under runs/<id>/.
func (s *Service) pin(ctx context.Context, id, path string, src []byte) error {
	if _, err := s.opts.Store.SaveFile(ctx, id, path, src); err != nil {
		return fmt.Errorf("run %s: pin %s: %w", id, path, err)
	}
	if s.opts.StateDir == "" {
		return nil
	}
	dir := s.RunDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return storage.Unwritable(s.opts.StateDir, fmt.Sprintf("run %s: pin %s", id, path), err)
	}
	name := strings.NewReplacer("/", "__", `\`, "__", "..", "up").Replace(filepath.ToSlash(filepath.Clean(path)))
	if filepath.Dir(path) == dir {
		name = filepath.Base(path) // a planned script, already in the run's folder
	}
	if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
		return storage.Unwritable(s.opts.StateDir, fmt.Sprintf("run %s: pin %s", id, path), err)
	}
	return nil
}
