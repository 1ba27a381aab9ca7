package acpfake

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	sdk "github.com/coder/acp-go-sdk"
)

// directive is one prompt line the fake acts on.
type directive struct {
	word string // EDIT, RUN, FETCH, READ, WRITE, ENV, HANG, CRASH, NOTICE
	arg  string
}

func directives(text string) []directive {
	var out []directive
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "EDIT", "RUN", "FETCH", "READ", "WRITE", "ENV", "HANG", "CRASH", "NOTICE":
			arg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), f[0]))
			out = append(out, directive{word: f[0], arg: arg})
		}
	}
	return out
}

// errCancelled ends a prompt whose session was cancelled, errQuiet one that stops after a
// refused permission without a word (Options.OnReject "quiet").
var (
	errCancelled = fmt.Errorf("cancelled")
	errQuiet     = fmt.Errorf("stopped quietly")
)

func (a *fakeAgent) Prompt(ctx context.Context, p sdk.PromptRequest) (sdk.PromptResponse, error) {
	sid := string(p.SessionId)
	st, err := a.session(sid)
	if err != nil {
		return sdk.PromptResponse{}, err
	}
	var parts []string
	for _, b := range p.Prompt {
		if b.Text != nil {
			parts = append(parts, b.Text.Text)
		}
	}
	text := strings.Join(parts, "\n")
	a.mu.Lock()
	n := len(st.Turns) + 1
	cwd, model := st.Cwd, st.Model
	a.mu.Unlock()
	a.log(Entry{Method: sdk.AgentMethodSessionPrompt, Session: sid, Prompt: text, Turn: n, Model: model})

	// A cancel that reached this session meant this prompt; it must not end the next one.
	defer func() {
		a.mu.Lock()
		if isClosed(a.cancelChan(sid)) {
			delete(a.cancels, sid)
		}
		a.mu.Unlock()
	}()
	t := &turnRun{a: a, ctx: ctx, sid: sid, cwd: cwd}
	reply, err := t.run(text, n, model)
	if err == errCancelled || ctx.Err() != nil {
		return sdk.PromptResponse{StopReason: sdk.StopReasonCancelled}, nil
	}
	if err == errQuiet {
		reply, err = t.reply.String(), nil
	}
	if err != nil {
		return sdk.PromptResponse{}, err
	}
	a.mu.Lock()
	st.Turns = append(st.Turns, turn{Prompt: text, Reply: reply})
	a.mu.Unlock()
	if err := a.save(st); err != nil {
		return sdk.PromptResponse{}, err
	}
	return sdk.PromptResponse{StopReason: sdk.StopReasonEndTurn}, nil
}

// turnRun is one prompt being answered.
type turnRun struct {
	a     *fakeAgent
	ctx   context.Context
	sid   string
	cwd   string
	reply strings.Builder
	calls int
}

func (t *turnRun) say(s string) error {
	t.reply.WriteString(s)
	return t.a.update(t.ctx, t.sid, sdk.UpdateAgentMessageText(s))
}

func (t *turnRun) run(text string, n int, model string) (string, error) {
	if err := t.a.update(t.ctx, t.sid, sdk.UpdateAgentThoughtText("reading the prompt")); err != nil {
		return "", err
	}
	if n > 1 {
		if err := t.say(fmt.Sprintf("(turn %d of session %s) ", n, t.sid)); err != nil {
			return "", err
		}
	}
	for _, d := range directives(text) {
		if err := t.do(d); err != nil {
			return "", err
		}
	}
	if strings.Contains(text, "JSON") {
		b, _ := json.Marshal(map[string]any{"ok": true, "session": t.sid, "turn": n, "model": model})
		return t.reply.String(), t.say("Here is the JSON you asked for:\n```json\n" + string(b) + "\n```\n")
	}
	if err := t.say("echo:"); err != nil {
		return "", err
	}
	for _, w := range strings.Fields(text) {
		if err := t.say(" " + w); err != nil {
			return "", err
		}
	}
	return t.reply.String(), nil
}

func (t *turnRun) abs(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(t.cwd, path)
}

