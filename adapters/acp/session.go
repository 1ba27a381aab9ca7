package acp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
)

// session is the client side of one call's connection: it collects the reply, reports
// progress, answers permission requests and serves file requests inside the workspace.
// Its methods run on the SDK's goroutines.
type session struct {
	b    *Backend
	root *os.Root
	call adapters.Call

	activity chan struct{} // poked by every message from the agent (idle timer)
	refused  chan struct{} // closed at the first refusal under the "ask" policy
	once     sync.Once

	mu         sync.Mutex
	sid        string
	collecting bool // between session/prompt and its answer; replayed history is ignored
	closed     bool // Run has returned: report nothing more
	text       strings.Builder
	toolGap    bool   // a tool call came after the last text
	messageID  string // the messageId of the last reply chunk that had one
	tools      map[sdk.ToolCallId]toolState
	approval   *tools.ApprovalError
	refusals   []string       // the permissions refused during the prompt: "what (why)"
	stop       sdk.StopReason // how the prompt ended
}

// toolState is what is known of one tool call, merged from its updates.
type toolState struct {
	title    string
	kind     sdk.ToolKind
	paths    []string // locations and diff paths
	rawInput any
}

var _ sdk.Client = (*session)(nil)

func newSession(b *Backend, root *os.Root, call adapters.Call) *session {
	return &session{
		b: b, root: root, call: call,
		activity: make(chan struct{}, 1),
		refused:  make(chan struct{}),
		tools:    map[sdk.ToolCallId]toolState{},
	}
}

func (s *session) poke() {
	select {
	case s.activity <- struct{}{}:
	default:
	}
}

func (s *session) setSession(sid string) {
	s.mu.Lock()
	s.sid = sid
	s.mu.Unlock()
}

func (s *session) startPrompt() {
	s.mu.Lock()
	s.collecting = true
	s.mu.Unlock()
}

// endPrompt stops collecting and returns the reply's text.
func (s *session) endPrompt() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.collecting = false
	return s.text.String()
}

// prompting returns the session id and whether a prompt is running.
func (s *session) prompting() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sid, s.collecting
}

func (s *session) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// report sends progress; the caller holds s.mu, so nothing is reported after close.
func (s *session) report(kind, text string) {
	if !s.closed {
		s.call.Report(adapters.Update{Kind: kind, Text: text})
	}
}

func (s *session) approvalError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.approval == nil {
		return nil // not a nil *ApprovalError in a non-nil error
	}
	return s.approval
}

// refuse records the first approval the "ask" policy could not give; the call fails with it.
func (s *session) refuse(tool string) {
	s.mu.Lock()
	if s.approval == nil {
		s.approval = &tools.ApprovalError{Tool: tool}
	}
	s.mu.Unlock()
	s.once.Do(func() { close(s.refused) })
}

// SessionUpdate collects the reply and reports progress.
func (s *session) SessionUpdate(_ context.Context, n sdk.SessionNotification) error {
	s.poke()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.collecting || string(n.SessionId) != s.sid {
		return nil
	}
	u := n.Update
	switch {
	case u.AgentMessageChunk != nil:
		if t := u.AgentMessageChunk.Content.Text; t != nil && t.Text != "" {
			text, notice := splitNotice(t.Text)
			if notice != "" {
				s.report("notice", notice)
			}
			// A new messageId starts another message: it is a paragraph of its own, not
			// the end of the last one's sentence.
			if id := u.AgentMessageChunk.MessageId; id != nil && *id != "" {
				if s.messageID != "" && *id != s.messageID {
					s.toolGap = true
				}
				s.messageID = *id
			}
			if text == "" {
				return nil
			}
			if s.toolGap && s.text.Len() > 0 {
				switch cur := s.text.String(); {
				case strings.HasSuffix(cur, "\n\n"):
				case strings.HasSuffix(cur, "\n"):
					s.text.WriteString("\n")
				default:
					s.text.WriteString("\n\n")
				}
			}
			s.toolGap = false
			s.text.WriteString(text)
			s.report("text", text)
		}
	case u.AgentThoughtChunk != nil:
		if t := u.AgentThoughtChunk.Content.Text; t != nil && t.Text != "" {
			s.report("thought", t.Text)
		}
	case u.ToolCall != nil:
		tc := u.ToolCall
		st := s.merge(tc.ToolCallId, &tc.Title, &tc.Kind, tc.Locations, tc.RawInput, tc.Content)
		s.toolGap = true
		s.report("tool_call", toolLine(st, string(tc.Status)))
		s.reportDiffs(tc.Content)
	case u.ToolCallUpdate != nil:
		tc := u.ToolCallUpdate
		st := s.merge(tc.ToolCallId, tc.Title, tc.Kind, tc.Locations, tc.RawInput, tc.Content)
		s.toolGap = true
		if tc.Status != nil || tc.Title != nil {
			status := "updated"
			if tc.Status != nil {
				status = string(*tc.Status)
			}
			s.report("tool_call", toolLine(st, status))
		}
		s.reportDiffs(tc.Content)
	}
	return nil
}

