package lua

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua/luaval"
	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Limits are the sandbox limits of one run. Zero fields take the defaults.
type Limits struct {
	MaxAgentCalls  int   // agent() calls per run; default 10,000
	MaxStringBytes int   // largest string a builder may make; default 16 MiB
	MaxCallDepth   int   // Lua call frames per coroutine; default 200
	MaxPcallDepth  int   // nested pcall/xpcall per branch; default 64
	MaxNesting     int   // nested workflow/parallel/pmap/pipeline calls; default 32
	MaxMemoryBytes int64 // Go heap at which the run is stopped; default 4 GiB, < 0 = off
	// MaxLogBytes caps one log()/print() message; a longer one is cut with a marker.
	// Default 1 MiB.
	MaxLogBytes int
	// MaxReportBytes caps the report as JSON: its longest strings are cut with a marker;
	// a value too big even then (its structure alone) ends the run with a limit error.
	// Default 1 MiB.
	MaxReportBytes int
	JSON           luaval.Limits
}

func (l Limits) withDefaults() Limits {
	if l.MaxAgentCalls <= 0 {
		l.MaxAgentCalls = 10000
	}
	if l.MaxStringBytes <= 0 {
		l.MaxStringBytes = 16 << 20
	}
	if l.MaxCallDepth <= 0 {
		l.MaxCallDepth = 200
	}
	if l.MaxPcallDepth <= 0 {
		l.MaxPcallDepth = 64
	}
	if l.MaxNesting <= 0 {
		l.MaxNesting = 32
	}
	if l.MaxMemoryBytes == 0 {
		l.MaxMemoryBytes = 4 << 30
	}
	if l.MaxLogBytes <= 0 {
		l.MaxLogBytes = event.DefaultMaxBytes
	}
	if l.MaxReportBytes <= 0 {
		l.MaxReportBytes = event.DefaultMaxBytes
	}
	return l
}

// Config is what one VM needs to run a workflow.
type Config struct {
	Host    Host
	Limits  Limits
	RunID   string
	Resumed bool
	Attempt int
	// Concurrency is the run's concurrency: the default max_inflight of pipeline stages.
	Concurrency int
	// BranchWindow is how many branches of one parallel call are alive at once when the
	// script sets no max_concurrency; default 32 × Concurrency. Agent calls are bounded
	// by the scheduler anyway, so the window only bounds memory: a 100,000-item fan-out
	// keeps a few hundred coroutines, not 100,000.
	BranchWindow int
	// Args is the decoded --args JSON (nil for none).
	Args any
	// Now is the clock for elapsed times and fresh luft.now values; default time.Now.
	Now func() time.Time
	// Rand returns a fresh random float in [0,1) for luft.random; default math/rand/v2.
	Rand func() float64
	// UUID returns a fresh UUID string for luft.uuid.
	UUID func() string
}

// Program is a compiled workflow script. It is read-only and may be shared across runs.
type Program struct {
	Name  string // file name as shown in messages
	Path  string // path used to resolve workflow() calls; "" means the working directory
	proto *glua.FunctionProto
	src   string // the source, for messages that quote a line (explain)
}

// Compile parses and compiles a workflow script. name is used in messages; path is the
// file the script came from (workflow() paths are relative to its folder). A script over
// the shape limits (MaxScriptBytes, MaxSyntaxDepth, MaxArithmeticOps, MaxExpressionOps) is
// refused before gopher-lua parses it.
func Compile(name, path string, src []byte) (*Program, error) {
	return compile(name, path, src, true)
}

// CompileFile compiles a workflow read from a file that whoever reads the errors may not
// be shown (one loaded by workflow(), a path named through MCP). Its syntax errors give
// the file, line and column but never quote it: errors must not echo a file's contents.
func CompileFile(path string, src []byte) (*Program, error) {
	return compile(path, path, src, false)
}