func (t *turnRun) do(d directive) error {
	t.calls++
	id := sdk.ToolCallId(fmt.Sprintf("call-%d", t.calls))
	switch d.word {
	case "NOTICE":
		// As codex-acp passes on a Codex warning: reply text with no break after it.
		return t.a.update(t.ctx, t.sid, sdk.UpdateAgentMessageText(d.arg))
	case "HANG":
		if err := t.say("hanging until cancelled\n"); err != nil {
			return err
		}
		t.a.mu.Lock()
		ch := t.a.cancelChan(t.sid)
		t.a.mu.Unlock()
		// Wait for session/cancel itself, not the request context the SDK cancels just
		// before it calls Cancel: this way the cancel is logged before the prompt answers.
		select {
		case <-ch:
			t.a.log(Entry{Method: sdk.AgentMethodSessionPrompt, Session: t.sid, Outcome: "cancelled"})
		case <-t.a.connection().Done():
			t.a.log(Entry{Method: sdk.AgentMethodSessionPrompt, Session: t.sid, Outcome: "disconnected"})
		}
		return errCancelled
	case "CRASH":
		fmt.Fprintln(t.a.opts.Stderr, "luft-fake-acp: crashing on purpose (CRASH in the prompt)")
		t.a.log(Entry{Method: sdk.AgentMethodSessionPrompt, Session: t.sid, Outcome: "crash"})
		t.a.mu.Lock()
		if !isClosed(t.a.crash) {
			close(t.a.crash)
		}
		t.a.mu.Unlock()
		<-t.ctx.Done()
		return errCancelled
	case "EDIT":
		path := t.abs(d.arg)
		title := "Edit " + d.arg
		if err := t.a.update(t.ctx, t.sid, sdk.StartEditToolCall(id, title, path, EditContent,
			sdk.WithStartContent([]sdk.ToolCallContent{sdk.ToolDiffContent(path, EditContent)}))); err != nil {
			return err
		}
		ok, err := t.permission(sdk.ToolCallUpdate{
			ToolCallId: id, Title: sdk.Ptr(title), Kind: sdk.Ptr(sdk.ToolKindEdit), Status: sdk.Ptr(sdk.ToolCallStatusPending),
			Locations: []sdk.ToolCallLocation{{Path: path}}, RawInput: map[string]any{"path": path, "content": EditContent},
		})
		if err != nil {
			return err
		}
		if !ok {
			return t.rejected(id, "edit "+d.arg+": rejected\n")
		}
		if err := t.write(path); err != nil {
			return t.finish(id, false, "edit "+d.arg+": write failed: "+err.Error()+"\n")
		}
		return t.finish(id, true, "edit "+d.arg+": written\n")
	case "RUN", "FETCH":
		kind, title, raw := sdk.ToolKindExecute, "`"+d.arg+"`", map[string]any{"command": d.arg}
		if d.word == "FETCH" {
			kind, title, raw = sdk.ToolKindFetch, "Fetch "+d.arg, map[string]any{"url": d.arg}
		}
		if err := t.a.update(t.ctx, t.sid, sdk.StartToolCall(id, title, sdk.WithStartKind(kind),
			sdk.WithStartStatus(sdk.ToolCallStatusPending), sdk.WithStartRawInput(raw))); err != nil {
			return err
		}
		ok, err := t.permission(sdk.ToolCallUpdate{
			ToolCallId: id, Title: sdk.Ptr(title), Kind: sdk.Ptr(kind), Status: sdk.Ptr(sdk.ToolCallStatusPending), RawInput: raw,
		})
		if err != nil {
			return err
		}
		verb := strings.ToLower(d.word)
		if !ok {
			return t.rejected(id, verb+" "+d.arg+": rejected\n")
		}
		return t.finish(id, true, verb+" "+d.arg+": allowed\n")
	case "READ":
		path := t.abs(d.arg)
		resp, err := t.a.connection().ReadTextFile(t.ctx, sdk.ReadTextFileRequest{SessionId: sdk.SessionId(t.sid), Path: path})
		if err != nil {
			t.a.log(Entry{Method: sdk.ClientMethodFsReadTextFile, Session: t.sid, Path: path, Outcome: "error: " + err.Error()})
			return t.say("read " + d.arg + ": error\n")
		}
		t.a.log(Entry{Method: sdk.ClientMethodFsReadTextFile, Session: t.sid, Path: path, Outcome: "ok"})
		return t.say("read " + d.arg + ": " + resp.Content + "\n")
	case "ENV":
		vars := os.Environ()
		slices.Sort(vars)
		return t.say("env: " + strings.Join(vars, " ") + "\n")
	case "WRITE":
		path := t.abs(d.arg)
		if err := t.write(path); err != nil {
			return t.say("write " + d.arg + ": error\n")
		}
		return t.say("write " + d.arg + ": written\n")
	}
	return nil
}