// merge folds one tool call update into what is known of the call; s.mu is held.
func (s *session) merge(id sdk.ToolCallId, title *string, kind *sdk.ToolKind, locs []sdk.ToolCallLocation, raw any, content []sdk.ToolCallContent) toolState {
	st := s.tools[id]
	if title != nil && *title != "" {
		st.title = *title
	}
	if kind != nil && *kind != "" {
		st.kind = *kind
	}
	if raw != nil {
		st.rawInput = raw
	}
	if locs != nil {
		st.paths = st.paths[:0:0]
		for _, l := range locs {
			st.paths = append(st.paths, l.Path)
		}
	}
	for _, c := range content {
		if c.Diff != nil {
			st.paths = append(st.paths, c.Diff.Path)
		}
	}
	s.tools[id] = st
	return st
}

func (s *session) reportDiffs(content []sdk.ToolCallContent) {
	for _, c := range content {
		if c.Diff != nil {
			s.report("edit", s.b.display(c.Diff.Path))
		}
	}
}

// toolLine is the one-line progress form of a tool call: `title [kind] status`.
func toolLine(st toolState, status string) string {
	title := st.title
	if title == "" {
		title = "tool call"
	}
	line := snippet(title, 100)
	if st.kind != "" {
		line += " [" + string(st.kind) + "]"
	}
	if status != "" {
		line += " " + status
	}
	return line
}

// RequestPermission answers from the configured policy (see the package doc).
func (s *session) RequestPermission(_ context.Context, p sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	s.poke()
	s.mu.Lock()
	tc := p.ToolCall
	st := s.merge(tc.ToolCallId, tc.Title, tc.Kind, tc.Locations, tc.RawInput, tc.Content)
	closed, other := s.closed, string(p.SessionId) != s.sid
	s.mu.Unlock()

	allow, why, ask := s.decide(st)
	switch {
	case closed:
		allow, why, ask = false, "the call has ended", false
	case other:
		allow, why, ask = false, "it is for another session", false
	}
	var opt *sdk.PermissionOption
	if allow {
		opt = pick(p.Options, sdk.PermissionOptionKindAllowOnce)
		if opt == nil {
			allow, why = false, "the agent offers no allow-once option, and luft never allows always"
		}
	}
	if !allow {
		opt = pick(p.Options, sdk.PermissionOptionKindRejectOnce, sdk.PermissionOptionKindRejectAlways)
	}
	name := toolName(st)
	if ask {
		s.refuse(name)
	}
	s.mu.Lock()
	if allow {
		s.report("tool_call", "allowed: "+name)
	} else {
		s.report("tool_call", "refused: "+name+" ("+why+")")
		if !closed && !other && len(s.refusals) < maxRefusals {
			s.refusals = append(s.refusals, name+" ("+why+")")
		}
	}
	s.mu.Unlock()
	if opt == nil {
		return sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{Cancelled: &sdk.RequestPermissionOutcomeCancelled{}}}, nil
	}
	return sdk.RequestPermissionResponse{Outcome: sdk.RequestPermissionOutcome{
		Selected: &sdk.RequestPermissionOutcomeSelected{OptionId: opt.OptionId},
	}}, nil
}

func pick(opts []sdk.PermissionOption, kinds ...sdk.PermissionOptionKind) *sdk.PermissionOption {
	for _, k := range kinds {
		for i := range opts {
			if opts[i].Kind == k {
				return &opts[i]
			}
		}
	}
	return nil
}

func toolName(st toolState) string {
	kind := string(st.kind)
	if kind == "" {
		kind = "other"
	}
	if st.title == "" {
		return kind
	}
	return fmt.Sprintf("%s %q", kind, snippet(st.title, 100))
}

