package acp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	buildinfo "github.com/luft-run/luft/internal/version"
)

// DefaultIdleTimeout ends a call whose agent has sent nothing for this long.
const DefaultIdleTimeout = 5 * time.Minute

// ErrIdleTimeout is wrapped by the error of a call that ended because the agent went
// quiet for longer than Config.IdleTimeout.
var ErrIdleTimeout = errors.New("idle timeout")

// cancelGrace is how long a cancelled agent has to end its prompt, and exitGrace how long
// an agent whose stdin is closed has to exit, before it is killed.
const (
	cancelGrace = 3 * time.Second
	exitGrace   = 2 * time.Second
)

// Config configures one acp backend.
type Config struct {
	// ID is the registry id, e.g. "acp:claude"; default "acp:" + the command's base name.
	ID string
	// Command and Args start the agent, which speaks ACP on its stdin and stdout.
	Command string
	Args    []string
	// Env is the agent's whole environment. nil gives it AgentEnv: luft's environment
	// filtered to tools.BaseEnv, AgentBaseEnv, Credentials and PassEnv.
	Env []string
	// Credentials name the variables the agent logs in with (a built-in agent's are
	// preset, see the package doc); a name ending in "*" is a prefix.
	Credentials []string
	// PassEnv names further variables of luft's environment the agent gets
	// ([backends.NAME] env).
	PassEnv []string
	// Dir is the workspace: the agent's working directory and session cwd, and the only
	// tree its edits and file requests may touch. Default the current directory.
	Dir string
	// Model is the model selected when a request names none; "" leaves the agent's own.
	Model string
	// IdleTimeout ends a call after this long without any message from the agent;
	// 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Approval answers permission requests that no more specific rule decides (see the
	// package doc); "" behaves as "ask".
	Approval tools.Approval
	// AllowCommands are the command prefixes, matched word by word, that an execute
	// tool call may start with.
	AllowCommands []string
	// AllowEdits lets the agent edit, delete and move files inside the workspace without
	// Approval "allow".
	AllowEdits bool
	// Install says how to install the agent; it is shown when Command is not found.
	Install string
	// Protected are files and folders the agent may not write even inside the workspace:
	// luft's own config and state dir, whose change would change what luft allows or
	// replays.
	Protected []string
}

