// Package lua is luft's sandboxed workflow VM, built on gopher-lua (Lua 5.1 plus goto).
//
// # How a run executes
//
// One Lua state per run, owned by the goroutine that calls Run. The script's top-level code
// runs first (it defines meta and functions; agent calls are refused there), then main().
// main and every parallel/pmap branch, pipeline stage and sub-workflow run as coroutines. A
// primitive that has to wait (agent, parallel, pipeline, workflow) hands its request to the
// Host and yields; a driver loop — the only caller of Resume — resumes coroutines when
// their results arrive on a channel. Branches therefore run concurrently while Lua code
// itself runs one coroutine at a time. A parallel call without max_concurrency keeps at
// most 32 × the run's concurrency branches alive at once (the scheduler bounds the agent
// calls anyway), so a 100,000-item fan-out holds a few hundred coroutines, not 100,000.
//
// Three gopher-lua traps are handled: pcall/xpcall are replaced by Lua versions that pass
// yields through an inner coroutine (the stock ones silently end a coroutine that yields
// inside them); every coroutine starts through a trampoline (a tail call at a coroutine's
// root has the same effect); and a primitive called where it would have to wait under a Go
// frame — a table.sort comparator, a string.gsub callback, a metamethod — ends the run
// with a clear error instead of panicking the host.
//
// # Where the code is
//
// vm.go is the run: the VM, its tasks and the driver loop. Around it: config.go (Limits,
// Config), compile.go (Program, syntax errors), sandbox.go (the globals and the prelude),
// meta.go (the checks of main and meta), guards.go (where an effect may run: not at the
// top level, not under a Go frame, not nested without end), where.go (script positions),
// errors.go (ScriptError and how a run stops) and explain.go (messages about nil). Each
// primitive has its own file: agent.go, parallel.go (parallel and pmap), pipeline.go,
// workflow.go, phase.go, log.go (log and print), budget.go, report.go, values.go
// (luft.now, luft.random, luft.uuid) and converge.go; effects.go and options.go hold what
// they share. strformat.go and strpattern.go are string.format and the pattern
// functions, concat.go compiles `..` chains, refs.go keeps the host's addresses and the
// real string metatable out of a script's sight, grow.go bounds table growth and shape.go
// the shape of a script.
//
// # Rules for script authors
//
//   - Globals: assert error ipairs next pairs pcall xpcall select tonumber tostring type
//     unpack rawequal rawget rawset setmetatable getmetatable, string (no dump; rep,
//     format, gsub capped; find/match/gmatch/gsub on an interruptible matcher), table,
//     math (no random/randomseed), json, args/_args, ctx,
//     luft.now/random/uuid and the primitives. There is no io, os, debug, package,
//     require, load*, dofile, collectgarbage, coroutine or print-to-terminal: print and
//     log emit log events.
//   - Each workflow() has its own string, table and math tables. ("x"):upper() resolves
//     in the running workflow's own string table, and getmetatable("") returns that
//     workflow's view {__index = string}; the state's real string metatable is
//     unreachable. setmetatable takes tables only, as in Lua 5.1.
//   - string.format is Lua 5.1's (d i u c x X o e E f g G q s %%; width and precision
//     of at most two digits); %s accepts any value through tostring. unpack and
//     string.byte return at most 8000 values, as Lua 5.1.
//   - workflow(path) loads a .lua file inside the calling script's folder: no absolute
//     path, no ".." out of it, no symlink out of it.
//   - Determinism: a run can be re-executed, so anything that varies must come from the
//     host: use luft.now(), luft.random() and luft.uuid(), never a value from the
//     environment. pairs() visits keys in insertion order; tables luft builds (args,
//     decoded JSON, agent results) insert keys sorted, so their order is stable.
//     tostring(table) prints a reference name ("table: 9c2f41d07a3e", a keyed hash of
//     the address, never the address itself): the same for the same table within a
//     run, different from run to run, so do not build prompts from it.
//   - Branches talk through return values, not shared upvalues: their interleaving
//     depends on when results arrive.
//   - Every effect has a call key: the branch path plus a counter of effects issued in
//     that branch ("main/3", "main/2/par[4]/1", "main/5/item[2]/stage[1]/1",
//     "main/4/wf/2"), so the order in which calls finish never changes the keys.
//   - Limits: call depth, pcall nesting, nesting of workflow/parallel/pmap/pipeline
//     calls, string size, values in one JSON conversion, agent calls per run, the empty
//     slots one table write may add to an array part (grow.go) and (when set) process
//     memory. A limit violation ends the run with a message naming the limit and
//     the script position; pcall cannot catch it. Cancellation and timeouts interrupt
//     even a pure-Lua loop.
//   - Failures: an agent call that fails after its retries returns its result with
//     ok=false (status, error, tokens, usage, findings present) and does not raise, as
//     Luft's scripts expect; invalid options, limits, budgets and divergence end the run.
//     report() keeps its first value; a later call is a warning naming both lines.
//   - converge is Lua code of luft's own (converge.go) over the agent and parallel
//     wrappers, so its calls are ordinary calls. Positions skip luft's own chunks.
//   - Messages about nil name what is missing (explain.go): "`x` is not defined",
//     "`io` is not available in workflow scripts".
//   - What a script writes is capped: a log()/print() message longer than
//     Limits.MaxLogBytes (1 MiB) is cut with a marker naming the limit; the report's
//     longest strings are cut to fit Limits.MaxReportBytes (1 MiB), and a report too big
//     by its structure alone ends the run with a limit error. The report event is emitted
//     once, when main returns, so calling report() repeatedly stores one report.
//   - Script shape, checked before parsing: at most 4 MiB, 200 levels of nesting
//     (brackets, blocks, functions, elseifs), and per expression 200 arithmetic operators
//     and 2000 operators in all (`..` is not counted: concat.go compiles any chain in
//     linear time, and every `..` checks the size of the string it builds).
//   - JSON: see package luaval for how tables map to JSON (json.array, json.null).
package lua
