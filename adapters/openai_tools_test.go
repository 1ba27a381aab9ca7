package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
)

// fnTool is a tool written as a function, with a log of its arguments.
type fnTool struct {
	name        string
	destructive bool
	fn          func(args map[string]any) (string, error)

	mu   sync.Mutex
	args []string
}

func (f *fnTool) Spec() tools.Spec {
	return tools.Spec{Name: f.name, Description: "test tool " + f.name, Destructive: f.destructive,
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}
}

func (f *fnTool) Call(_ context.Context, raw json.RawMessage) (string, error) {
	f.mu.Lock()
	f.args = append(f.args, string(raw))
	f.mu.Unlock()
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return "", err
	}
	return f.fn(args)
}

// toolList resolves names against a fixed list, the way tools.Set does.
type toolList []tools.Tool

func (l toolList) Resolve(_ context.Context, names []string) ([]tools.Tool, error) {
	var out []tools.Tool
	for _, n := range names {
		found := false
		for _, t := range l {
			if t.Spec().Name == n {
				out = append(out, t)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no tool %q", n)
		}
	}
	return out, nil
}

// turnCounter is a TurnFunc that admits at once and counts the turns.
type turnCounter struct {
	mu    sync.Mutex
	turns []TurnCost
}

func (c *turnCounter) turn(ctx context.Context, cost TurnCost, send func(context.Context) TurnReport) error {
	c.mu.Lock()
	c.turns = append(c.turns, cost)
	c.mu.Unlock()
	return send(ctx).Err
}

func toolBackend(t *testing.T, url string, ts toolList, maxTurns int) *OpenAI {
	t.Helper()
	b, err := NewOpenAI(OpenAIConfig{BaseURL: url, APIKey: "k", Model: "luft-fake", Tools: ts, MaxTurns: maxTurns})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An agent with tools runs its loop: the model asks for read_notes, the tool's result goes
// back, the model answers. Every model turn passed the TurnFunc, and the engine's own log
// shows the tool result it received.
func TestOpenAIToolLoop(t *testing.T) {
	url, eng := startFake(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{{
		Match: "read the notes", Calls: []testkit.ScriptedCall{{Name: "read_notes", Arguments: `{"path":"notes.txt"}`}},
		Reply: "the notes say hello",
	}}})
	notes := &fnTool{name: "read_notes", fn: func(a map[string]any) (string, error) { return "NOTES-CONTENT of " + a["path"].(string), nil }}
	b := toolBackend(t, url, toolList{notes}, 0)
	tc := &turnCounter{}
	res, err := b.Run(context.Background(), agent.Request{Prompt: "read the notes and summarise", Tools: []string{"read_notes"}}, Call{Turn: tc.turn})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != agent.StatusOK || res.Text != "the notes say hello" {
		t.Fatalf("result %+v", res)
	}
	if len(tc.turns) != 2 || tc.turns[1].Input <= tc.turns[0].Input {
		t.Fatalf("turns %+v: want 2, the second with the longer conversation", tc.turns)
	}
	log := eng.Log()
	if len(log) != 2 {
		t.Fatalf("engine saw %d requests, want 2", len(log))
	}
	if got := log[0].Tools; len(got) != 1 || got[0] != "read_notes" {
		t.Fatalf("first request declared tools %v", got)
	}
	last := log[1].Messages
	tm := last[len(last)-1]
	if tm.Role != "tool" || string(tm.Content) != "NOTES-CONTENT of notes.txt" || tm.ToolCallID == "" {
		t.Fatalf("the engine received %+v as the last message, want the tool result", tm)
	}
	if am := last[len(last)-2]; am.Role != "assistant" || len(am.ToolCalls) != 1 || am.ToolCalls[0].ID != tm.ToolCallID {
		t.Fatalf("assistant message before the tool result: %+v", am)
	}
	want := agent.Usage{Input: log[0].PromptTokens + log[1].PromptTokens, Output: log[0].OutputTokens + log[1].OutputTokens,
		Cached: log[0].CachedTokens + log[1].CachedTokens}
	if res.Usage != want {
		t.Fatalf("usage %+v, want the sum of both turns %+v", res.Usage, want)
	}
	if len(notes.args) != 1 || notes.args[0] != `{"path":"notes.txt"}` {
		t.Fatalf("tool called with %v", notes.args)
	}
}

// Tool failures, unknown tools and refusals go back to the model as tool results; the
// call goes on. Only "ask" approval fails the call.
func TestOpenAIToolErrors(t *testing.T) {
	rules := []testkit.ToolRule{
		{Match: "use broken", Calls: []testkit.ScriptedCall{{Name: "broken"}}, Reply: "recovered"},
		{Match: "use ghost", Calls: []testkit.ScriptedCall{{Name: "ghost"}}, Reply: "went on"},
		{Match: "use wipe", Calls: []testkit.ScriptedCall{{Name: "wipe"}}, Reply: "never"},
	}
	url, eng := startFake(t, testkit.Config{KeepRequests: true, ToolRules: rules})
	broken := &fnTool{name: "broken", fn: func(map[string]any) (string, error) { return "", errors.New("disk on fire") }}
	wipe := &fnTool{name: "wipe", fn: func(map[string]any) (string, error) { return "", &tools.ApprovalError{Tool: "wipe"} }}
	b := toolBackend(t, url, toolList{broken, wipe}, 0)
	for _, tc := range []struct {
		prompt, tool, reply, toolResult string
	}{
		{"use broken", "broken", "recovered", "error: disk on fire"},
		{"use ghost", "broken", "went on", `error: there is no tool "ghost"; the tools you have are: broken`},
	} {
		before := len(eng.Log())
		res, err := b.Run(context.Background(), agent.Request{Prompt: tc.prompt, Tools: []string{tc.tool}}, Call{})
		if err != nil || res.Text != tc.reply {
			t.Fatalf("%s: %+v, %v", tc.prompt, res, err)
		}
		log := eng.Log()[before:]
		msgs := log[len(log)-1].Messages
		if got := string(msgs[len(msgs)-1].Content); got != tc.toolResult {
			t.Fatalf("%s: the model got %q, want %q", tc.prompt, got, tc.toolResult)
		}
	}
	res, err := b.Run(context.Background(), agent.Request{Prompt: "use wipe", Tools: []string{"wipe"}}, Call{})
	var ae *tools.ApprovalError
	if !errors.As(err, &ae) || res.Status != agent.StatusError || !strings.Contains(res.Error, "needs approval") {
		t.Fatalf("ask policy: %+v, %v", res, err)
	}
}

func TestOpenAIToolTurnLimit(t *testing.T) {
	url, _ := startFake(t, testkit.Config{ToolRules: []testkit.ToolRule{{
		Match: "loop", Calls: []testkit.ScriptedCall{{Name: "t"}}, Rounds: 10,
	}}})
	tl := &fnTool{name: "t", fn: func(map[string]any) (string, error) { return "again", nil }}
	b := toolBackend(t, url, toolList{tl}, 3)
	tc := &turnCounter{}
	res, err := b.Run(context.Background(), agent.Request{Prompt: "loop", Tools: []string{"t"}}, Call{Turn: tc.turn})
	if err != nil || res.Status != agent.StatusError || !strings.Contains(res.Error, "3 model turns") || len(tc.turns) != 3 {
		t.Fatalf("%+v %v after %d turns", res, err, len(tc.turns))
	}
	if res.Usage.Total() == 0 {
		t.Fatal("the turns' usage is lost")
	}
}

func TestOpenAIToolsNotConfigured(t *testing.T) {
	b := newTestOpenAI(t, "http://127.0.0.1:1/v1")
	_, err := b.Run(context.Background(), agent.Request{Prompt: "p", Tools: []string{"read_file"}}, Call{})
	if err == nil || !strings.Contains(err.Error(), "none are configured") {
		t.Fatalf("err = %v", err)
	}
}

// With progress wanted, replies stream: the engine saw a streamed request, the text
// arrives in pieces that add up to the answer, and usage comes from the final chunk.
func TestOpenAIStreaming(t *testing.T) {
	url, eng := startFake(t, testkit.Config{DefaultMaxTokens: 40, ToolRules: []testkit.ToolRule{{
		Match: "stream tools", Calls: []testkit.ScriptedCall{{Name: "t", Arguments: `{"path":"a"}`}, {Name: "t", Arguments: `{"path":"b"}`}},
	}}})
	tl := &fnTool{name: "t", fn: func(a map[string]any) (string, error) { return "got " + a["path"].(string), nil }}
	b := toolBackend(t, url, toolList{tl}, 0)
	var (
		mu      sync.Mutex
		pieces  []string
		toolLog []string
	)
	progress := func(u Update) {
		mu.Lock()
		defer mu.Unlock()
		switch u.Kind {
		case "text":
			pieces = append(pieces, u.Text)
		case "tool_call":
			toolLog = append(toolLog, u.Text)
		}
	}
	res, err := b.Run(context.Background(), agent.Request{Prompt: "tell me a story"}, Call{Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) < 2 || strings.Join(pieces, "") != res.Text {
		t.Fatalf("%d pieces %q do not add up to %q", len(pieces), pieces, res.Text)
	}
	log := eng.Log()
	if !log[0].Stream {
		t.Fatal("the engine did not see a streamed request")
	}
	if res.Usage.Input != log[0].PromptTokens || res.Usage.Output != log[0].OutputTokens {
		t.Fatalf("usage %+v, engine %d/%d", res.Usage, log[0].PromptTokens, log[0].OutputTokens)
	}
	// Streamed tool calls are put together from their fragments.
	res, err = b.Run(context.Background(), agent.Request{Prompt: "stream tools", Tools: []string{"t"}}, Call{Progress: progress})
	if err != nil || res.Status != agent.StatusOK {
		t.Fatalf("%+v %v", res, err)
	}
	if len(tl.args) != 2 || tl.args[0] != `{"path":"a"}` || tl.args[1] != `{"path":"b"}` || len(toolLog) != 2 {
		t.Fatalf("tool calls %v, progress %v", tl.args, toolLog)
	}
}

// session_id continues a conversation: the second call sends the first one's transcript.
func TestOpenAISessionTranscript(t *testing.T) {
	url, eng := startFake(t, testkit.Config{KeepRequests: true, DefaultMaxTokens: 5})
	b := newTestOpenAI(t, url)
	first, err := b.Run(context.Background(), agent.Request{System: "be brief", Prompt: "first question"}, Call{})
	if err != nil || first.SessionID == "" || len(first.Transcript) != 3 {
		t.Fatalf("%+v %v", first, err)
	}
	second, err := b.Run(context.Background(), agent.Request{Prompt: "second question", SessionID: first.SessionID},
		Call{Transcript: first.Transcript})
	if err != nil || second.SessionID != first.SessionID || len(second.Transcript) != 5 {
		t.Fatalf("%+v %v", second, err)
	}
	msgs := eng.Log()[1].Messages
	var got []string
	for _, m := range msgs {
		got = append(got, m.Role+":"+string(m.Content))
	}
	want := []string{"system:be brief", "user:first question", "assistant:" + first.Text, "user:second question"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("the engine received %q\nwant %q", got, want)
	}
	if _, err := b.Run(context.Background(), agent.Request{Prompt: "p", SessionID: "nope"}, Call{}); err == nil ||
		!strings.Contains(err.Error(), `session_id "nope" is not a session of this run`) {
		t.Fatalf("unknown session: %v", err)
	}
}

// A send goes where the scheduler routed it: the replica it chose, or the fallback
// lane's endpoint with that backend's model.
func TestOpenAIRoutes(t *testing.T) {
	eng := testkit.NewEngine(testkit.Config{Replicas: 2})
	srv := testkit.NewServer(eng)
	if _, err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	spareURL, spare := startFake(t, testkit.Config{})
	b, err := NewOpenAI(OpenAIConfig{ID: "main", BaseURL: srv.ReplicaURL(0), Replicas: []string{srv.ReplicaURL(1)}, Model: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := NewOpenAI(OpenAIConfig{ID: "spare", BaseURL: spareURL, Model: "spare-model", PriceInPerMTok: 10, PriceOutPerMTok: 20})
	if err != nil {
		t.Fatal(err)
	}
	routed := func(r Route) Call {
		return Call{Turn: func(ctx context.Context, _ TurnCost, send func(context.Context) TurnReport) error {
			return send(WithRoute(ctx, r)).Err
		}}
	}
	for _, replica := range []int{1, 0, 1} {
		if _, err := b.Run(context.Background(), agent.Request{Prompt: "p"}, routed(Route{Replica: replica})); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	for _, r := range eng.Log() {
		got = append(got, r.Replica)
	}
	if fmt.Sprint(got) != "[1 0 1]" {
		t.Fatalf("requests went to replicas %v, want [1 0 1]", got)
	}
	res, err := b.Run(context.Background(), agent.Request{Prompt: "p"}, routed(Route{Fallback: fb}))
	if err != nil {
		t.Fatal(err)
	}
	if log := spare.Log(); len(log) != 1 || log[0].Model != "spare-model" || res.Model != "spare-model" {
		t.Fatalf("fallback: spare saw %+v, result model %q", log, res.Model)
	}
	// The turn is priced by the backend that served it (the primary has no prices).
	want := (float64(res.Usage.Input)*10 + float64(res.Usage.Output)*20) / 1e6
	if res.Cost == nil || *res.Cost != want || want == 0 {
		t.Fatalf("cost %v, want the fallback's price %v", res.Cost, want)
	}
}

// An endpoint without json_schema response formats gets the schema as instructions after
// its first 400, and the JSON comes out of the reply's fenced block; later calls ask with
// instructions at once.
func TestOpenAISchemaInstructionsFallback(t *testing.T) {
	url, eng := startFake(t, testkit.Config{NoJSONSchema: true, KeepRequests: true})
	b := newTestOpenAI(t, url)
	sch := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}, "required": []any{"n"}}
	for i := range 2 {
		res, err := b.Run(context.Background(), agent.Request{System: "be exact", Prompt: "count", Schema: sch}, Call{})
		if err != nil || res.Status != agent.StatusOK || !strings.Contains(res.Text, "```json") {
			t.Fatalf("call %d: %+v %v", i, res, err)
		}
	}
	log := eng.Log()
	if len(log) != 3 || log[0].Status != 400 || log[1].Status != 200 || log[2].Status != 200 {
		var st []int
		for _, r := range log {
			st = append(st, r.Status)
		}
		t.Fatalf("engine statuses %v, want [400 200 200]", st)
	}
	sys := string(log[2].Messages[0].Content)
	if !strings.HasPrefix(sys, "be exact\n\n") || !strings.Contains(sys, `<json-schema>`) {
		t.Fatalf("system message %q", sys)
	}
}

// Two calls with the same inputs open two sessions when they are two calls of a run, and
// the session keeps the conversation without this call's schema instructions.
func TestOpenAISessionsPerCall(t *testing.T) {
	url, _ := startFake(t, testkit.Config{DefaultMaxTokens: 4})
	b, err := NewOpenAI(OpenAIConfig{BaseURL: url, Model: "m", StructuredOutput: "instructions"})
	if err != nil {
		t.Fatal(err)
	}
	req := agent.Request{System: "be brief", Prompt: "same question"}
	a, err := b.Run(context.Background(), req, Call{Key: "run-1/main/1"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.Run(context.Background(), req, Call{Key: "run-1/main/2"})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := b.Run(context.Background(), req, Call{Key: "run-1/main/1"})
	if a.SessionID == c.SessionID || again.SessionID != a.SessionID {
		t.Fatalf("sessions %q, %q and (the first call again) %q", a.SessionID, c.SessionID, again.SessionID)
	}
	structured, err := b.Run(context.Background(), agent.Request{System: "be brief", Prompt: "json", Schema: map[string]any{"type": "object"}}, Call{Key: "run-1/main/3"})
	if err != nil {
		t.Fatal(err)
	}
	if got := structured.Transcript[0]; got.Role != "system" || got.Content != "be brief" {
		t.Fatalf("the session kept %+v as its system message", got)
	}
}

func TestSchemaFormatRefused(t *testing.T) {
	for _, tc := range []struct {
		status int
		msg    string
		want   bool
	}{
		{400, "response_format: json_schema is not supported by this server", true},
		{400, "Unrecognized request argument supplied: response_format", true},
		{400, "response_format.type: 'json_schema' must be one of text, json_object", true},
		{400, "Invalid schema for response_format 'output': In context=(), 'required' is required", false},
		{400, "max_tokens is too large", false},
		{500, "response_format not supported", false},
	} {
		err := &HTTPError{Status: tc.status, Message: tc.msg}
		if got := schemaFormatRefused(err); got != tc.want {
			t.Errorf("%d %q: %t, want %t", tc.status, tc.msg, got, tc.want)
		}
	}
}
