package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/internal/testkit/mcpfake"
)

// The stdio fake is this test binary re-run: ChildCommand sets mcpfake.EnvStdio, and
// TestMain turns the process into the fake before any test runs. That needs no build
// step and no go toolchain, and it exercises Server.Env on the way.
func TestMain(m *testing.M) {
	mcpfake.ServeChildIfRequested()
	os.Exit(m.Run())
}

// testTimeout bounds a test's MCP exchanges so a broken fake fails the test instead of
// hanging it. Nothing waits for it to pass.
const testTimeout = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// fixture is an Upstream connected to one fake server named "fake", and the fake's
// ground-truth call log.
type fixture struct {
	up    *Upstream
	calls func(t *testing.T) []mcpfake.Call
}

type transportCase struct {
	name  string
	start func(t *testing.T) (Server, func(t *testing.T) []mcpfake.Call)
}

var transports = []transportCase{
	{"http", func(t *testing.T) (Server, func(*testing.T) []mcpfake.Call) {
		f := mcpfake.New()
		url, _ := f.StartHTTP(t)
		return Server{Name: "fake", URL: url}, func(*testing.T) []mcpfake.Call { return f.Calls() }
	}},
	{"stdio", func(t *testing.T) (Server, func(*testing.T) []mcpfake.Call) {
		logPath := filepath.Join(t.TempDir(), "calls.jsonl")
		cmd, args, env := mcpfake.ChildCommand(logPath)
		return Server{Name: "fake", Command: cmd, Args: args, Env: env}, func(t *testing.T) []mcpfake.Call {
			calls, err := mcpfake.ReadLog(logPath)
			if err != nil {
				t.Fatal(err)
			}
			return calls
		}
	}},
}

func open(t *testing.T, tc transportCase) fixture {
	t.Helper()
	s, calls := tc.start(t)
	up, err := Open(testCtx(t), []Server{s})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = up.Close() })
	return fixture{up, calls}
}

func toolNamed(t *testing.T, up *Upstream, name string) tools.Tool {
	t.Helper()
	for _, tl := range up.Tools() {
		if tl.Spec().Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

func TestOpenListsTools(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			fx := open(t, tc)
			var names []string
			destructive := map[string]bool{}
			for _, tl := range fx.up.Tools() {
				s := tl.Spec()
				names = append(names, s.Name)
				destructive[s.Name] = s.Destructive
				if s.Description == "" {
					t.Errorf("%s has no description", s.Name)
				}
			}
			// Seven tools, two to a page: all of them means the cursors were followed.
			want := []string{"fake__add", "fake__delete_record", "fake__env", "fake__fail", "fake__lookup", "fake__snapshot", "fake__wait"}
			if !slices.Equal(names, want) {
				t.Fatalf("tools = %v, want %v", names, want)
			}
			// Only delete_record says destructiveHint: true; lookup is read-only; add and
			// fail say nothing, which luft does not take as destructive.
			for name, d := range destructive {
				if d != (name == "fake__delete_record") {
					t.Errorf("%s: Destructive = %v", name, d)
				}
			}

			lookup := toolNamed(t, fx.up, "fake__lookup").Spec()
			wantParams := map[string]any{
				"type":       "object",
				"properties": map[string]any{"key": map[string]any{"type": "string", "description": "the key to look up"}},
				"required":   []any{"key"},
			}
			if !reflect.DeepEqual(lookup.Parameters, wantParams) {
				t.Errorf("lookup parameters = %v, want %v", lookup.Parameters, wantParams)
			}
			if lookup.Description != "Look up the value stored under a key." {
				t.Errorf("lookup description = %q", lookup.Description)
			}
			// Spec hands out copies: a caller's edit does not reach the tool.
			lookup.Parameters["type"] = "edited"
			if toolNamed(t, fx.up, "fake__lookup").Spec().Parameters["type"] != "object" {
				t.Error("editing a Spec's Parameters changed the tool")
			}
			fail := toolNamed(t, fx.up, "fake__fail").Spec()
			if !reflect.DeepEqual(fail.Parameters, map[string]any{"type": "object", "properties": map[string]any{}}) {
				t.Errorf("fail parameters = %v", fail.Parameters)
			}
		})
	}
}