func (t *turnRun) write(path string) error {
	_, err := t.a.connection().WriteTextFile(t.ctx, sdk.WriteTextFileRequest{SessionId: sdk.SessionId(t.sid), Path: path, Content: EditContent})
	outcome := "ok"
	if err != nil {
		outcome = "error: " + err.Error()
	}
	t.a.log(Entry{Method: sdk.ClientMethodFsWriteTextFile, Session: t.sid, Path: path, Outcome: outcome})
	return err
}

// permission asks the client and logs its answer; it reports whether an allow option was
// chosen.
func (t *turnRun) permission(tc sdk.ToolCallUpdate) (bool, error) {
	opts := []sdk.PermissionOption{
		{Kind: sdk.PermissionOptionKindAllowOnce, Name: "Allow once", OptionId: "allow"},
		{Kind: sdk.PermissionOptionKindAllowAlways, Name: "Always allow", OptionId: "always"},
		{Kind: sdk.PermissionOptionKindRejectOnce, Name: "Reject", OptionId: "reject"},
	}
	resp, err := t.a.connection().RequestPermission(t.ctx, sdk.RequestPermissionRequest{SessionId: sdk.SessionId(t.sid), ToolCall: tc, Options: opts})
	e := Entry{Method: sdk.ClientMethodSessionRequestPermission, Session: t.sid, Tool: string(*tc.Kind), Title: *tc.Title}
	if len(tc.Locations) > 0 {
		e.Path = tc.Locations[0].Path
	}
	if err != nil {
		e.Outcome = "error: " + err.Error()
		t.a.log(e)
		return false, err
	}
	allowed := false
	switch o := resp.Outcome; {
	case o.Selected != nil:
		e.Outcome = "unknown option " + string(o.Selected.OptionId)
		for _, opt := range opts {
			if opt.OptionId == o.Selected.OptionId {
				e.Outcome = string(opt.Kind)
				allowed = opt.Kind == sdk.PermissionOptionKindAllowOnce || opt.Kind == sdk.PermissionOptionKindAllowAlways
			}
		}
	default:
		e.Outcome = "cancelled"
	}
	t.a.log(e)
	return allowed, nil
}

// rejected ends a tool call whose permission was refused, then goes on or stops as
// Options.OnReject says.
func (t *turnRun) rejected(id sdk.ToolCallId, line string) error {
	switch t.a.opts.OnReject {
	case "cancel":
		if err := t.a.update(t.ctx, t.sid, sdk.UpdateToolCall(id, sdk.WithUpdateStatus(sdk.ToolCallStatusFailed))); err != nil {
			return err
		}
		return errCancelled
	case "quiet":
		if err := t.a.update(t.ctx, t.sid, sdk.UpdateToolCall(id, sdk.WithUpdateStatus(sdk.ToolCallStatusFailed))); err != nil {
			return err
		}
		return errQuiet
	}
	return t.finish(id, false, line)
}

func (t *turnRun) finish(id sdk.ToolCallId, ok bool, line string) error {
	status := sdk.ToolCallStatusCompleted
	if !ok {
		status = sdk.ToolCallStatusFailed
	}
	if err := t.a.update(t.ctx, t.sid, sdk.UpdateToolCall(id, sdk.WithUpdateStatus(status))); err != nil {
		return err
	}
	return t.say(line)
}