// decide applies the policy to a tool call: whether to allow it, why not, and whether
// the refusal is the "ask" policy's (which fails the call).
func (s *session) decide(st toolState) (allow bool, why string, ask bool) {
	cfg := s.b.cfg
	if cfg.Approval == tools.ApprovalDeny {
		return false, "approval is deny", false
	}
	paths := append(st.paths[:len(st.paths):len(st.paths)], rawPaths(st.rawInput)...)
	for _, p := range paths {
		if err := tools.CheckPathLen(p); err != nil {
			return false, fmt.Sprintf("%s: %v", snippet(p, 100), err), false
		}
		if !s.b.inside(p) {
			return false, fmt.Sprintf("%s is outside the workspace %s", snippet(p, 200), s.b.ws), false
		}
	}
	switch st.kind {
	case sdk.ToolKindEdit, sdk.ToolKindDelete, sdk.ToolKindMove:
		if len(paths) == 0 {
			return false, "it names no file, so it cannot be confined to the workspace", false
		}
		for _, p := range paths {
			if s.b.protects(p) {
				return false, fmt.Sprintf("%s is luft's own config or state, or version control's, which agents may not change", snippet(p, 200)), false
			}
		}
		if cfg.AllowEdits || cfg.Approval == tools.ApprovalAllow {
			return true, "", false
		}
		return false, "edits need approval", true
	case sdk.ToolKindExecute:
		cmd := command(st)
		if cmd == "" {
			return false, "no command given", false
		}
		if tools.CommandAllowed(s.b.allow, cmd) {
			return true, "", false
		}
		return false, fmt.Sprintf("%q does not start with an allowed command", snippet(cmd, 80)), false
	}
	if cfg.Approval == tools.ApprovalAllow {
		return true, "", false
	}
	return false, "it needs approval", true
}

// rawPathKeys are the raw-input fields agents put file paths in.
// A command's working directory counts too: a command allowed by the list still runs
// only inside the workspace.
var rawPathKeys = []string{"path", "file_path", "filePath", "abs_path", "notebook_path", "old_path", "new_path", "destination",
	"cwd", "workdir", "working_directory", "workingDirectory"}

func rawPaths(raw any) []string {
	m, ok := raw.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for _, k := range rawPathKeys {
		if v, ok := m[k].(string); ok && v != "" {
			out = append(out, v)
		}
	}
	return out
}

// command is an execute call's command line: raw input "command" or "cmd" (a string, or
// an argv whose shell -c script is taken), else the title without backquotes.
func command(st toolState) string {
	if m, ok := st.rawInput.(map[string]any); ok {
		for _, k := range []string{"command", "cmd"} {
			switch v := m[k].(type) {
			case string:
				return strings.TrimSpace(v)
			case []any:
				argv := make([]string, 0, len(v))
				for _, a := range v {
					s, ok := a.(string)
					if !ok {
						return ""
					}
					argv = append(argv, s)
				}
				if len(argv) == 3 && isShell(argv[0]) && (argv[1] == "-c" || argv[1] == "-lc") {
					return strings.TrimSpace(argv[2])
				}
				return strings.Join(argv, " ")
			}
		}
	}
	return strings.TrimSpace(strings.Trim(strings.TrimSpace(st.title), "`"))
}

func isShell(p string) bool {
	switch filepath.Base(p) {
	case "sh", "bash", "zsh", "dash":
		return true
	}
	return false
}

// rel turns an absolute path inside the workspace into one relative to it.
func (b *Backend) rel(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("path %q is not absolute", path)
	}
	c := filepath.Clean(path)
	for _, base := range []string{b.ws, b.realWS} {
		if r, err := filepath.Rel(base, c); err == nil && filepath.IsLocal(r) {
			return r, nil
		}
	}
	return "", fmt.Errorf("%s is outside the workspace %s", path, b.ws)
}

// inside reports whether path (relative paths are taken from the workspace) is inside
// the workspace, both as written and with the symlinks of its existing part resolved.
func (b *Backend) inside(path string) bool {
	if !filepath.IsAbs(path) {
		path = filepath.Join(b.ws, path)
	}
	if _, err := b.rel(path); err != nil {
		return false
	}
	return tools.Within(b.realWS, tools.ResolveExisting(filepath.Clean(path)))
}

// protects reports whether path (relative paths are taken from the workspace) is one of
// the files agents may not change (tools.Guard: luft's config and state, version
// control's folders), or inside one, symlinks resolved.
func (b *Backend) protects(path string) bool {
	if !filepath.IsAbs(path) {
		path = filepath.Join(b.ws, path)
	}
	rel, err := b.rel(path)
	if err != nil {
		return false // outside: refused as such
	}
	return errors.Is(b.guard.Check(rel), tools.ErrProtected)
}

// display is path relative to the workspace when it is inside it.
func (b *Backend) display(path string) string {
	if r, err := b.rel(path); err == nil {
		return r
	}
	return path
}

