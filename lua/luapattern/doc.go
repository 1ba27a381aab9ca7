// Package luapattern is Lua 5.1 pattern matching (string.find, match, gmatch, gsub) that
// can be stopped.
//
// It is gopher-lua's pm package (v1.1.2) with the same parser, instruction set and
// results, and one difference that matters to luft: gopher-lua's matcher backtracks
// exponentially on patterns such as "(.-)(.-)(.-)(.-)b" and is one uninterruptible Go
// call, so a run's cancellation, checked by the VM only between Lua instructions, cannot
// reach it. Here the matcher counts its steps, looks at a context every 4096 of them and
// gives up with a *StoppedError once the context is done; FindOpts.MaxSteps optionally
// bounds the work of one search (ErrTooComplex).
//
// Find is a drop-in for pm.Find with a context. Compile and Pattern.Matcher find matches
// one at a time, so string.gmatch and string.gsub need not collect every match first.
//
// Known differences from C Lua 5.1 that gopher-lua has, and this package keeps so that
// scripts behave as before: %f is not a frontier pattern (it matches a literal 'f'), '^'
// anchors a pattern in gmatch too, and matching recursion deeper than 1,000,000 levels fails
// with "pattern/input too complex". Captures nested more than 200 deep are refused, where
// pm would recurse until the goroutine stack overflows. Back-references follow Lua 5.1
// where pm reads stale positions (and may panic with an index out of range): one to a
// capture still open ("(a%1)") is the error "invalid capture index", and one to a
// position capture ("()%1") never matches.
//
// The port is one file, pattern.go, longer than the house's ~800 lines: it keeps the order
// and names of the file it derives from, so the two can be compared (see its header).
package luapattern
