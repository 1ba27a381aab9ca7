package lua

import (
	"bytes"
	"fmt"

	"github.com/yuin/gopher-lua/parse"
)

// Script shape limits, checked by Compile before gopher-lua parses a script.
//
// gopher-lua's parser and compiler recurse once per level of an expression or block, and
// some of that work is quadratic: constant folding re-walks every arithmetic operand, and each nested
// block or elseif re-walks the blocks inside it. A deep enough expression (a million
// `not`s, or f()()()… in a 2 MB file) overflows the goroutine stack, which is a fatal
// error that no recover can catch. The nesting limit is Lua 5.1's own (200 "C levels").
const (
	// MaxScriptBytes is the largest script Compile accepts.
	MaxScriptBytes = 4 << 20
	// MaxSyntaxDepth bounds nesting: brackets, table constructors, blocks (function, do,
	// then, repeat) and each elseif of one if statement.
	MaxSyntaxDepth = 200
	// MaxArithmeticOps bounds the arithmetic operators (+ - * / % ^, unary minus) of one
	// expression, parenthesised parts included: gopher-lua compiles them in time quadratic
	// in their number. Concatenations are not counted: luft rewrites each chain into a
	// balanced tree of calls (concat.go), which compiles in linear time, so a 300,000-`..`
	// chain that took minutes now compiles in well under a second.
	MaxArithmeticOps = 200
	// MaxExpressionOps bounds all operators of one expression: the arithmetic ones,
	// comparisons, and, or, not, #, field accesses, indexes and calls. Each is a frame
	// of gopher-lua's recursive compiler.
	MaxExpressionOps = 2000
)

// exprOps counts the operators of one expression.
type exprOps struct{ all, arith int }

func (o exprOps) plus(p exprOps) exprOps { return exprOps{o.all + p.all, o.arith + p.arith} }

// shapeFrame is one open bracket or block of the scan.
type shapeFrame struct {
	outer    exprOps // the enclosing expression's count when the frame opened
	grouping bool    // "(" around an expression: its operators belong to the enclosing one
	block    bool    // function, do, then, repeat: closed by end, until or elseif
	fn       bool    // a function body: the function is an operand of the enclosing expression
	weight   int     // nesting levels it stands for (a then block carries its if's elseifs)
}

// checkShape refuses a script larger than MaxScriptBytes, nested deeper than
// MaxSyntaxDepth or with an expression over MaxArithmeticOps or MaxExpressionOps, naming
// the file and line. It is one pass of gopher-lua's own lexer, linear in the script's
// size. A lexical error ends the scan without an error: the parser then reports it.
func checkShape(name string, src []byte) error {
	if len(src) > MaxScriptBytes {
		return &ScriptError{Kind: KindSyntax, Where: name, Msg: fmt.Sprintf(
			"script too large: %d bytes, over the limit of %d MiB; pass data with --args or read it in an agent call instead of writing it into the script",
			len(src), MaxScriptBytes>>20)}
	}
	sc := parse.NewScanner(bytes.NewReader(src), name)
	lx := &parse.Lexer{}
	var (
		stack   []shapeFrame
		ops     exprOps // operators of the expression being read
		operand bool    // the previous token ended an operand
		depth   int     // sum of the open frames' weights
		elseifs int     // levels carried from an elseif to the then that follows it
	)
	push := func(f shapeFrame, line int) error {
		f.weight = max(f.weight, 1)
		stack = append(stack, f)
		depth += f.weight
		ops, operand = exprOps{}, false
		if depth > MaxSyntaxDepth {
			return &ScriptError{Kind: KindSyntax, Where: fmt.Sprintf("%s:%d", name, line), Msg: fmt.Sprintf(
				"nesting too deep: more than %d levels of brackets, blocks, functions and elseifs; split the code into functions", MaxSyntaxDepth)}
		}
		return nil
	}
	pop := func() (shapeFrame, bool) {
		if len(stack) == 0 {
			return shapeFrame{}, false
		}
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		depth -= f.weight
		return f, true
	}
	for {
		tok, err := sc.Scan(lx)
		if err != nil || tok.Type == parse.EOF {
			return nil
		}
		lx.PrevTokenType = tok.Type
		line := tok.Pos.Line
		var add exprOps // what the token adds to the current expression
		switch tok.Type {
		case parse.TIdent, parse.TNumber, parse.T3Comma, parse.TNil, parse.TTrue, parse.TFalse:
			if operand {
				ops = exprOps{} // a new statement: `f() g()` needs no separator
			}
			operand = true
		case parse.TString:
			if operand {
				add.all = 1 // f"text" is a call
			}
			operand = true
		case parse.T2Comma:
			// Concatenation is rewritten into a balanced tree of calls before code
			// generation (concat.go), so a chain of any length compiles in linear time.
			operand = false
		case '+', '*', '/', '%', '^':
			add, operand = exprOps{1, 1}, false
		case '-':
			add, operand = exprOps{1, 1}, false // binary after an operand, unary before one
		case parse.TEqeq, parse.TNeq, '<', parse.TLte, '>', parse.TGte, parse.TAnd, parse.TOr,
			parse.TNot, '#', '.', ':':
			add, operand = exprOps{all: 1}, false
		case '(', '[', '{':
			call := operand // f(...), t[...], f{...}
			outer := ops
			if call {
				outer.all++
			}
			if err := checkOps(name, line, outer); err != nil {
				return err
			}
			if err := push(shapeFrame{outer: outer, grouping: tok.Type == '(' && !call}, line); err != nil {
				return err
			}
		case ')', ']', '}':
			if len(stack) > 0 && !stack[len(stack)-1].block {
				f, _ := pop()
				if f.grouping {
					ops = ops.plus(f.outer)
				} else {
					ops = f.outer
				}
				if err := checkOps(name, line, ops); err != nil {
					return err
				}
			}
			operand = true
		case parse.TFunction:
			if err := push(shapeFrame{outer: ops, block: true, fn: true}, line); err != nil {
				return err
			}
		case parse.TDo, parse.TRepeat:
			if err := push(shapeFrame{block: true}, line); err != nil {
				return err
			}
		case parse.TThen:
			if err := push(shapeFrame{block: true, weight: 1 + elseifs}, line); err != nil {
				return err
			}
			elseifs = 0
		case parse.TElseIf:
			// gopher-lua nests each elseif inside the previous one's else.
			if f, ok := pop(); ok {
				elseifs = f.weight
			}
			ops, operand = exprOps{}, false
		case parse.TEnd, parse.TUntil:
			f, _ := pop()
			ops, operand = exprOps{}, false
			if f.fn && tok.Type == parse.TEnd {
				ops, operand = f.outer, true
			}
		default: // local return if while for in else break goto = , ; ::
			ops, operand = exprOps{}, false
		}
		if add != (exprOps{}) {
			ops = ops.plus(add)
			if err := checkOps(name, line, ops); err != nil {
				return err
			}
		}
	}
}

// checkOps refuses an expression over MaxArithmeticOps or MaxExpressionOps.
func checkOps(name string, line int, o exprOps) error {
	what, limit := "", 0
	switch {
	case o.arith > MaxArithmeticOps:
		what, limit = "arithmetic operators", MaxArithmeticOps
	case o.all > MaxExpressionOps:
		what, limit = "operators, calls and field accesses", MaxExpressionOps
	default:
		return nil
	}
	return &ScriptError{Kind: KindSyntax, Where: fmt.Sprintf("%s:%d", name, line), Msg: fmt.Sprintf(
		"expression too complex: more than %d %s in one expression; split it into several statements with local variables (for many strings, collect them in a table and use table.concat)",
		limit, what)}
}
