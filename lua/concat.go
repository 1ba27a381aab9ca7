package lua

import (
	"strings"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
)

// concatGlobal is the global through which every `..` of a compiled script runs. It is
// not a valid Lua name, so no script can read, replace or shadow it.
const concatGlobal = "luft concat"

// gopher-lua's concat instruction joins its operands with no size check and no hook, so
// `s = s .. s` in a loop builds strings of gigabytes in single uninterruptible copies
// (16 GB of RSS before the memory watchdog could stop it). Every script luft compiles is
// therefore rewritten before code generation: each chain `a .. b .. c` becomes one call
// of concatGlobal with the same operands in the same order, and that function checks the
// size of the result before it builds it (MaxStringBytes), like string.rep and
// table.concat. Lua parses `..` right-associatively, so the chain is the Rhs spine; a
// parenthesised or left-nested concat stays a separate call, which keeps the grouping —
// and so the order of __concat metamethod calls — exactly as Lua has it.

// rewriteScript rewrites the chunk in place before code generation: every concat
// expression (above) and every table write that could grow a table's array part by a
// large gap (grow.go).
func rewriteScript(chunk []ast.Stmt) {
	w := scriptRewriter{}
	w.stmts(chunk)
}

type scriptRewriter struct{}

func (w scriptRewriter) stmts(list []ast.Stmt) {
	for i, s := range list {
		list[i] = w.stmt(s)
	}
}

func (w scriptRewriter) exprs(list []ast.Expr) {
	for i := range list {
		list[i] = w.expr(list[i])
	}
}

func (w scriptRewriter) stmt(s ast.Stmt) ast.Stmt {
	switch s := s.(type) {
	case *ast.AssignStmt:
		w.exprs(s.Lhs)
		w.exprs(s.Rhs)
		return guardAssign(s)
	case *ast.LocalAssignStmt:
		w.exprs(s.Exprs)
	case *ast.FuncCallStmt:
		s.Expr = w.expr(s.Expr)
	case *ast.DoBlockStmt:
		w.stmts(s.Stmts)
	case *ast.WhileStmt:
		s.Condition = w.expr(s.Condition)
		w.stmts(s.Stmts)
	case *ast.RepeatStmt:
		s.Condition = w.expr(s.Condition)
		w.stmts(s.Stmts)
	case *ast.IfStmt:
		s.Condition = w.expr(s.Condition)
		w.stmts(s.Then)
		w.stmts(s.Else)
	case *ast.NumberForStmt:
		s.Init = w.expr(s.Init)
		s.Limit = w.expr(s.Limit)
		if s.Step != nil {
			s.Step = w.expr(s.Step)
		}
		w.stmts(s.Stmts)
	case *ast.GenericForStmt:
		w.exprs(s.Exprs)
		w.stmts(s.Stmts)
	case *ast.FuncDefStmt:
		s.Func = w.expr(s.Func).(*ast.FunctionExpr)
	case *ast.ReturnStmt:
		w.exprs(s.Exprs)
	}
	return s
}

func (w scriptRewriter) expr(e ast.Expr) ast.Expr {
	switch e := e.(type) {
	case *ast.StringConcatOpExpr:
		var args []ast.Expr
		var cur ast.Expr = e
		for {
			c, ok := cur.(*ast.StringConcatOpExpr)
			if !ok {
				args = append(args, w.expr(cur))
				break
			}
			args = append(args, w.expr(c.Lhs))
			cur = c.Rhs
		}
		return concatCall(args, e.Line(), e.LastLine())
	case *ast.AttrGetExpr:
		e.Object = w.expr(e.Object)
		e.Key = w.expr(e.Key)
	case *ast.TableExpr:
		for _, f := range e.Fields {
			if f.Key != nil {
				f.Key = w.expr(f.Key)
			}
			f.Value = w.expr(f.Value)
		}
		guardFields(e)
	case *ast.FuncCallExpr:
		if e.Func != nil {
			e.Func = w.expr(e.Func)
		}
		if e.Receiver != nil {
			e.Receiver = w.expr(e.Receiver)
		}
		w.exprs(e.Args)
	case *ast.LogicalOpExpr:
		e.Lhs = w.expr(e.Lhs)
		e.Rhs = w.expr(e.Rhs)
	case *ast.RelationalOpExpr:
		e.Lhs = w.expr(e.Lhs)
		e.Rhs = w.expr(e.Rhs)
	case *ast.ArithmeticOpExpr:
		e.Lhs = w.expr(e.Lhs)
		e.Rhs = w.expr(e.Rhs)
	case *ast.UnaryMinusOpExpr:
		e.Expr = w.expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		e.Expr = w.expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		e.Expr = w.expr(e.Expr)
	case *ast.FunctionExpr:
		w.stmts(e.Stmts)
	}
	return e
}

