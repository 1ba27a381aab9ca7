package acpfake

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"
)

const timeout = 30 * time.Second

// client is a minimal ACP client: it records what the agent streams, answers permission
// requests with a fixed option, and keeps written files in memory.
type client struct {
	answer  sdk.PermissionOptionId // "" cancels
	hanging chan struct{}          // closed when the agent says it is hanging, if not nil

	mu      sync.Mutex
	updates []sdk.SessionUpdate
	files   map[string]string
	perms   []sdk.RequestPermissionRequest
}

func (c *client) SessionUpdate(_ context.Context, n sdk.SessionNotification) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, n.Update)
	if m := n.Update.AgentMessageChunk; m != nil && m.Content.Text != nil && strings.Contains(m.Content.Text.Text, "hanging") &&
		c.hanging != nil && !isClosed(c.hanging) {
		close(c.hanging)
	}
	return nil
}

func (c *client) RequestPermission(_ context.Context, p sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.perms = append(c.perms, p)
	c.mu.Unlock()
	if c.answer == "" {
		return sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{}}}, nil
	}
	return sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Selected: &sdk.RequestPermissionOutcomeSelected{OptionId: c.answer}}}, nil
}

func (c *client) ReadTextFile(_ context.Context, p sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.files[p.Path]
	if !ok {
		return sdk.ReadTextFileResponse{}, errors.New("no such file")
	}
	return sdk.ReadTextFileResponse{Content: s}, nil
}

func (c *client) WriteTextFile(_ context.Context, p sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.files == nil {
		c.files = map[string]string{}
	}
	c.files[p.Path] = p.Content
	return sdk.WriteTextFileResponse{}, nil
}

func (c *client) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalCreate)
}

func (c *client) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalKill)
}

func (c *client) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalOutput)
}

func (c *client) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalRelease)
}

func (c *client) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalWaitForExit)
}

// agentText is the agent message text streamed so far, and the user message text
// (replayed history).
func (c *client) texts() (agentText, userText string, chunks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var a, u strings.Builder
	for _, up := range c.updates {
		if m := up.AgentMessageChunk; m != nil && m.Content.Text != nil {
			a.WriteString(m.Content.Text.Text)
			chunks++
		}
		if m := up.UserMessageChunk; m != nil && m.Content.Text != nil {
			u.WriteString(m.Content.Text.Text)
		}
	}
	return a.String(), u.String(), chunks
}

// served is one in-process fake agent with a client connected to it.
type served struct {
	conn   *sdk.ClientSideConnection
	c      *client
	toFake io.Closer
	done   chan error
}

func serve(t *testing.T, opts Options, c *client) *served {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	s := &served{c: c, toFake: inW, done: make(chan error, 1)}
	go func() {
		err := Serve(context.Background(), inR, outW, opts)
		outW.Close()
		s.done <- err
	}()
	s.conn = newClient(c, inW, outR)
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-s.done:
		case <-time.After(timeout):
			t.Error("Serve did not return after stdin closed")
		}
	})
	return s
}

// newClient connects c, with its logger set before the first read (see gatedReader).
func newClient(c *client, w io.Writer, r io.Reader) *sdk.ClientSideConnection {
	gate := make(chan struct{})
	conn := sdk.NewClientSideConnection(c, w, &gatedReader{r: r, open: gate})
	conn.SetLogger(slog.New(slog.DiscardHandler))
	close(gate)
	return conn
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c
}

