package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua/luaval"
	glua "github.com/yuin/gopher-lua"
)

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

func (v *vm) emit(typ string, data map[string]any) {
	v.host.Emit(event.New(typ, data))
}