func compile(name, path string, src []byte, quote bool) (prog *Program, err error) {
	defer func() {
		// The lexer, parser and compiler turn their own errors into values; anything else
		// they panic with is still a script the host must refuse, not a crash.
		if r := recover(); r != nil {
			prog, err = nil, &ScriptError{Kind: KindSyntax, Where: name, Msg: fmt.Sprintf("the Lua compiler failed on this script: %v", r)}
		}
	}()
	if err := checkShape(name, src); err != nil {
		return nil, err
	}
	chunk, err := parse.Parse(bytes.NewReader(src), name)
	if err != nil {
		return nil, syntaxError(name, err, quote)
	}
	rewriteScript(chunk)
	proto, err := glua.Compile(chunk, name)
	if err != nil {
		return nil, syntaxError(name, err, quote)
	}
	return &Program{Name: name, Path: path, proto: proto, src: string(src)}, nil
}

var parseErrRe = regexp.MustCompile(`line:(\d+)\(column:(\d+)\) near '(.*)':\s*(.*)`)

func syntaxError(name string, err error, quote bool) error {
	msg := strings.TrimSpace(err.Error())
	if m := parseErrRe.FindStringSubmatch(msg); m != nil {
		if !quote {
			return &ScriptError{Kind: KindSyntax, Where: name + ":" + m[1], Msg: fmt.Sprintf("syntax error (column %s)", m[2])}
		}
		near := m[3]
		if near == "" || near == "EOF" || near == "<EOF>" {
			near = "end of file"
		} else {
			near = "'" + near + "'"
		}
		return &ScriptError{Kind: KindSyntax, Where: name + ":" + m[1], Msg: fmt.Sprintf("syntax error near %s (column %s): %s", near, m[2], m[4])}
	}
	if !quote {
		return &ScriptError{Kind: KindSyntax, Where: name, Msg: "syntax error (the file cannot be compiled as Lua)"}
	}
	return &ScriptError{Kind: KindSyntax, Where: name, Msg: "syntax error: " + msg}
}

// Outcome is what a finished script produced.
type Outcome struct {
	Report    any  // the last report() value as plain JSON-able data; nil when none
	HasReport bool // report() was called
	Meta      any  // the decoded meta table, nil when none
}

// Run executes prog to completion on the calling goroutine, which owns the Lua state for
// the whole run. It returns the report, or a *ScriptError.
func Run(ctx context.Context, cfg Config, prog *Program) (Outcome, error) {
	vm, err := newVM(ctx, cfg)
	if err != nil {
		return Outcome{}, err
	}
	defer vm.close()
	return vm.run(prog)
}

// Validate loads prog without running main(): it checks that the top level runs, that
// main is a function and that meta is well formed. Effects are refused at the top level,
// so nothing reaches the host but events.
func Validate(ctx context.Context, cfg Config, prog *Program) (Outcome, error) {
	vm, err := newVM(ctx, cfg)
	if err != nil {
		return Outcome{}, err
	}
	defer vm.close()
	wf, err := vm.newRoot(prog)
	if err != nil {
		return Outcome{}, err
	}
	if err := vm.loadTop(wf); err != nil {
		return Outcome{}, err
	}
	return Outcome{Meta: wf.meta}, nil
}

// vm is one run's Lua state and its driver loop. Only the goroutine inside Run touches it.
type vm struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	cfg    Config
	lim    Limits
	L      *glua.LState
	codec  *luaval.Codec
	host   Host

	marker *glua.LUserData // the only value primitives yield to the driver
	wrap   *glua.LTable    // Lua wrappers of the yielding primitives (from the prelude)
	trampo *glua.LFunction // calls f(...) in non-tail position and returns its results
	base   map[string]glua.LValue
	libs   map[string]*glua.LTable
	// orphanMeta is the string metatable seen when no task runs (never by a script).
	orphanMeta *glua.LTable
	protos     map[string]*Program // compiled sub-workflows by path
	srcs       map[string]string   // sources of the workflows loaded, by name (explain)
	explained  map[string]string   // messages explain has rewritten, by original
	current    *task
	runq       []*task
	pending    int // async effects started and not yet delivered
	done       chan struct{}
	compl      chan completion
	fatal      error

	// growSlots is how many empty slots one write may add to a table's array part
	// (growLimit).
	growSlots  int
	guards     [2]*glua.LFunction // indexGlobal and fieldGlobal (grow.go)
	agentCalls int
	rounds     int // the rounds hint of budget(time_ms, rounds): converge's default max_rounds
	phase      *phaseState
	phaseSeq   int
	root       *workflowState
	loopFuncs  map[uintptr]bool // Go function entry → is a gopher-lua VM loop
	free       []*glua.LState   // finished coroutines, ready for reuse
}