func (s *served) open(t *testing.T, cwd string) (sdk.InitializeResponse, sdk.NewSessionResponse) {
	t.Helper()
	init, err := s.conn.Initialize(ctx(t), sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber,
		ClientCapabilities: sdk.ClientCapabilities{Fs: sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}}})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.conn.NewSession(ctx(t), sdk.NewSessionRequest{Cwd: cwd, McpServers: []sdk.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	return init, sess
}

func (s *served) prompt(t *testing.T, sid sdk.SessionId, text string) sdk.PromptResponse {
	t.Helper()
	resp, err := s.conn.Prompt(ctx(t), sdk.PromptRequest{SessionId: sid, Prompt: []sdk.ContentBlock{sdk.TextBlock(text)}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestEchoAndResume(t *testing.T) {
	state, logPath := t.TempDir(), filepath.Join(t.TempDir(), "log.jsonl")
	opts := Options{LogPath: logPath, StateDir: state}
	first := serve(t, opts, &client{})
	init, sess := first.open(t, "/work")
	if !init.AgentCapabilities.LoadSession {
		t.Error("loadSession not advertised with a state directory")
	}
	if m := sess.Models; m == nil || m.CurrentModelId != "fake-small" || len(m.AvailableModels) != 2 {
		t.Errorf("models %+v", m)
	}
	if resp := first.prompt(t, sess.SessionId, "hello there"); resp.StopReason != sdk.StopReasonEndTurn {
		t.Errorf("stop reason %s", resp.StopReason)
	}
	text, _, chunks := first.c.texts()
	if text != "echo: hello there" || chunks != 3 {
		t.Errorf("reply %q in %d chunks", text, chunks)
	}

	second := serve(t, opts, &client{})
	if _, err := second.conn.Initialize(ctx(t), sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	if _, err := second.conn.LoadSession(ctx(t), sdk.LoadSessionRequest{SessionId: sess.SessionId, Cwd: "/work", McpServers: []sdk.McpServer{}}); err != nil {
		t.Fatal(err)
	}
	replayed, user, _ := second.c.texts()
	if replayed != "echo: hello there" || user != "hello there" {
		t.Errorf("replayed %q / %q", replayed, user)
	}
	if _, err := second.conn.UnstableSetSessionModel(ctx(t), sdk.UnstableSetSessionModelRequest{SessionId: sess.SessionId, ModelId: "fake-large"}); err != nil {
		t.Fatal(err)
	}
	second.c.mu.Lock()
	second.c.updates = nil
	second.c.mu.Unlock()
	second.prompt(t, sess.SessionId, "JSON please")
	text, _, _ = second.c.texts()
	want := "(turn 2 of session " + string(sess.SessionId) + ") Here is the JSON you asked for:\n```json\n" +
		`{"model":"fake-large","ok":true,"session":"` + string(sess.SessionId) + `","turn":2}` + "\n```\n"
	if text != want {
		t.Errorf("resumed reply %q, want %q", text, want)
	}

	entries, err := ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, e := range entries {
		methods = append(methods, e.Method)
	}
	wantMethods := []string{"initialize", "session/new", "session/prompt", "initialize", "session/load", "session/set_model", "session/prompt"}
	if !reflect.DeepEqual(methods, wantMethods) {
		t.Errorf("logged %v, want %v", methods, wantMethods)
	}
	if e := entries[6]; e.Turn != 2 || e.Model != "fake-large" || e.Prompt != "JSON please" {
		t.Errorf("second prompt entry %+v", e)
	}
}

func TestNoStateNoLoad(t *testing.T) {
	s := serve(t, Options{Models: []string{}}, &client{})
	init, sess := s.open(t, "/w")
	if init.AgentCapabilities.LoadSession || sess.Models != nil {
		t.Errorf("load %t, models %+v: want neither", init.AgentCapabilities.LoadSession, sess.Models)
	}
	if _, err := s.conn.LoadSession(ctx(t), sdk.LoadSessionRequest{SessionId: sess.SessionId, Cwd: "/w", McpServers: []sdk.McpServer{}}); err == nil {
		t.Error("session/load worked without a state directory")
	}
}

func TestDirectives(t *testing.T) {
	for _, tc := range []struct {
		answer  sdk.PermissionOptionId
		outcome string
		written bool
	}{
		{"allow", "allow_once", true},
		{"reject", "reject_once", false},
		{"", "cancelled", false},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "log.jsonl")
			c := &client{answer: tc.answer, files: map[string]string{"/w/in.txt": "inside"}}
			s := serve(t, Options{LogPath: logPath}, c)
			_, sess := s.open(t, "/w")
			s.prompt(t, sess.SessionId, "EDIT a.txt\nRUN go test ./...\nFETCH https://x.test\nREAD in.txt\nnot a directive: EDIT b.txt")
			c.mu.Lock()
			_, written := c.files["/w/a.txt"]
			perms := c.perms
			c.mu.Unlock()
			if written != tc.written {
				t.Errorf("a.txt written: %t", written)
			}
			var kinds []string
			for _, p := range perms {
				kinds = append(kinds, string(*p.ToolCall.Kind))
			}
			if !reflect.DeepEqual(kinds, []string{"edit", "execute", "fetch"}) {
				t.Errorf("permission kinds %v", kinds)
			}
			if raw, _ := perms[1].ToolCall.RawInput.(map[string]any); raw["command"] != "go test ./..." {
				t.Errorf("execute raw input %v", perms[1].ToolCall.RawInput)
			}
			text, _, _ := c.texts()
			if !strings.Contains(text, "read in.txt: inside\n") {
				t.Errorf("reply %q", text)
			}
			entries, err := ReadLog(logPath)
			if err != nil {
				t.Fatal(err)
			}
			var outcomes []string
			for _, e := range entries {
				if e.Method == "session/request_permission" {
					outcomes = append(outcomes, e.Outcome)
				}
			}
			if !reflect.DeepEqual(outcomes, []string{tc.outcome, tc.outcome, tc.outcome}) {
				t.Errorf("permission outcomes %v", outcomes)
			}
		})
	}
}

func TestHangUntilCancel(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "log.jsonl")
	c := &client{hanging: make(chan struct{})}
	s := serve(t, Options{LogPath: logPath}, c)
	_, sess := s.open(t, "/w")
	done := make(chan sdk.PromptResponse, 1)
	go func() {
		resp, _ := s.conn.Prompt(context.Background(), sdk.PromptRequest{SessionId: sess.SessionId, Prompt: []sdk.ContentBlock{sdk.TextBlock("HANG")}})
		done <- resp
	}()
	select {
	case <-c.hanging:
	case <-time.After(timeout):
		t.Fatal("the agent never started hanging")
	}
	if err := s.conn.Cancel(ctx(t), sdk.CancelNotification{SessionId: sess.SessionId}); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-done:
		if resp.StopReason != sdk.StopReasonCancelled {
			t.Errorf("stop reason %q", resp.StopReason)
		}
	case <-time.After(timeout):
		t.Fatal("HANG did not end on cancel")
	}
	entries, err := ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries[2:] {
		got = append(got, e.Method+":"+e.Outcome)
	}
	if !reflect.DeepEqual(got, []string{"session/prompt:", "session/cancel:", "session/prompt:cancelled"}) {
		t.Errorf("logged %v", got)
	}
}

