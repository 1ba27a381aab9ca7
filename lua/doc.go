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
// # Rules for script authors
//
//   - Globals: assert error ipairs next pairs pcall xpcall select tonumber tostring type
//     unpack rawequal rawget rawset setmetatable getmetatable, string (no dump; rep,
//     format, gsub capped; find/match/gmatch/gsub on an interruptible matcher), table,
//     math (no random/randomseed), json, args/_args, ctx,
//     luft.now/random/uuid and the primitives. There is no io, os, debug, package,
//     require, load*, dofile, collectgarbage, coroutine or print-to-terminal: print and
//     log emit log events.
//   - Determinism: a run can be re-executed, so anything that varies must come from the
//     host: use luft.now(), luft.random() and luft.uuid(), never a value from the
//     environment. pairs() visits keys in insertion order; tables luft builds (args,
//     decoded JSON, agent results) insert keys sorted, so their order is stable.
//     tostring(table) prints an address: do not build prompts from it.
//   - Branches talk through return values, not shared upvalues: their interleaving
//     depends on when results arrive.
//   - Every effect has a call key: the branch path plus a counter of effects issued in
//     that branch ("main/3", "main/2/par[4]/1", "main/5/item[2]/stage[1]/1",
//     "main/4/wf/2"), so the order in which calls finish never changes the keys.
//   - Limits: call depth, pcall nesting, string size, agent calls per run and (when set)
//     process memory. A limit violation ends the run with a message naming the limit and
//     the script position; pcall cannot catch it. Cancellation and timeouts interrupt
//     even a pure-Lua loop.
//   - Script shape, checked before parsing: at most 4 MiB, 200 levels of nesting
//     (brackets, blocks, functions, elseifs), and per expression 200 arithmetic operators
//     and concatenations and 2000 operators in all. Build long strings with table.concat.
//   - JSON: see package luaval for how tables map to JSON (json.array, json.null).
package lua