// builtins are the agents luft knows by name (see the package doc).
var builtins = map[string]Config{
	"acp:claude": {Command: "claude-code-acp", Install: "npm i -g @zed-industries/claude-code-acp",
		Credentials: []string{"ANTHROPIC_*", "CLAUDE_*"}},
	"acp:codex": {Command: "codex-acp", Install: "npm i -g @zed-industries/codex-acp",
		Credentials: []string{"OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_*"}},
	"acp:opencode": {Command: "opencode", Args: []string{"acp"}, Install: "npm i -g opencode-ai",
		Credentials: []string{"OPENCODE_*"}},
	"acp:gemini": {Command: "gemini", Args: []string{"--acp"}, Install: "npm i -g @google/gemini-cli",
		Credentials: []string{"GEMINI_*", "GOOGLE_API_KEY", "GOOGLE_CLOUD_*", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_GENAI_USE_VERTEXAI"}},
}

// AgentBaseEnv are the variables every coding agent gets besides tools.BaseEnv: where
// its own config and caches live, and how it reaches the network (proxies, CA
// certificates).
var AgentBaseEnv = []string{"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR"}

// AgentEnv is the environment an agent with cfg gets when cfg.Env is nil, from environ
// (luft's, as os.Environ gives it).
func AgentEnv(cfg Config, environ []string) []string {
	pass := slices.Concat(AgentBaseEnv, cfg.Credentials, cfg.PassEnv)
	return tools.ChildEnv(environ, pass, nil)
}

// BuiltinNames lists the known agents' ids, sorted.
func BuiltinNames() []string {
	return slices.Sorted(maps.Keys(builtins))
}

// Builtin returns the configuration of a known agent, by id ("acp:claude") or short name
// ("claude"), with ID and Command set and everything else left for the caller.
func Builtin(name string) (Config, bool) {
	id := name
	if !strings.HasPrefix(id, "acp:") {
		id = "acp:" + id
	}
	c, ok := builtins[id]
	if !ok {
		return Config{}, false
	}
	c.ID = id
	c.Args = slices.Clone(c.Args)
	c.Credentials = slices.Clone(c.Credentials)
	return c, true
}

// Backend is an acp:* backend. It is safe for concurrent use: every call runs its own
// agent process.
type Backend struct {
	cfg    Config
	ws     string      // the workspace, absolute and clean
	realWS string      // the workspace with symlinks resolved
	guard  tools.Guard // what the agent may write: Config.Protected and tools.ProtectedNames
	allow  [][]string  // Config.AllowCommands, split into words (tools.ParseAllowList)
}

// New checks cfg and returns its backend. The workspace must exist.
func New(cfg Config) (*Backend, error) {
	cfg.Command = strings.TrimSpace(cfg.Command)
	if cfg.ID == "" && cfg.Command != "" {
		cfg.ID = "acp:" + filepath.Base(cfg.Command)
	}
	if cfg.Command == "" {
		return nil, fmt.Errorf("acp backend %q: no command: set command in its [backends] table, or use a built-in agent (acp:claude, acp:codex, acp:opencode, acp:gemini)", cfg.ID)
	}
	switch {
	case cfg.IdleTimeout < 0:
		return nil, fmt.Errorf("acp backend %q: idle timeout %s is negative", cfg.ID, cfg.IdleTimeout)
	case cfg.IdleTimeout == 0:
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	switch cfg.Approval {
	case "", tools.ApprovalAllow, tools.ApprovalDeny, tools.ApprovalAsk:
	default:
		return nil, fmt.Errorf("acp backend %q: approval %q: use allow, deny or ask", cfg.ID, cfg.Approval)
	}
	allow, err := tools.ParseAllowList(cfg.AllowCommands)
	if err != nil {
		return nil, fmt.Errorf("acp backend %q: %w", cfg.ID, err)
	}
	if err := tools.CheckEnvNames(fmt.Sprintf("acp backend %q: env", cfg.ID), cfg.PassEnv); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		cfg.Dir = "."
	}
	ws, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("acp backend %q: workspace %s: %w", cfg.ID, cfg.Dir, err)
	}
	if fi, err := os.Stat(ws); err != nil {
		return nil, fmt.Errorf("acp backend %q: workspace: %w", cfg.ID, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("acp backend %q: workspace %s is not a directory", cfg.ID, ws)
	}
	realWS, err := filepath.EvalSymlinks(ws)
	if err != nil {
		return nil, fmt.Errorf("acp backend %q: workspace: %w", cfg.ID, err)
	}
	cfg.Dir = ws
	b := &Backend{cfg: cfg, ws: ws, realWS: realWS, allow: allow, guard: tools.NewGuard(ws, cfg.Protected)}
	return b, nil
}

// ID returns the registry id.
func (b *Backend) ID() string { return b.cfg.ID }

// UsesWorkspace reports that the agent works in this machine's workspace: a run that
// calls it needs that workspace (the runtime records it, and the run moves only to a node
// that serves it).
func (b *Backend) UsesWorkspace() bool { return true }

// Run sends req to a fresh agent process as one prompt, admitted as one turn.
func (b *Backend) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	if err := ctx.Err(); err != nil {
		return agent.Result{}, err
	}
	blocks, sent, err := promptBlocks(req)
	if err != nil {
		return agent.Result{}, fmt.Errorf("acp backend %q: %w", b.cfg.ID, err)
	}
	var res agent.Result
	err = call.Do(ctx, adapters.TurnCost{Input: adapters.EstimateTokens(sent), MaxOutput: req.MaxTokens},
		func(ctx context.Context) adapters.TurnReport {
			var err error
			res, err = b.attempt(ctx, req, blocks, sent, call)
			return adapters.TurnReport{Usage: res.Usage, Err: err}
		})
	return res, err
}

// attempt runs the agent once: spawn, converse on another goroutine, and watch for the
// end of ctx, the idle timeout and an approval refusal meanwhile.
func (b *Backend) attempt(ctx context.Context, req agent.Request, blocks []sdk.ContentBlock, sent string, call adapters.Call) (agent.Result, error) {
	if err := ctx.Err(); err != nil {
		return agent.Result{}, fmt.Errorf("acp backend %q: %w", b.cfg.ID, err)
	}
	root, err := os.OpenRoot(b.ws)
	if err != nil {
		return agent.Result{}, fmt.Errorf("acp backend %q: workspace: %w", b.cfg.ID, err)
	}
	defer root.Close()
	p, err := b.spawn()
	if err != nil {
		return agent.Result{}, err
	}
	defer p.stop()
	s := newSession(b, root, call)
	defer s.close() // runs before p.stop: nothing is reported once Run has returned
	stdout := &gatedReader{r: p.stdout, open: make(chan struct{})}
	conn := sdk.NewClientSideConnection(s, p.stdin, stdout)
	conn.SetLogger(slog.New(slog.DiscardHandler))
	close(stdout.open)

	type outcome struct {
		res agent.Result
		err error
	}
	done := make(chan outcome, 1)
	// The conversation outlives ctx on purpose: when ctx ends, the agent is first asked
	// to cancel (session/cancel) and given a moment to answer; stop ends it for good.
	convCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		r, err := s.converse(convCtx, conn, req, blocks, sent)
		done <- outcome{r, err}
	}()
	abort := func() {
		if sid, prompting := s.prompting(); prompting {
			_ = conn.Cancel(context.Background(), sdk.CancelNotification{SessionId: sdk.SessionId(sid)})
			t := time.NewTimer(cancelGrace)
			defer t.Stop()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
		stop()
		<-done
	}

	idle := time.NewTimer(b.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		select {
		case o := <-done:
			// A refusal under "ask" fails the call even when the agent went on and
			// finished before the cancel reached it.
			if err := s.approvalError(); err != nil {
				return agent.Result{}, err
			}
			if o.err != nil {
				return o.res, p.explain(o.err, conn.Done())
			}
			return s.refusedOutcome(o.res), nil
		case <-s.activity:
			idle.Reset(b.cfg.IdleTimeout)
		case <-idle.C:
			abort()
			err := fmt.Errorf("acp backend %q: %s sent nothing for %s (%w), so the call was cancelled; raise the idle timeout if the agent needs longer between messages",
				b.cfg.ID, b.cfg.Command, b.cfg.IdleTimeout, ErrIdleTimeout)
			sid, _ := s.prompting()
			return agent.Result{Status: agent.StatusTimedOut, Error: err.Error(), SessionID: sid, Attempts: 1, Backend: b.cfg.ID}, err
		case <-ctx.Done():
			abort()
			return agent.Result{}, fmt.Errorf("acp backend %q: %w", b.cfg.ID, ctx.Err())
		case <-s.refused:
			abort()
			return agent.Result{}, s.approvalError()
		}
	}
}

// converse is one ACP conversation: initialize, open or load the session, pick the
// model, prompt.
func (s *session) converse(ctx context.Context, conn *sdk.ClientSideConnection, req agent.Request, blocks []sdk.ContentBlock, sent string) (agent.Result, error) {
	id := s.b.cfg.ID
	init, err := conn.Initialize(ctx, sdk.InitializeRequest{
		ProtocolVersion: sdk.ProtocolVersionNumber,
		ClientCapabilities: sdk.ClientCapabilities{
			Fs: sdk.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true},
		},
		ClientInfo: &sdk.Implementation{Name: "luft", Version: version()},
	})
	if err != nil {
		return agent.Result{}, fmt.Errorf("acp backend %q: initialize: %w", id, err)
	}
	if init.ProtocolVersion != sdk.ProtocolVersionNumber {
		return agent.Result{}, fmt.Errorf("acp backend %q: %s speaks ACP version %d, luft speaks version %d; update the agent",
			id, s.b.cfg.Command, init.ProtocolVersion, sdk.ProtocolVersionNumber)
	}

	var (
		sid     = req.SessionID
		models  *sdk.SessionModelState
		options []sdk.SessionConfigOption
	)
	if sid != "" {
		if !init.AgentCapabilities.LoadSession {
			return agent.Result{}, fmt.Errorf("acp backend %q: agent %s cannot resume sessions (it does not advertise loadSession), so session_id %q cannot be continued; drop session_id or use an agent that can",
				id, s.b.cfg.Command, sid)
		}
		s.setSession(sid)
		resp, err := conn.LoadSession(ctx, sdk.LoadSessionRequest{SessionId: sdk.SessionId(sid), Cwd: s.b.ws, McpServers: []sdk.McpServer{}})
		if err != nil {
			return agent.Result{}, s.sessionErr("session/load "+sid, err, init)
		}
		models, options = resp.Models, resp.ConfigOptions
	} else {
		resp, err := conn.NewSession(ctx, sdk.NewSessionRequest{Cwd: s.b.ws, McpServers: []sdk.McpServer{}})
		if err != nil {
			return agent.Result{}, s.sessionErr("session/new", err, init)
		}
		sid = string(resp.SessionId)
		if sid == "" {
			return agent.Result{}, fmt.Errorf("acp backend %q: session/new: the agent returned no session id", id)
		}
		s.setSession(sid)
		models, options = resp.Models, resp.ConfigOptions
	}
	model, err := s.selectModel(ctx, conn, sid, req.Model, models, options)
	if err != nil {
		return agent.Result{SessionID: sid}, err
	}

	s.startPrompt()
	resp, err := conn.Prompt(ctx, sdk.PromptRequest{SessionId: sdk.SessionId(sid), Prompt: blocks})
	text := s.endPrompt()
	if err == nil {
		s.mu.Lock()
		s.stop = resp.StopReason
		s.mu.Unlock()
	}
	if err != nil {
		return agent.Result{SessionID: sid}, fmt.Errorf("acp backend %q: session/prompt: %w", id, err)
	}
	res := agent.Result{
		Status: agent.StatusOK, Text: text, Output: text, SessionID: sid, Attempts: 1, Backend: id, Model: model,
		Usage: agent.Usage{Input: adapters.EstimateTokens(sent), Output: adapters.EstimateTokens(text)},
	}
	if u := resp.Usage; u != nil && u.InputTokens+u.OutputTokens > 0 {
		res.Usage = agent.Usage{Input: u.InputTokens, Output: u.OutputTokens}
		if u.CachedReadTokens != nil {
			res.Usage.Cached = *u.CachedReadTokens
		}
	}
	if resp.StopReason != sdk.StopReasonEndTurn {
		res.Status = agent.StatusError
		res.Error = fmt.Sprintf("acp backend %q: the agent stopped before finishing its turn (stop reason %q)", id, resp.StopReason)
		return res, nil
	}
	if req.Schema != nil {
		if v, ok := extractJSON(text); ok {
			res.Output = v
		}
	}
	return res, nil
}