// ReadTextFile reads a file inside the workspace.
func (s *session) ReadTextFile(_ context.Context, p sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	s.poke()
	if err := s.check(p.SessionId); err != nil {
		return sdk.ReadTextFileResponse{}, err
	}
	rel, err := s.b.rel(p.Path)
	if err != nil {
		return sdk.ReadTextFileResponse{}, fmt.Errorf("read refused: %w", err)
	}
	data, err := s.root.ReadFile(rel)
	if errors.Is(err, os.ErrNotExist) {
		// ACP's own code: an agent creating a new file (Gemini CLI) reads it first and
		// takes this answer, not an internal error, to mean "go ahead, it is new".
		return sdk.ReadTextFileResponse{}, &sdk.RequestError{Code: codeResourceNotFound, Message: "Resource not found",
			Data: map[string]any{"path": p.Path, "details": "no such file"}}
	}
	if err != nil {
		return sdk.ReadTextFileResponse{}, err
	}
	content := string(data)
	if p.Line != nil || p.Limit != nil {
		lines := strings.SplitAfter(content, "\n")
		start := 0
		if p.Line != nil && *p.Line > 1 {
			start = min(*p.Line-1, len(lines))
		}
		end := len(lines)
		if p.Limit != nil && *p.Limit >= 0 && start+*p.Limit < end {
			end = start + *p.Limit
		}
		content = strings.Join(lines[start:end], "")
	}
	return sdk.ReadTextFileResponse{Content: content}, nil
}

// WriteTextFile writes a file inside the workspace when the policy allows edits.
func (s *session) WriteTextFile(_ context.Context, p sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	s.poke()
	if err := s.check(p.SessionId); err != nil {
		return sdk.WriteTextFileResponse{}, err
	}
	switch cfg := s.b.cfg; {
	case cfg.Approval == tools.ApprovalDeny:
		return sdk.WriteTextFileResponse{}, errors.New("write refused: approval is deny")
	case !cfg.AllowEdits && cfg.Approval != tools.ApprovalAllow:
		s.refuse(fmt.Sprintf("fs/write_text_file %q", s.b.display(p.Path)))
		return sdk.WriteTextFileResponse{}, errors.New("write refused: edits need approval")
	}
	rel, err := s.b.rel(p.Path)
	if err != nil {
		return sdk.WriteTextFileResponse{}, fmt.Errorf("write refused: %w", err)
	}
	// The same Guard as write_file's: protected files, hard links and links swapped in
	// are refused, and the file checked is the file written.
	if _, err := s.b.guard.WriteFile(s.root, rel, []byte(p.Content)); err != nil {
		return sdk.WriteTextFileResponse{}, fmt.Errorf("write refused: %w", err)
	}
	s.mu.Lock()
	s.report("edit", rel)
	s.mu.Unlock()
	return sdk.WriteTextFileResponse{}, nil
}

// codeResourceNotFound is ACP's error code for a resource, such as a file, that does not
// exist (the SDK has no constructor for it).
const codeResourceNotFound = -32002

// maxRefusals bounds the refusals a call's error lists.
const maxRefusals = 8

// refusedOutcome makes the permissions refused during the prompt visible in the result
// the same way for every agent: agents differ in what they do next (codex ends the
// prompt "cancelled", opencode and Claude Code end their turn with no text), so when the
// agent then stopped without an answer the call fails with an error naming what was
// refused and why. An agent that went on and answered keeps its result.
func (s *session) refusedOutcome(res agent.Result) agent.Result {
	s.mu.Lock()
	refused, stop := slices.Clone(s.refusals), s.stop
	s.mu.Unlock()
	if len(refused) == 0 || res.OK() && strings.TrimSpace(res.Text) != "" {
		return res
	}
	how := "ended its turn without an answer"
	if stop != sdk.StopReasonEndTurn {
		how = fmt.Sprintf("stopped without finishing its turn (stop reason %q)", stop)
	}
	res.Status = agent.StatusError
	res.Error = fmt.Sprintf("acp backend %q: luft refused the agent permission for %s, and the agent %s; "+
		"if it should be allowed, widen [tools] in luft.toml (allow_commands, allow_edits, approval)",
		s.b.cfg.ID, strings.Join(refused, "; "), how)
	return res
}

// check refuses file requests for another session or after the call has ended.
func (s *session) check(sid sdk.SessionId) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the call has ended")
	}
	if s.sid == "" || string(sid) != s.sid {
		return fmt.Errorf("unknown session %q", sid)
	}
	return nil
}

// The terminal is not offered (ClientCapabilities.Terminal is false); agents run
// commands themselves, after asking permission.

func (s *session) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalCreate)
}

func (s *session) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalKill)
}

func (s *session) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalOutput)
}

func (s *session) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalRelease)
}

func (s *session) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, sdk.NewMethodNotFound(sdk.ClientMethodTerminalWaitForExit)
}

// snippet is the start of s with whitespace collapsed, cut to n runes.
func snippet(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return strings.TrimRight(string(r[:n]), " ") + "..."
	}
	return s
}