const maxFreeThreads = 1024

type completion struct {
	t       *task
	deliver func() []glua.LValue // runs on the VM goroutine; returns the resume values
}

// task is one coroutine the driver resumes: the main function, a parallel branch, a
// pipeline stage of one item, or a sub-workflow's top level or main.
type task struct {
	th       *glua.LState
	fn       *glua.LFunction
	args     []glua.LValue
	started  bool
	ctx      context.Context
	cancel   context.CancelFunc
	br       *branch
	wf       *workflowState
	topLevel bool   // the chunk's top level: effects are refused
	pdepth   int    // nested pcall depth
	site     string // the script position that started this branch: positions fall back to it
	onDone   func(rets []glua.LValue, err error)
}

// branch is a call-key namespace: a path and the counter of effects issued in it.
type branch struct {
	path   string
	n      int
	agents int // agent() calls issued directly in this branch
}

func (b *branch) next() string {
	b.n++
	return b.path + "/" + strconv.Itoa(b.n)
}

type workflowState struct {
	prog        *Program
	env         *glua.LTable
	strMeta     *glua.LTable // this workflow's view of the string metatable
	report      any
	hasReport   bool
	reportWhere string // the position of the report() call that set report
	meta        any
	metaDesc    map[string]string // meta.phases' descriptions by label
}

type metaPhase struct {
	Label, Description string
}

type phaseState struct {
	id         int
	label      string
	ok, failed int
	cancelled  int // cut off by a cancel: not failed
}