func TestCall(t *testing.T) {
	type call struct {
		tool    string
		args    string
		want    string
		wantErr string // a *ToolError's message
		// sent are the arguments the server must have received (nil: not checked
		// beyond Tool, or no call reached it when reached is false).
		sent    map[string]any
		reached bool
	}
	calls := []call{
		{tool: "fake__lookup", args: `{"key": "alpha"}`, want: "value-of-alpha", sent: map[string]any{"key": "alpha"}, reached: true},
		{tool: "fake__add", args: `{"a": 2, "b": 3.5}`, want: "5.5", sent: map[string]any{"a": 2.0, "b": 3.5}, reached: true},
		{tool: "fake__delete_record", args: `{"id":"r-9"}`, want: "deleted record r-9", sent: map[string]any{"id": "r-9"}, reached: true},
		{tool: "fake__fail", args: ``, wantErr: mcpfake.FailMessage, sent: map[string]any{}, reached: true},
		{tool: "fake__fail", args: `null`, wantErr: mcpfake.FailMessage, sent: map[string]any{}, reached: true},
		{tool: "fake__add", args: `{"a":"two","b":1}`, wantErr: "add: a and b must be numbers", sent: map[string]any{"a": "two", "b": 1.0}, reached: true},
		{tool: "fake__snapshot", args: `{}`, sent: map[string]any{}, reached: true,
			want: "snapshot taken\n[image image/png, 68 bytes, not shown]\n[resource mem://notes/1]\nnote one\n[resource link mem://records/7: record 7]"},
	}
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			fx := open(t, tc)
			ctx := testCtx(t)
			for _, c := range calls {
				got, err := toolNamed(t, fx.up, c.tool).Call(ctx, json.RawMessage(c.args))
				if c.wantErr != "" {
					var te *ToolError
					if !errors.As(err, &te) || err.Error() != c.wantErr || te.Tool != c.tool {
						t.Errorf("%s(%s): err = %#v, want a *ToolError %q", c.tool, c.args, err, c.wantErr)
					}
					continue
				}
				if err != nil || got != c.want {
					t.Errorf("%s(%s) = %q, %v; want %q", c.tool, c.args, got, err, c.want)
				}
			}
			// The server's own log: the exact arguments, in order, under the server's
			// own tool names.
			log := fx.calls(t)
			var want []mcpfake.Call
			for _, c := range calls {
				if c.reached {
					want = append(want, mcpfake.Call{Tool: strings.TrimPrefix(c.tool, "fake__"), Args: c.sent})
				}
			}
			if len(log) != len(want) {
				t.Fatalf("server saw %d calls, want %d: %+v", len(log), len(want), log)
			}
			for i := range want {
				if log[i].Tool != want[i].Tool || !reflect.DeepEqual(log[i].Args, want[i].Args) {
					t.Errorf("server call %d = %s %v, want %s %v", i, log[i].Tool, log[i].Args, want[i].Tool, want[i].Args)
				}
			}
		})
	}
}

func TestCallPassesArgumentBytesThrough(t *testing.T) {
	fx := open(t, transports[0])
	// A float64 would turn this into 12345678901234567000.
	args := `{"key":"big","n":12345678901234567890}`
	if _, err := toolNamed(t, fx.up, "fake__lookup").Call(testCtx(t), json.RawMessage(args)); err != nil {
		t.Fatal(err)
	}
	log := fx.calls(t)
	if len(log) != 1 || string(log[0].Raw) != args {
		t.Errorf("server received %s, want %s", log[0].Raw, args)
	}
}

