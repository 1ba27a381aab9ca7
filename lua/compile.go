package lua

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

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