// sessionErr explains a failed session/new or session/load, pointing at the agent's own
// login when it asks for authentication.
func (s *session) sessionErr(op string, err error, init sdk.InitializeResponse) error {
	var re *sdk.RequestError
	if errors.As(err, &re) && re.Code == -32000 {
		var names []string
		for _, m := range init.AuthMethods {
			switch {
			case m.Agent != nil:
				names = append(names, m.Agent.Name)
			case m.Terminal != nil:
				names = append(names, m.Terminal.Name)
			case m.EnvVar != nil:
				names = append(names, m.EnvVar.Name)
			}
		}
		hint := ""
		if len(names) > 0 {
			hint = " (it offers: " + strings.Join(names, ", ") + ")"
		}
		return fmt.Errorf("acp backend %q: %s: %s needs you to log in%s; log in once with the agent's own CLI, then run again: %w",
			s.b.cfg.ID, op, s.b.cfg.Command, hint, err)
	}
	return fmt.Errorf("acp backend %q: %s: %w", s.b.cfg.ID, op, err)
}

// selectModel switches the session to the wanted model (the request's, else the
// configured default) and returns the session's model. An agent that cannot switch, or
// does not offer that model, fails the call: running another model silently would be worse.
func (s *session) selectModel(ctx context.Context, conn *sdk.ClientSideConnection, sid, want string, models *sdk.SessionModelState, options []sdk.SessionConfigOption) (string, error) {
	id := s.b.cfg.ID
	if want == "" {
		want = s.b.cfg.Model
	}
	if models != nil {
		current := string(models.CurrentModelId)
		if want == "" || want == current {
			return current, nil
		}
		var names []string
		for _, m := range models.AvailableModels {
			if string(m.ModelId) == want || strings.EqualFold(m.Name, want) {
				if _, err := conn.UnstableSetSessionModel(ctx, sdk.UnstableSetSessionModelRequest{
					SessionId: sdk.SessionId(sid), ModelId: sdk.UnstableModelId(m.ModelId),
				}); err != nil {
					return "", fmt.Errorf("acp backend %q: session/set_model %s: %w", id, m.ModelId, err)
				}
				return string(m.ModelId), nil
			}
			names = append(names, string(m.ModelId))
		}
		return "", fmt.Errorf("acp backend %q: the agent offers no model %q (it offers: %s)", id, want, strings.Join(names, ", "))
	}
	for _, o := range options {
		sel := o.Select
		if sel == nil || sel.Category == nil || *sel.Category != sdk.SessionConfigOptionCategoryModel {
			continue
		}
		if want == "" || string(sel.CurrentValue) == want {
			return string(sel.CurrentValue), nil
		}
		var values []sdk.SessionConfigSelectOption
		if u := sel.Options.Ungrouped; u != nil {
			values = *u
		}
		if g := sel.Options.Grouped; g != nil {
			for _, grp := range *g {
				values = append(values, grp.Options...)
			}
		}
		var names []string
		for _, v := range values {
			if string(v.Value) == want || strings.EqualFold(v.Name, want) {
				if _, err := conn.SetSessionConfigOption(ctx, sdk.SetSessionConfigOptionRequest{ValueId: &sdk.SetSessionConfigOptionValueId{
					SessionId: sdk.SessionId(sid), ConfigId: sel.Id, Value: v.Value,
				}}); err != nil {
					return "", fmt.Errorf("acp backend %q: session/set_config_option %s=%s: %w", id, sel.Id, v.Value, err)
				}
				return string(v.Value), nil
			}
			names = append(names, string(v.Value))
		}
		return "", fmt.Errorf("acp backend %q: the agent offers no model %q (it offers: %s)", id, want, strings.Join(names, ", "))
	}
	if want != "" {
		return "", fmt.Errorf("acp backend %q: model %q was asked for, but %s offers no model selection; drop model= (the agent then uses the model it is configured with)",
			id, want, s.b.cfg.Command)
	}
	return "", nil
}

// version is luft's version for the agent's logs: the release's, else the module's, else "dev".
func version() string { return buildinfo.Get().Version }

// DefaultModel is the model of calls that name none (the scheduler's lane).
func (b *Backend) DefaultModel() string { return b.cfg.Model }