func TestCallRefusesBadArguments(t *testing.T) {
	fx := open(t, transports[0])
	tl := toolNamed(t, fx.up, "fake__lookup")
	for _, args := range []string{`{"key":`, `["key"]`, `"key"`, `42`} {
		_, err := tl.Call(testCtx(t), json.RawMessage(args))
		if err == nil || !strings.Contains(err.Error(), "tool fake__lookup") || !strings.Contains(err.Error(), "JSON") {
			t.Errorf("args %s: err = %v, want one naming the tool and JSON", args, err)
		}
	}
	if log := fx.calls(t); len(log) != 0 {
		t.Errorf("bad arguments reached the server: %+v", log)
	}
}

func TestCallHonoursContext(t *testing.T) {
	t.Run("http, cancelled while the server holds the call", func(t *testing.T) {
		f := mcpfake.New()
		url, _ := f.StartHTTP(t)
		up, err := Open(testCtx(t), []Server{{Name: "fake", URL: url}})
		if err != nil {
			t.Fatal(err)
		}
		defer up.Close()
		ctx, cancel := context.WithCancel(testCtx(t))
		done := make(chan error, 1)
		go func() {
			_, err := toolNamed(t, up, "fake__wait").Call(ctx, nil)
			done <- err
		}()
		select {
		case <-f.Waiting():
		case <-time.After(testTimeout):
			t.Fatal("wait{} never reached the server")
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "fake__wait") {
				t.Errorf("cancelled call: %v, want context.Canceled naming the tool", err)
			}
		case <-time.After(testTimeout):
			t.Fatal("cancelled call did not return")
		}
		if got, err := toolNamed(t, up, "fake__lookup").Call(testCtx(t), json.RawMessage(`{"key":"k"}`)); err != nil || got != "value-of-k" {
			t.Errorf("lookup after a cancelled call = %q, %v", got, err)
		}
	})
	t.Run("stdio, deadline while the server holds the call", func(t *testing.T) {
		// wait{} never answers by itself, so the outcome does not depend on when the
		// deadline falls: before the request is sent or while the server holds it.
		fx := open(t, transports[1])
		ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
		defer cancel()
		_, err := toolNamed(t, fx.up, "fake__wait").Call(ctx, nil)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call past its deadline: %v, want context.DeadlineExceeded", err)
		}
		if got, err := toolNamed(t, fx.up, "fake__lookup").Call(testCtx(t), json.RawMessage(`{"key":"k"}`)); err != nil || got != "value-of-k" {
			t.Errorf("lookup after a cancelled call = %q, %v", got, err)
		}
	})
	t.Run("already cancelled", func(t *testing.T) {
		fx := open(t, transports[0])
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := toolNamed(t, fx.up, "fake__lookup").Call(ctx, json.RawMessage(`{"key":"k"}`)); !errors.Is(err, context.Canceled) {
			t.Errorf("call with a cancelled context: %v, want context.Canceled", err)
		}
		if log := fx.calls(t); len(log) != 0 {
			t.Errorf("a call with a cancelled context reached the server: %+v", log)
		}
	})
}

func TestCloseStopsSubprocess(t *testing.T) {
	fx := open(t, transports[1])
	cmd := fx.up.conns[0].cmd
	if cmd == nil || cmd.Process == nil {
		t.Fatal("no subprocess recorded")
	}
	if err := fx.up.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// ProcessState is set once the process has been waited for: it has exited.
	if cmd.ProcessState == nil || !cmd.ProcessState.Exited() {
		t.Fatalf("subprocess %d still running after Close (state %v)", cmd.Process.Pid, cmd.ProcessState)
	}
	if err := fx.up.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	assertClosedError(t, fx.up)
}

func TestCallWhenServerIsGone(t *testing.T) {
	f := mcpfake.New()
	url, stop := f.StartHTTP(t)
	up, err := Open(testCtx(t), []Server{{Name: "fake", URL: url}})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	stop()
	_, err = toolNamed(t, up, "fake__lookup").Call(testCtx(t), json.RawMessage(`{"key":"k"}`))
	t.Log(err)
	var te *ToolError
	if err == nil || errors.As(err, &te) || !strings.Contains(err.Error(), `mcp server "fake"`) || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("call to a stopped server: %v, want a transport error naming the server", err)
	}
}