// concatArgs is the most operands one concat call takes: a call needs a register per
// argument, and gopher-lua has about 250 (its stock compiler refused chains of 250). A
// longer chain becomes a balanced tree of calls, concatArgs operands at a level, so the
// registers in use grow with the logarithm of the chain's length. Operands are still
// evaluated left to right; only a __concat metamethod in a chain of more than concatArgs
// operands could tell that such a chain is joined in groups.
const concatArgs = 32

func concatCall(args []ast.Expr, line, lastLine int) ast.Expr {
	// An operand is one value: `"x" .. f()` and `"x" .. ...` use the first value only. As
	// the last argument of a call, a call or ... would pass all of its values on, so it is
	// adjusted to one, as the parser does for a parenthesised call.
	switch last := args[len(args)-1].(type) {
	case *ast.FuncCallExpr:
		last.AdjustRet = true
	case *ast.Comma3Expr:
		last.AdjustRet = true
	}
	for len(args) > concatArgs {
		var level []ast.Expr
		for len(args) > 0 {
			n := min(concatArgs, len(args))
			if n == 1 {
				level = append(level, args[0])
			} else {
				level = append(level, concatCall(args[:n:n], line, lastLine))
			}
			args = args[n:]
		}
		args = level
	}
	fn := &ast.IdentExpr{Value: concatGlobal}
	fn.SetLine(line)
	fn.SetLastLine(lastLine)
	call := &ast.FuncCallExpr{Func: fn, Args: args}
	call.SetLine(line)
	call.SetLastLine(lastLine)
	return call
}

// concatFn is concatGlobal: Lua's concat of its arguments (right to left, as the VM
// does it: runs of strings and numbers are joined at once, anything else goes through a
// __concat metamethod), with the size of every join checked before it is built.
func (v *vm) concatFn(L *glua.LState) int {
	n := L.GetTop()
	if n == 0 {
		L.Push(glua.LString(""))
		return 1
	}
	limit := int64(v.lim.MaxStringBytes)
	rhs := L.Get(n)
	for i := n - 1; i >= 1; {
		lhs := L.Get(i)
		if joinable(lhs) && joinable(rhs) {
			// The run of strings and numbers ending at rhs, converted once, right to left.
			parts := []string{glua.LVAsString(rhs)}
			size := int64(len(parts[0]))
			j := i
			for ; j >= 1 && joinable(L.Get(j)); j-- {
				parts = append(parts, glua.LVAsString(L.Get(j)))
				size += int64(len(parts[len(parts)-1]))
			}
			if size > limit {
				return v.raiseFatal(L, "string limit (%d bytes) exceeded: `..` would build %d bytes", limit, size)
			}
			var b strings.Builder
			b.Grow(int(size))
			for k := len(parts) - 1; k >= 0; k-- {
				b.WriteString(parts[k])
			}
			rhs = glua.LString(b.String())
			i = j
			continue
		}
		op := L.GetMetaField(lhs, "__concat")
		if op == glua.LNil {
			op = L.GetMetaField(rhs, "__concat")
		}
		if op.Type() != glua.LTFunction {
			bad := lhs
			if joinable(lhs) {
				bad = rhs
			}
			L.RaiseError("attempt to concatenate a %s value", bad.Type().String())
		}
		L.Push(op)
		L.Push(lhs)
		L.Push(rhs)
		L.Call(2, 1)
		rhs = L.Get(-1)
		L.Pop(1)
		i--
	}
	L.Push(rhs)
	return 1
}

func joinable(v glua.LValue) bool {
	switch v.(type) {
	case glua.LString, glua.LNumber:
		return true
	}
	return false
}