func TestCrash(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	defer outW.Close()
	defer inW.Close()
	var stderr strings.Builder
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), inR, outW, Options{Stderr: &stderr}) }()
	conn := newClient(&client{}, inW, outR)
	if _, err := conn.Initialize(ctx(t), sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	sess, err := conn.NewSession(ctx(t), sdk.NewSessionRequest{Cwd: "/w", McpServers: []sdk.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	go conn.Prompt(context.Background(), sdk.PromptRequest{SessionId: sess.SessionId, Prompt: []sdk.ContentBlock{sdk.TextBlock("CRASH")}})
	select {
	case err := <-done:
		if !errors.Is(err, ErrCrash) || !strings.Contains(stderr.String(), "crashing on purpose") {
			t.Errorf("Serve = %v, stderr %q", err, stderr.String())
		}
	case <-time.After(timeout):
		t.Fatal("CRASH did not end Serve")
	}
}

func TestOptionsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want Options
	}{
		{map[string]string{}, Options{}},
		{map[string]string{EnvLog: "l", EnvState: "s", EnvModels: "a, b,"}, Options{LogPath: "l", StateDir: "s", Models: []string{"a", "b"}}},
		{map[string]string{EnvModels: "none"}, Options{Models: []string{}}},
	} {
		got := OptionsFromEnv(func(k string) string { return tc.env[k] })
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("OptionsFromEnv(%v) = %+v, want %+v", tc.env, got, tc.want)
		}
	}
}

func TestReadLogMissing(t *testing.T) {
	es, err := ReadLog(filepath.Join(t.TempDir(), "none.jsonl"))
	if err != nil || es != nil {
		t.Errorf("ReadLog(missing) = %v, %v", es, err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLog(bad); err == nil {
		t.Error("ReadLog(bad) gave no error")
	}
}