func TestOpenErrors(t *testing.T) {
	// An address that refuses connections: a fake that has been stopped.
	deadURL, stop := mcpfake.New().StartHTTP(t)
	stop()
	// An address that accepts connections and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The test binary without mcpfake.EnvStdio runs no tests and exits: a command that
	// is not an MCP server.
	self, _, _ := mcpfake.ChildCommand("")

	cases := []struct {
		name    string
		servers []Server
		ctx     func(context.Context) (context.Context, context.CancelFunc)
		want    []string // substrings of the error
	}{
		{"command not found", []Server{{Name: "ghost", Command: "luft-no-such-mcp-server"}},
			nil, []string{`mcp server "ghost"`, `command "luft-no-such-mcp-server" not found`, "[mcp_servers.ghost]"}},
		{"command is not an MCP server", []Server{{Name: "mute", Command: self, Args: []string{"-test.run=^$"},
			Env: map[string]string{"GORACE": "atexit_sleep_ms=0"}}},
			nil, []string{`mcp server "mute"`, "initialize failed", "exited", "[mcp_servers.mute]"}},
		{"url refuses connections", []Server{{Name: "gone", URL: deadURL}},
			nil, []string{`mcp server "gone"`, deadURL, "refused", "check url in [mcp_servers.gone]"}},
		{"url never answers", []Server{{Name: "silent", URL: "http://" + silent.Addr().String() + "/mcp"}},
			func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 200*time.Millisecond)
			},
			[]string{`mcp server "silent"`, "no answer in time", "[mcp_servers.silent]"}},
		{"every failure is reported", []Server{{Name: "a", Command: "luft-no-such-a"}, {Name: "b", URL: deadURL}},
			nil, []string{`mcp server "a"`, `mcp server "b"`}},
		{"no name", []Server{{Command: "x"}}, nil, []string{"mcp server #1: no name"}},
		{"bad name", []Server{{Name: "my.server", Command: "x"}}, nil, []string{`mcp server "my.server": bad name`}},
		{"double underscore in name", []Server{{Name: "a__b", Command: "x"}}, nil, []string{`"a__b": bad name`}},
		{"long name", []Server{{Name: strings.Repeat("s", 49), Command: "x"}}, nil, []string{"bad name", "at most 48 bytes"}},
		{"duplicate", []Server{{Name: "s", Command: "x"}, {Name: "s", URL: "http://127.0.0.1:1/"}}, nil, []string{`"s": configured twice`}},
		{"neither command nor url", []Server{{Name: "s"}}, nil, []string{"neither command nor url"}},
		{"both command and url", []Server{{Name: "s", Command: "x", URL: "http://127.0.0.1:1/"}}, nil, []string{"both command and url"}},
		{"url not http", []Server{{Name: "s", URL: "ftp://example.com/"}}, nil, []string{`url "ftp://example.com/" is not an http://`}},
		{"url with a port and no host", []Server{{Name: "s", URL: "http://:8080/"}}, nil, []string{`url "http://:8080/" is not an http://`}},
		{"args with url", []Server{{Name: "s", URL: "http://127.0.0.1:1/", Args: []string{"x"}}}, nil, []string{"args, env and pass_env apply to a command"}},
		{"bad env name", []Server{{Name: "s", Command: "x", Env: map[string]string{"A=B": "c"}}}, nil, []string{`env name "A=B"`}},
		{"bad pass_env name", []Server{{Name: "s", Command: "x", PassEnv: []string{"A B"}}}, nil, []string{`pass_env`, `"A B" is not an environment variable name`}},
		{"pass_env with url", []Server{{Name: "s", URL: "http://127.0.0.1:1/", PassEnv: []string{"TOKEN"}}}, nil, []string{"pass_env apply to a command"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			if tc.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tc.ctx(ctx)
				defer cancel()
			}
			up, err := Open(ctx, tc.servers)
			if err == nil {
				_ = up.Close()
				t.Fatal("Open succeeded")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestOpenHonoursCancelledContext(t *testing.T) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := tc.start(t)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			up, err := Open(ctx, []Server{s})
			if err == nil {
				_ = up.Close()
				t.Fatal("Open succeeded with a cancelled context")
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
		})
	}
}

