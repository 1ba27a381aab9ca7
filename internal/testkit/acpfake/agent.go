package acpfake

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	sdk "github.com/coder/acp-go-sdk"
)

// The environment variables cmd/luft-fake-acp reads.
const (
	EnvLog    = "LUFT_FAKE_ACP_LOG"    // the ground-truth log file
	EnvState  = "LUFT_FAKE_ACP_STATE"  // the session directory; unset: no loadSession
	EnvModels = "LUFT_FAKE_ACP_MODELS" // comma-separated models offered; "none": no model selection
	// EnvOnReject is what the agent does when a permission is refused: "" goes on,
	// "cancel" ends the prompt with stopReason "cancelled" (as codex does), "quiet" ends
	// it at once with stopReason "end_turn" and no reply text (as opencode and Claude
	// Code do).
	EnvOnReject = "LUFT_FAKE_ACP_ON_REJECT"
)

// DefaultModels are the models offered when Options.Models is nil; the first is current.
var DefaultModels = []string{"fake-small", "fake-large"}

// EditContent is what an EDIT directive writes.
const EditContent = "edited by luft-fake-acp\n"

// ErrCrash is returned by Serve when a prompt said CRASH.
var ErrCrash = errors.New("crashed on purpose (CRASH in the prompt)")

// Options configure the fake agent.
type Options struct {
	LogPath  string    // "" keeps no log
	StateDir string    // where sessions are kept; "" disables session/load
	Models   []string  // nil: DefaultModels; empty: no model selection
	Stderr   io.Writer // where CRASH writes; nil discards
	OnReject string    // see EnvOnReject
}

// OptionsFromEnv reads EnvLog, EnvState and EnvModels through getenv.
func OptionsFromEnv(getenv func(string) string) Options {
	o := Options{LogPath: getenv(EnvLog), StateDir: getenv(EnvState), OnReject: getenv(EnvOnReject)}
	switch m := strings.TrimSpace(getenv(EnvModels)); m {
	case "":
	case "none":
		o.Models = []string{}
	default:
		for _, s := range strings.Split(m, ",") {
			if s = strings.TrimSpace(s); s != "" {
				o.Models = append(o.Models, s)
			}
		}
	}
	return o
}