func newVM(ctx context.Context, cfg Config) (*vm, error) {
	if cfg.Host == nil {
		return nil, errors.New("lua: Config.Host is nil")
	}
	cfg = withConfigDefaults(cfg)
	lim := cfg.Limits.withDefaults()
	cctx, cancel := context.WithCancelCause(ctx)
	L := glua.NewState(glua.Options{
		SkipOpenLibs:        true,
		CallStackSize:       lim.MaxCallDepth,
		RegistrySize:        128,
		RegistryGrowStep:    64,
		RegistryMaxSize:     128 * 1024,
		MinimizeStackMemory: true,
	})
	// The context must be set before any coroutine is created: NewThread gives a thread
	// a child context only when its parent already has one.
	L.SetContext(cctx)
	v := &vm{
		ctx: cctx, cancel: cancel, cfg: cfg, lim: lim, L: L, host: cfg.Host,
		growSlots: growLimit(lim.MaxMemoryBytes),
		protos:    map[string]*Program{}, loopFuncs: map[uintptr]bool{}, srcs: map[string]string{},
		done:  make(chan struct{}),
		compl: make(chan completion, 256),
	}
	v.codec = luaval.NewCodec(L, lim.JSON)
	// A conversion of a huge value stops on cancel and timeout, and one too large for
	// its limit ends the run at the script line (a builder limit, like the string limit).
	v.codec.Interrupt = func() error {
		ctx := v.ctx
		if v.current != nil {
			ctx = v.current.ctx
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	v.codec.OnTooLarge = func(L *glua.LState, msg string) { v.raiseFatal(L, "%s", msg) }
	v.marker = L.NewUserData()
	if err := v.openSandbox(); err != nil {
		// A run cancelled (or out of time) before its sandbox is ready is a stopped run,
		// not a broken prelude.
		if ctx.Err() != nil {
			err = v.cancelled(err)
		}
		L.Close()
		cancel(nil)
		return nil, err
	}
	if lim.MaxMemoryBytes > 0 {
		go watchMemory(cctx, cancel, lim.MaxMemoryBytes)
	}
	return v, nil
}

func (v *vm) close() {
	close(v.done)
	v.cancel(nil)
	v.L.Close()
}

// run loads the workflow's top level, then drives main() and every branch it starts until
// main returns.
func (v *vm) run(prog *Program) (Outcome, error) {
	wf, err := v.newRoot(prog)
	if err != nil {
		return Outcome{}, err
	}
	v.root = wf
	if err := v.loadTop(wf); err != nil {
		return Outcome{}, err
	}
	if wf.meta != nil {
		m, _ := wf.meta.(map[string]any)
		v.emit(event.Plan, map[string]any{"reasoning": m["reasoning"], "phases": m["phases"]})
	}
	mainFn := wf.env.RawGetString("main").(*glua.LFunction)
	var runErr error
	finished := false
	root := v.newTask(v.ctx, mainFn, nil, &branch{path: "main"}, wf, func(_ []glua.LValue, err error) {
		finished = true
		runErr = err
	})
	v.runq = append(v.runq, root)
	if err := v.drive(func() bool { return finished }); err != nil {
		runErr = err
	}
	if runErr != nil {
		runErr = v.scriptError(runErr, KindRuntime)
	}
	v.settle()
	v.closePhase()
	if runErr != nil {
		return Outcome{}, runErr
	}
	if wf.hasReport {
		v.emit(event.Report, map[string]any{"value": wf.report})
	}
	return Outcome{Report: wf.report, HasReport: wf.hasReport, Meta: wf.meta}, nil
}

// settle ends the calls still in flight when the run stops (a failure, a cancel, or
// branches abandoned by fail_fast): it cancels them, waits for their completions (a
// backend returns promptly once its context ends, and the host waits for them anyway)
// and counts them into their phase, so that phase_done follows their agent_done events
// and its counts include them. Their tasks are not resumed.
func (v *vm) settle() {
	if v.pending == 0 {
		return
	}
	v.cancel(nil)
	for v.pending > 0 {
		c := <-v.compl
		v.pending--
		c.deliver()
	}
}

// loadTop runs a workflow's top-level chunk (effects refused) and checks main and meta.
func (v *vm) loadTop(wf *workflowState) error {
	fn := v.L.NewFunctionFromProto(wf.prog.proto)
	fn.Env = wf.env
	var topErr error
	finished := false
	t := v.newTask(v.ctx, fn, nil, &branch{path: "top"}, wf, func(_ []glua.LValue, err error) {
		finished = true
		topErr = err
	})
	t.topLevel = true
	v.runq = append(v.runq, t)
	if err := v.drive(func() bool { return finished }); err != nil {
		topErr = err
	}
	if topErr != nil {
		return v.scriptError(topErr, KindInvalid)
	}
	return v.checkWorkflow(wf)
}

func (v *vm) checkWorkflow(wf *workflowState) error {
	if _, ok := wf.env.RawGetString("main").(*glua.LFunction); !ok {
		return &ScriptError{Kind: KindInvalid, Where: wf.prog.Name,
			Msg: "the script defines no function main(); add `function main() ... end` (top-level code runs first, then main)"}
	}
	if mv := wf.env.RawGetString("meta"); mv != glua.LNil {
		meta, phases, err := v.readMeta(mv)
		if err != nil {
			return &ScriptError{Kind: KindInvalid, Where: wf.prog.Name, Msg: "invalid meta: " + err.Error()}
		}
		wf.meta = meta
		// By label, so that phase() finds its description at once however many
		// phases the plan names; the last of a repeated label wins.
		wf.metaDesc = make(map[string]string, len(phases))
		for _, p := range phases {
			wf.metaDesc[p.Label] = p.Description
		}
	}
	return nil
}

func (v *vm) readMeta(mv glua.LValue) (any, []metaPhase, error) {
	if _, ok := mv.(*glua.LTable); !ok {
		return nil, nil, fmt.Errorf("meta must be a table, not a %s", mv.Type())
	}
	m, err := v.codec.FromLua(mv)
	if err != nil {
		return nil, nil, err
	}
	obj, ok := m.(map[string]any)
	if !ok {
		return nil, nil, errors.New("meta must be a table with named fields (reasoning, phases)")
	}
	for k := range obj {
		if k != "reasoning" && k != "phases" && k != "name" && k != "description" {
			return nil, nil, fmt.Errorf("unknown field meta.%s (known: reasoning, phases, name, description)", k)
		}
	}
	if r, ok := obj["reasoning"]; ok {
		if _, isStr := r.(string); !isStr {
			return nil, nil, errors.New("meta.reasoning must be a string")
		}
	}
	var phases []metaPhase
	if p, ok := obj["phases"]; ok {
		list, isList := p.([]any)
		if m, isMap := p.(map[string]any); isMap && len(m) == 0 {
			list, isList = []any{}, true
			obj["phases"] = list
		}
		if !isList {
			return nil, nil, errors.New("meta.phases must be a list of {label=..., description=...}")
		}
		seen := map[string]bool{}
		for i, e := range list {
			ph, ok := e.(map[string]any)
			if !ok {
				return nil, nil, fmt.Errorf("meta.phases[%d] must be a table {label=..., description=...}", i+1)
			}
			label, _ := ph["label"].(string)
			if strings.TrimSpace(label) == "" {
				return nil, nil, fmt.Errorf("meta.phases[%d].label must be a non-empty string", i+1)
			}
			if seen[label] {
				return nil, nil, fmt.Errorf("meta.phases[%d].label %q is used twice; labels must be unique", i+1, label)
			}
			seen[label] = true
			if d, ok := ph["dynamic"]; ok {
				if _, isBool := d.(bool); !isBool {
					return nil, nil, fmt.Errorf("meta.phases[%d].dynamic must be true or false", i+1)
				}
			}
			desc, _ := ph["description"].(string)
			if desc == "" {
				desc, _ = ph["detail"].(string) // Luft's planner writes detail
			}
			phases = append(phases, metaPhase{Label: label, Description: desc})
		}
	}
	return obj, phases, nil
}

func (v *vm) newWorkflow(prog *Program, args any) (*workflowState, error) {
	wf := &workflowState{prog: prog}
	env, err := v.newEnv(wf, args)
	if err != nil {
		return nil, err
	}
	wf.env = env
	v.srcs[prog.Name] = prog.src
	return wf, nil
}

// newRoot is the run's own workflow; args it cannot convert are invalid input.
func (v *vm) newRoot(prog *Program) (*workflowState, error) {
	wf, err := v.newWorkflow(prog, v.cfg.Args)
	if err != nil {
		return nil, &ScriptError{Kind: KindInvalid, Where: prog.Name, Msg: err.Error()}
	}
	return wf, nil
}

// newTask makes a coroutine that will run fn(args...) through the trampoline, so that a
// tail call at the coroutine's root cannot end it early.
func (v *vm) newTask(ctx context.Context, fn *glua.LFunction, args []glua.LValue, br *branch, wf *workflowState, onDone func([]glua.LValue, error)) *task {
	var th *glua.LState
	cancel := context.CancelFunc(func() {})
	if n := len(v.free); n > 0 {
		// A coroutine that returned normally is empty and can run the next task; making a
		// thread is the largest cost of a branch (gopher-lua allocates a Global per thread).
		th = v.free[n-1]
		v.free = v.free[:n-1]
		th.Dead = false
	} else {
		th, cancel = v.L.NewThread()
	}
	th.SetContext(ctx)
	return &task{
		th: th, fn: v.trampo, args: append([]glua.LValue{fn}, args...),
		ctx: ctx, cancel: cancel, br: br, wf: wf, onDone: onDone,
	}
}

// drive resumes runnable tasks until done() holds. It is the only caller of Resume.
func (v *vm) drive(done func() bool) error {
	for {
		for len(v.runq) > 0 && v.fatal == nil {
			t := v.runq[0]
			v.runq[0] = nil
			v.runq = v.runq[1:]
			v.step(t)
		}
		if v.fatal != nil {
			return v.fatal
		}
		if done() {
			return nil
		}
		if err := v.ctx.Err(); err != nil {
			return v.cancelled(err)
		}
		if v.pending == 0 {
			return &ScriptError{Kind: KindRuntime, Msg: "internal error: the workflow is waiting but nothing is running (please report this with the script)"}
		}
		select {
		case c := <-v.compl:
			v.pending--
			if c.t.ctx.Err() != nil {
				continue // its branch was cancelled (fail_fast) or the run is ending
			}
			c.t.args = c.deliver()
			v.runq = append(v.runq, c.t)
		case <-v.ctx.Done():
			return v.cancelled(v.ctx.Err())
		}
	}
}

func (v *vm) cancelled(err error) error {
	cause := context.Cause(v.ctx)
	if cause == nil {
		cause = err
	}
	var se *ScriptError
	if errors.As(cause, &se) {
		return se
	}
	return &ScriptError{Kind: KindCancelled, Msg: "run stopped: " + cause.Error(), Cause: cause}
}

// interrupted is cancelled for an error raised inside the VM by the context check: it
// keeps the script position the VM was at, so a limit names the line it stopped.
func (v *vm) interrupted(resumeErr error, th *glua.LState) error {
	err := v.cancelled(v.ctx.Err())
	var ae *glua.ApiError
	var se *ScriptError
	if errors.As(resumeErr, &ae) && errors.As(err, &se) && se.Where == "" {
		where, _ := splitWhere(ae.Object.String())
		if where == "" {
			// Stopped in the prelude (the Lua side of pcall): the coroutine's frames are
			// still there, the script's below the prelude's.
			where = scriptFrame(th)
		}
		if where != "" {
			cp := *se
			cp.Where = where
			return &cp
		}
	}
	return err
}

// scriptFrame is the position of th's innermost script frame ("file.lua:12"), or "".
func scriptFrame(th *glua.LState) string {
	for level := 0; level < 256; level++ {
		dbg, ok := th.GetStack(level)
		if !ok {
			break
		}
		if _, err := th.GetInfo("Sl", dbg, glua.LNil); err == nil && dbg.CurrentLine > 0 && dbg.Source != "" && dbg.Source != "<prelude>" {
			return fmt.Sprintf("%s:%d", dbg.Source, dbg.CurrentLine)
		}
	}
	return ""
}

// step resumes one task until it yields or ends.
func (v *vm) step(t *task) {
	if t.ctx.Err() != nil && v.ctx.Err() == nil {
		return // abandoned by fail_fast; its parent already accounted for it
	}
	v.current = t
	var (
		st   glua.ResumeState
		err  error
		rets []glua.LValue
	)
	func() {
		defer func() {
			if r := recover(); r != nil {
				// gopher-lua panics on a few internal overflows; a script must never
				// take the host down with it.
				st, err = glua.ResumeError, &ScriptError{Kind: KindLimit, Msg: fmt.Sprintf("the Lua VM stopped: %v", r)}
			}
		}()
		if !t.started {
			t.started = true
			st, err, rets = v.L.Resume(t.th, t.fn, t.args...)
		} else {
			st, err, rets = v.L.Resume(t.th, nil, t.args...)
		}
	}()
	v.current = nil
	t.args = nil
	switch st {
	case glua.ResumeYield:
		if len(rets) == 0 || rets[0] != v.marker {
			v.finish(t, nil, &ScriptError{Kind: KindRuntime, Msg: "internal error: a coroutine yielded outside a luft primitive"})
		}
		// Parked: the primitive that yielded arranged for the task to be resumed.
	case glua.ResumeOK:
		if len(v.free) < maxFreeThreads {
			v.free = append(v.free, t.th)
		}
		v.finish(t, rets, nil)
	default:
		if se := v.overflowError(t.th, err); se != nil && v.fatal == nil {
			v.fatal = se
		}
		v.finish(t, nil, err)
	}
}

// overflowError turns gopher-lua's call stack overflow, raised without a script position
// (and as a Go panic inside the VM), into the call depth limit error at the script line
// of the innermost frame of th, the coroutine that overflowed. It returns nil for any
// other error.
func (v *vm) overflowError(th *glua.LState, err error) *ScriptError {
	var ae *glua.ApiError
	if !errors.As(err, &ae) {
		return nil
	}
	// The exact text of gopher-lua's panic: a script's own error("... stack overflow")
	// stays an ordinary error that pcall may catch.
	if msg, ok := ae.Object.(glua.LString); !ok || msg != "lua callstack overflow" {
		return nil
	}
	where := ""
	for level := 0; where == "" && level < 8; level++ {
		dbg, ok := th.GetStack(level)
		if !ok {
			break
		}
		if _, err := th.GetInfo("Sl", dbg, glua.LNil); err == nil && dbg.CurrentLine > 0 && dbg.Source != "<prelude>" {
			where = fmt.Sprintf("%s:%d", dbg.Source, dbg.CurrentLine)
		}
	}
	return &ScriptError{Kind: KindLimit, Where: where, Msg: fmt.Sprintf("call depth limit (%d frames) exceeded: unbounded recursion?", v.lim.MaxCallDepth)}
}

func (v *vm) finish(t *task, rets []glua.LValue, err error) {
	t.cancel()
	if v.fatal != nil {
		return
	}
	if err != nil && v.ctx.Err() != nil {
		v.fatal = v.interrupted(err, t.th)
		return
	}
	t.onDone(rets, err)
}

// resumeLater queues t to continue with vals as the results of its pending yield.
func (v *vm) resumeLater(t *task, vals ...glua.LValue) {
	t.args = vals
	v.runq = append(v.runq, t)
}

// yield parks the current coroutine; the caller has arranged its resumption.
func (v *vm) yield(L *glua.LState) int {
	return L.Yield(v.marker)
}

// raiseFatal ends the run with a limit error that pcall cannot catch.
func (v *vm) raiseFatal(L *glua.LState, format string, args ...any) int {
	return v.raiseFatalKind(L, KindLimit, format, args...)
}

// raiseFatalKind ends the run with an error of the given kind that pcall cannot catch
// (a limit, or an invalid agent option: mistakes in the script, not failures of a call).
func (v *vm) raiseFatalKind(L *glua.LState, kind ErrorKind, format string, args ...any) int {
	where := v.where(L)
	se := &ScriptError{Kind: kind, Where: where, Msg: fmt.Sprintf(format, args...)}
	v.fatal = se
	L.RaiseError("%s", se.Msg)
	return 0
}

// where returns the script position of the innermost script frame ("file.lua:12"). It
// looks through the coroutines of yield-safe pcall into the task that resumed them.
func (v *vm) where(L *glua.LState) string {
	for th := L; th != nil; th = th.Parent {
		for level := 1; level < 256; level++ {
			dbg, ok := th.GetStack(level)
			if !ok {
				break
			}
			if _, err := th.GetInfo("Sl", dbg, glua.LNil); err != nil {
				continue
			}
			// Chunks of luft's own ("<prelude>", "<converge>") are skipped: a position names
			// the script line that called into them.
			if dbg.CurrentLine > 0 && dbg.Source != "" && !strings.HasPrefix(dbg.Source, "<") {
				return fmt.Sprintf("%s:%d", dbg.Source, dbg.CurrentLine)
			}
		}
		if v.current != nil && th == v.current.th {
			break
		}
	}
	// No script frame on this branch's stack (its function is luft's own, or a tail call
	// replaced the frame): the line that started the branch.
	if v.current != nil {
		return v.current.site
	}
	return ""
}

// guardYield refuses to yield when a Go function sits between the caller and the task's
// root: gopher-lua cannot suspend a Go frame (a table.sort comparator, a string.gsub
// callback, a metamethod), and would panic or silently end the coroutine. Every Lua call
// made from Go runs a nested VM loop on the Go stack, so the guard counts those loops: one
// is expected for the task and one for each coroutine of the yield-safe pcall in between;
// any more means a Go frame would be crossed.
func (v *vm) guardYield(L *glua.LState, what string) {
	want := 1
	for th := L; th != nil && (v.current == nil || th != v.current.th); th = th.Parent {
		want++
	}
	if v.vmLoops() > want {
		v.raiseFatal(L, "%s cannot wait inside a callback run by a Go function (a table.sort comparator, a string.gsub replacement, a metamethod or an iterator); call it outside the callback and pass the result in", what)
	}
}

// vmLoops counts gopher-lua VM loops on the calling goroutine's stack. Frames are
// recognised by function entry, symbolised once per entry and cached on the VM.
func (v *vm) vmLoops() int {
	var buf [512]uintptr
	pcs := buf[:goruntime.Callers(2, buf[:])]
	count := 0
	for _, pc := range pcs {
		fn := goruntime.FuncForPC(pc - 1)
		if fn == nil {
			continue
		}
		entry := fn.Entry()
		isLoop, ok := v.loopFuncs[entry]
		if !ok {
			isLoop = strings.HasPrefix(fn.Name(), "github.com/yuin/gopher-lua.mainLoop")
			v.loopFuncs[entry] = isLoop
		}
		if isLoop {
			count++
		}
	}
	return count
}

// checkNesting ends the run when a primitive that starts child tasks (parallel, pmap,
// pipeline, workflow) is called more than MaxNesting levels deep: a workflow that calls
// itself, or a branch that starts a parallel of itself, would otherwise nest until memory
// runs out. The depth is read from the branch path, which gains one "par[i]", "item[i]"
// or "wf" segment per level, so no per-task state is needed.
func (v *vm) checkNesting(L *glua.LState, t *task, what string) {
	depth := 0
	for seg := range strings.SplitSeq(t.br.path, "/") {
		if seg == "wf" || strings.HasPrefix(seg, "par[") || strings.HasPrefix(seg, "item[") {
			depth++
		}
	}
	if depth >= v.lim.MaxNesting {
		v.raiseFatal(L, "nesting limit (%d levels of workflow/parallel/pmap/pipeline) exceeded by %s at depth %d: does a workflow or a branch call itself without end?", v.lim.MaxNesting, what, depth+1)
	}
}

func (v *vm) checkEffect(L *glua.LState, what string) *task {
	t := v.current
	if t == nil {
		L.RaiseError("%s: no running task (internal error)", what)
		return nil
	}
	if t.topLevel {
		v.raiseAt(L, "%s is not allowed in a script's top-level code; call it from main() (top-level code only defines meta and functions)", what)
	}
	v.guardYield(L, what)
	return t
}

// raiseAt raises a Lua error positioned at the script line that called the primitive,
// not at the Lua wrapper the primitive is reached through.
func (v *vm) raiseAt(L *glua.LState, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if where := v.where(L); where != "" {
		msg = where + ": " + msg
	}
	L.Error(glua.LString(msg), 0)
}

func (v *vm) emit(typ string, data map[string]any) {
	v.host.Emit(event.New(typ, data))
}

func (v *vm) phaseID() int {
	if v.phase == nil {
		return 0
	}
	return v.phase.id
}

func (v *vm) closePhase() {
	if v.phase == nil {
		return
	}
	p := v.phase
	v.phase = nil
	v.emit(event.PhaseDone, map[string]any{"phase_id": p.id, "label": p.label, "ok": p.ok, "failed": p.failed, "cancelled": p.cancelled})
}

// scriptError turns an error from Resume into a *ScriptError with a script position.
func (v *vm) scriptError(err error, kind ErrorKind) error {
	if v.fatal != nil {
		return v.fatal
	}
	var se *ScriptError
	if errors.As(err, &se) {
		return se
	}
	if v.ctx.Err() != nil {
		return v.cancelled(v.ctx.Err())
	}
	var ae *glua.ApiError
	if errors.As(err, &ae) {
		where, rest := splitWhere(v.errorText(ae.Object))
		if where == "" {
			// gopher-lua raises its depth errors ("stack overflow") without a
			// position; the traceback's innermost script frame has it.
			if m := traceWhereRe.FindStringSubmatch(ae.StackTrace); m != nil {
				where = m[1]
			}
		}
		if strings.Contains(rest, "stack overflow") {
			return &ScriptError{Kind: KindLimit, Where: where, Msg: fmt.Sprintf("call depth limit (%d frames) exceeded: unbounded recursion?", v.lim.MaxCallDepth), Trace: ae.StackTrace}
		}
		if strings.Contains(rest, "registry overflow") {
			return &ScriptError{Kind: KindLimit, Where: where, Msg: "Lua stack limit exceeded (too many values on the stack)", Trace: ae.StackTrace}
		}
		if where != "" {
			_, rest = splitWhere(v.explain(where + ": " + rest))
		}
		return &ScriptError{Kind: kind, Where: where, Msg: rest, Trace: ae.StackTrace}
	}
	return &ScriptError{Kind: kind, Msg: err.Error()}
}

var traceWhereRe = regexp.MustCompile(`(?m)^\s*([^\s:]+\.lua:\d+):`)

var whereRe = regexp.MustCompile(`^([^\s:]+\.lua:\d+):\s?(.*)$`)

// splitWhere separates a "file.lua:12: message" prefix from a Lua error message.
func splitWhere(msg string) (string, string) {
	if m := whereRe.FindStringSubmatch(msg); m != nil {
		return m[1], m[2]
	}
	return "", msg
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