func TestOpenTwoServers(t *testing.T) {
	a, b := mcpfake.New(), mcpfake.New()
	urlA, _ := a.StartHTTP(t)
	urlB, _ := b.StartHTTP(t)
	up, err := Open(testCtx(t), []Server{{Name: "one", URL: urlA}, {Name: "two", URL: urlB}})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	if n := len(up.Tools()); n != 14 {
		t.Fatalf("%d tools, want 14", n)
	}
	if _, err := toolNamed(t, up, "two__lookup").Call(testCtx(t), json.RawMessage(`{"key":"k"}`)); err != nil {
		t.Fatal(err)
	}
	if len(a.Calls()) != 0 || len(b.Calls()) != 1 {
		t.Errorf("calls: one got %d, two got %d; want 0 and 1", len(a.Calls()), len(b.Calls()))
	}
}

func TestOpenNoServers(t *testing.T) {
	up, err := Open(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(up.Tools()) != 0 {
		t.Errorf("tools = %v", up.Tools())
	}
	if err := up.Close(); err != nil {
		t.Error(err)
	}
}

func TestCallAfterCloseHTTP(t *testing.T) {
	fx := open(t, transports[0])
	if err := fx.up.Close(); err != nil {
		t.Fatal(err)
	}
	assertClosedError(t, fx.up)
}

func assertClosedError(t *testing.T, up *Upstream) {
	t.Helper()
	_, err := toolNamed(t, up, "fake__lookup").Call(testCtx(t), json.RawMessage(`{"key":"k"}`))
	if err == nil || !strings.Contains(err.Error(), `mcp server "fake"`) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("call after Close: %v, want an error naming the server and saying it is closed", err)
	}
}

func TestCallWhenSubprocessDied(t *testing.T) {
	fx := open(t, transports[1])
	if err := fx.up.conns[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Whether the request meets a broken pipe or the end of the server's stdout, the
	// call fails with a transport error naming the server, not a tool result.
	_, err := toolNamed(t, fx.up, "fake__lookup").Call(testCtx(t), json.RawMessage(`{"key":"k"}`))
	t.Log(err)
	var te *ToolError
	if err == nil || errors.As(err, &te) || !strings.Contains(err.Error(), `mcp server "fake"`) {
		t.Errorf("call to a dead server: %v, want a transport error naming the server", err)
	}
	if err := fx.up.Close(); err != nil {
		t.Errorf("Close after the subprocess died: %v", err)
	}
}

// TestServerEnvironment: a stdio server gets the base variables and its env table, and
// none of luft's secrets, so a tool that prints its environment hands the model no key.
func TestServerEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-luft-secret")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-luft-secret")
	t.Setenv("GITHUB_TOKEN", "ghp-luft-secret")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-luft-secret")
	t.Setenv("LUFT_TOKEN", "luft-token-secret")
	t.Setenv("FAKE_SERVER_TOKEN", "passed-by-name")
	t.Setenv("FAKE_SERVERLESS", "not-a-prefix-match") // FAKE_SERVER_* does not name it
	cmd, args, env := mcpfake.ChildCommand("")
	env["SERVER_TOKEN"] = "configured-for-this-server"
	up, err := Open(testCtx(t), []Server{{Name: "fake", Command: cmd, Args: args, Env: env, PassEnv: []string{"FAKE_SERVER_*"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	out, err := toolNamed(t, up, "fake__env").Call(testCtx(t), json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"luft-secret", "luft-token-secret", "not-a-prefix-match", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN", "LUFT_TOKEN"} {
		if strings.Contains(out, secret) {
			t.Errorf("the server's environment holds %s:\n%s", secret, out)
		}
	}
	for _, want := range []string{"SERVER_TOKEN=configured-for-this-server", "FAKE_SERVER_TOKEN=passed-by-name", "PATH="} {
		if !strings.Contains(out, want) {
			t.Errorf("the server's environment lacks %s:\n%s", want, out)
		}
	}
}