// Entry is one line of the ground-truth log.
type Entry struct {
	PID     int    `json:"pid"`
	Method  string `json:"method"`
	Session string `json:"session,omitempty"`
	Prompt  string `json:"prompt,omitempty"`
	Tool    string `json:"tool,omitempty"` // the tool call's kind
	Title   string `json:"title,omitempty"`
	Path    string `json:"path,omitempty"`
	// Outcome: for session/request_permission the chosen option's kind (allow_once,
	// reject_once, ...) or "cancelled"; for fs requests "ok" or "error: ..."; for a
	// HANG prompt "cancelled" or "disconnected".
	Outcome string `json:"outcome,omitempty"`
	Model   string `json:"model,omitempty"`
	Turn    int    `json:"turn,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// ReadLog reads a ground-truth log; a missing file is an empty log.
func ReadLog(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Serve runs the fake agent on in and out until the client closes in (nil), a prompt says
// CRASH (ErrCrash) or ctx ends.
func Serve(ctx context.Context, in io.Reader, out io.Writer, opts Options) error {
	if opts.Models == nil {
		opts.Models = DefaultModels
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	a := &fakeAgent{
		opts: opts, pid: os.Getpid(),
		sessions: map[string]*state{}, cancels: map[string]chan struct{}{},
		ready: make(chan struct{}), crash: make(chan struct{}),
	}
	// The SDK starts reading before SetLogger can be called and logs from its reader
	// without synchronisation: hold the first read back until the logger is set.
	gate := make(chan struct{})
	conn := sdk.NewAgentSideConnection(a, out, &gatedReader{r: in, open: gate})
	conn.SetLogger(slog.New(slog.DiscardHandler))
	close(gate)
	a.conn = conn
	close(a.ready)
	select {
	case <-conn.Done():
		return nil
	case <-a.crash:
		return ErrCrash
	case <-ctx.Done():
		return ctx.Err()
	}
}

// state is one session, as kept in the state directory.
type state struct {
	ID    string `json:"id"`
	Cwd   string `json:"cwd"`
	Model string `json:"model"`
	Turns []turn `json:"turns"`
}

type turn struct {
	Prompt string `json:"prompt"`
	Reply  string `json:"reply"`
}

type fakeAgent struct {
	opts  Options
	pid   int
	ready chan struct{} // closed once conn is set
	conn  *sdk.AgentSideConnection
	crash chan struct{}

	mu       sync.Mutex
	sessions map[string]*state
	cancels  map[string]chan struct{} // closed by session/cancel
	logMu    sync.Mutex
}

var (
	_ sdk.Agent       = (*fakeAgent)(nil)
	_ sdk.AgentLoader = (*fakeAgent)(nil)
)

func (a *fakeAgent) connection() *sdk.AgentSideConnection {
	<-a.ready
	return a.conn
}

func (a *fakeAgent) log(e Entry) {
	if a.opts.LogPath == "" {
		return
	}
	e.PID = a.pid
	b, _ := json.Marshal(e)
	a.logMu.Lock()
	defer a.logMu.Unlock()
	f, err := os.OpenFile(a.opts.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	// One write per line: appends from several processes do not interleave.
	_, _ = f.Write(append(b, '\n'))
	_ = f.Close()
}

func (a *fakeAgent) Initialize(_ context.Context, p sdk.InitializeRequest) (sdk.InitializeResponse, error) {
	fs := p.ClientCapabilities.Fs
	a.log(Entry{Method: sdk.AgentMethodInitialize, Detail: fmt.Sprintf("protocol=%d read=%t write=%t terminal=%t",
		p.ProtocolVersion, fs.ReadTextFile, fs.WriteTextFile, p.ClientCapabilities.Terminal)})
	return sdk.InitializeResponse{
		ProtocolVersion:   sdk.ProtocolVersionNumber,
		AgentCapabilities: sdk.AgentCapabilities{LoadSession: a.opts.StateDir != ""},
		AgentInfo:         &sdk.Implementation{Name: "luft-fake-acp", Version: "1"},
		AuthMethods:       []sdk.AuthMethod{},
	}, nil
}

func (a *fakeAgent) Authenticate(context.Context, sdk.AuthenticateRequest) (sdk.AuthenticateResponse, error) {
	return sdk.AuthenticateResponse{}, nil
}

func (a *fakeAgent) NewSession(_ context.Context, p sdk.NewSessionRequest) (sdk.NewSessionResponse, error) {
	if !filepath.IsAbs(p.Cwd) {
		return sdk.NewSessionResponse{}, sdk.NewInvalidParams(map[string]any{"error": "cwd must be absolute: " + p.Cwd})
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	st := &state{ID: "fake-" + hex.EncodeToString(b[:]), Cwd: p.Cwd}
	if len(a.opts.Models) > 0 {
		st.Model = a.opts.Models[0]
	}
	if err := a.save(st); err != nil {
		return sdk.NewSessionResponse{}, err
	}
	a.log(Entry{Method: sdk.AgentMethodSessionNew, Session: st.ID, Detail: "cwd=" + p.Cwd})
	return sdk.NewSessionResponse{SessionId: sdk.SessionId(st.ID), Models: a.models(st)}, nil
}

var sessionIDPattern = regexp.MustCompile(`^fake-[0-9a-f]+$`)

func (a *fakeAgent) LoadSession(ctx context.Context, p sdk.LoadSessionRequest) (sdk.LoadSessionResponse, error) {
	sid := string(p.SessionId)
	if a.opts.StateDir == "" {
		return sdk.LoadSessionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionLoad)
	}
	st, err := a.loadState(sid)
	if err != nil {
		a.log(Entry{Method: sdk.AgentMethodSessionLoad, Session: sid, Outcome: "error: " + err.Error()})
		return sdk.LoadSessionResponse{}, sdk.NewInvalidParams(map[string]any{"error": err.Error()})
	}
	st.Cwd = p.Cwd
	a.log(Entry{Method: sdk.AgentMethodSessionLoad, Session: sid, Turn: len(st.Turns), Detail: "cwd=" + p.Cwd})
	for _, t := range st.Turns {
		if err := a.update(ctx, sid, sdk.UpdateUserMessageText(t.Prompt)); err != nil {
			return sdk.LoadSessionResponse{}, err
		}
		if err := a.update(ctx, sid, sdk.UpdateAgentMessageText(t.Reply)); err != nil {
			return sdk.LoadSessionResponse{}, err
		}
	}
	return sdk.LoadSessionResponse{Models: a.models(st)}, nil
}

func (a *fakeAgent) UnstableSetSessionModel(_ context.Context, p sdk.UnstableSetSessionModelRequest) (sdk.UnstableSetSessionModelResponse, error) {
	st, err := a.session(string(p.SessionId))
	if err != nil {
		return sdk.UnstableSetSessionModelResponse{}, err
	}
	if !slices.Contains(a.opts.Models, string(p.ModelId)) {
		return sdk.UnstableSetSessionModelResponse{}, sdk.NewInvalidParams(map[string]any{"error": "unknown model " + string(p.ModelId)})
	}
	a.mu.Lock()
	st.Model = string(p.ModelId)
	a.mu.Unlock()
	if err := a.save(st); err != nil {
		return sdk.UnstableSetSessionModelResponse{}, err
	}
	a.log(Entry{Method: sdk.AgentMethodSessionSetModel, Session: st.ID, Model: string(p.ModelId)})
	return sdk.UnstableSetSessionModelResponse{}, nil
}

func (a *fakeAgent) Cancel(_ context.Context, p sdk.CancelNotification) error {
	sid := string(p.SessionId)
	a.log(Entry{Method: sdk.AgentMethodSessionCancel, Session: sid})
	a.mu.Lock()
	if ch := a.cancelChan(sid); !isClosed(ch) {
		close(ch)
	}
	a.mu.Unlock()
	return nil
}

// cancelChan is the session's cancel signal; a.mu is held. A cancel that arrives before
// the prompt it is meant for has started waiting still counts.
func (a *fakeAgent) cancelChan(sid string) chan struct{} {
	ch, ok := a.cancels[sid]
	if !ok {
		ch = make(chan struct{})
		a.cancels[sid] = ch
	}
	return ch
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (a *fakeAgent) CloseSession(context.Context, sdk.CloseSessionRequest) (sdk.CloseSessionResponse, error) {
	return sdk.CloseSessionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionClose)
}

func (a *fakeAgent) ListSessions(context.Context, sdk.ListSessionsRequest) (sdk.ListSessionsResponse, error) {
	return sdk.ListSessionsResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionList)
}

func (a *fakeAgent) ResumeSession(context.Context, sdk.ResumeSessionRequest) (sdk.ResumeSessionResponse, error) {
	return sdk.ResumeSessionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionResume)
}

func (a *fakeAgent) SetSessionConfigOption(context.Context, sdk.SetSessionConfigOptionRequest) (sdk.SetSessionConfigOptionResponse, error) {
	return sdk.SetSessionConfigOptionResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionSetConfigOption)
}

func (a *fakeAgent) SetSessionMode(context.Context, sdk.SetSessionModeRequest) (sdk.SetSessionModeResponse, error) {
	return sdk.SetSessionModeResponse{}, sdk.NewMethodNotFound(sdk.AgentMethodSessionSetMode)
}

func (a *fakeAgent) models(st *state) *sdk.SessionModelState {
	if len(a.opts.Models) == 0 {
		return nil
	}
	m := &sdk.SessionModelState{CurrentModelId: sdk.ModelId(st.Model)}
	for _, id := range a.opts.Models {
		m.AvailableModels = append(m.AvailableModels, sdk.ModelInfo{ModelId: sdk.ModelId(id), Name: id})
	}
	return m
}

// session returns a session this process knows (created or loaded here).
func (a *fakeAgent) session(sid string) (*state, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.sessions[sid]
	if !ok {
		return nil, sdk.NewInvalidParams(map[string]any{"error": "unknown session " + sid})
	}
	return st, nil
}

func (a *fakeAgent) loadState(sid string) (*state, error) {
	if !sessionIDPattern.MatchString(sid) {
		return nil, fmt.Errorf("malformed session id %q", sid)
	}
	b, err := os.ReadFile(filepath.Join(a.opts.StateDir, sid+".json"))
	if err != nil {
		return nil, fmt.Errorf("unknown session %s: %w", sid, err)
	}
	st := &state{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.sessions[sid] = st
	a.mu.Unlock()
	return st, nil
}

// save records st in memory and, with a state directory, on disk.
func (a *fakeAgent) save(st *state) error {
	a.mu.Lock()
	a.sessions[st.ID] = st
	b, err := json.Marshal(st)
	a.mu.Unlock()
	if err != nil || a.opts.StateDir == "" {
		return err
	}
	tmp := filepath.Join(a.opts.StateDir, st.ID+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(a.opts.StateDir, st.ID+".json"))
}

func (a *fakeAgent) update(ctx context.Context, sid string, u sdk.SessionUpdate) error {
	return a.connection().SessionUpdate(ctx, sdk.SessionNotification{SessionId: sdk.SessionId(sid), Update: u})
}

// gatedReader holds back reads until open is closed.
type gatedReader struct {
	r    io.Reader
	open chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	<-g.open
	return g.r.Read(p)
}
