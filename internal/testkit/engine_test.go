package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func intp(n int) *int { return &n }

func userReq(text string, maxTokens int) *ChatRequest {
	return &ChatRequest{
		Model:     "m",
		Messages:  []Message{{Role: "user", Content: Content(text)}},
		MaxTokens: intp(maxTokens),
	}
}

// words returns n distinct 4-character words: exactly n tokens.
func words(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(prefix)
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(string(rune('a' + i/26%26)))
		b.WriteString(string(rune('a' + i/676%26)))
	}
	return b.String()
}

// sim submits requests to an engine on a virtual clock and collects the results.
type sim struct {
	t       *testing.T
	clock   *VirtualClock
	engine  *Engine
	results map[string]*Result // by caller label
}

func newSim(t *testing.T, cfg Config) *sim {
	c := NewVirtualClock(t0)
	cfg.Clock = c
	return &sim{t: t, clock: c, engine: NewEngine(cfg), results: map[string]*Result{}}
}

func (s *sim) submit(name string, req *ChatRequest, opts ...CallOption) func() {
	return s.engine.Submit(req, func(r *Result) {
		if _, dup := s.results[name]; dup {
			s.t.Errorf("%s: done called twice", name)
		}
		s.results[name] = r
	}, append(opts, WithCaller(name))...)
}

func (s *sim) run() { s.clock.Run(100000) }

func (s *sim) result(name string) *Result {
	s.t.Helper()
	r, ok := s.results[name]
	if !ok {
		s.t.Fatalf("%s: no result", name)
	}
	return r
}

func TestTokenizer(t *testing.T) {
	for text, want := range map[string]int{
		"":              0,
		"a b c":         3,
		"hello":         2, // 5 runes: two tokens
		"four":          1,
		"  two\twords ": 3, // "two" + "words"(2)
		"héllo wörld":   4,
		words("x", 100): 100,
	} {
		if got := CountTokens(text); got != want {
			t.Errorf("CountTokens(%q) = %d, want %d", text, got, want)
		}
		if got := len(Tokenize(text)); got != CountTokens(text) {
			t.Errorf("Tokenize(%q) has %d tokens, CountTokens says %d", text, got, CountTokens(text))
		}
	}
	if got := strings.Join(Tokenize("hello wörld"), "|"); got != "hell|o|wörl|d" {
		t.Errorf("Tokenize = %q", got)
	}
}

func TestPromptAndOutputTokens(t *testing.T) {
	s := newSim(t, Config{DefaultMaxTokens: 7})
	// Markers: <|user|> and the closing <|assistant|>: 2 tokens around the content.
	s.submit("a", userReq(words("w", 10), 5))
	req := userReq("hi", 1)
	req.MaxTokens = nil
	s.submit("b", req)
	s.run()
	a, b := s.result("a"), s.result("b")
	if u := a.Response.Usage; u.PromptTokens != 12 || u.CompletionTokens != 5 || u.TotalTokens != 17 {
		t.Fatalf("usage %+v, want prompt 12 completion 5", u)
	}
	if got := CountTokens(string(a.Response.Choices[0].Message.Content)); got != 5 {
		t.Fatalf("content has %d tokens, usage says 5", got)
	}
	if b.Response.Usage.CompletionTokens != 7 {
		t.Fatalf("without max_tokens: %d completion tokens, want the default 7", b.Response.Usage.CompletionTokens)
	}
	// Determinism: the same conversation gives the same text.
	s.submit("a2", userReq(words("w", 10), 5))
	s.run()
	if s.result("a2").Response.Choices[0].Message.Content != a.Response.Choices[0].Message.Content {
		t.Fatal("same request, different content")
	}
}

func TestSlotsBoundConcurrencyAndQueueWait(t *testing.T) {
	s := newSim(t, Config{Replicas: 1, Slots: 2, DecodePerToken: 10 * time.Millisecond, CacheTokens: -1})
	names := []string{"r1", "r2", "r3", "r4", "r5"}
	for _, n := range names {
		s.submit(n, userReq("same prompt", 10)) // 10 tokens × 10ms = 100ms each
	}
	if st := s.engine.Stats(); st.Replicas[0].Busy != 2 || st.Replicas[0].Queued != 3 {
		t.Fatalf("stats after submit: %+v", st)
	}
	s.run()
	want := map[string]time.Duration{"r1": 0, "r2": 0, "r3": 100 * time.Millisecond, "r4": 100 * time.Millisecond, "r5": 200 * time.Millisecond}
	for _, n := range names {
		rec := s.result(n).Record
		if rec.QueueWait != want[n] {
			t.Errorf("%s: queue wait %v, want %v", n, rec.QueueWait, want[n])
		}
		if got := rec.Finish.Sub(rec.Start); got != 100*time.Millisecond {
			t.Errorf("%s: service time %v, want 100ms", n, got)
		}
	}
	// Concurrency never exceeds the slots: sweep the intervals from the log.
	log := s.engine.Log()
	for _, a := range log {
		overlap := 0
		for _, b := range log {
			if !b.Start.After(a.Start) && b.Finish.After(a.Start) {
				overlap++
			}
		}
		if overlap > 2 {
			t.Fatalf("%d requests running at %v with 2 slots", overlap, a.Start.Sub(t0))
		}
	}
	if last := log[len(log)-1]; last.Finish.Sub(t0) != 300*time.Millisecond {
		t.Fatalf("makespan %v, want 300ms", last.Finish.Sub(t0))
	}
}

func TestRoutingAcrossReplicas(t *testing.T) {
	s := newSim(t, Config{Replicas: 2, Slots: 1, DecodePerToken: time.Millisecond})
	s.submit("a", userReq("x", 10))
	s.submit("b", userReq("y", 10))
	s.submit("c", userReq("z", 10), OnReplica(0))
	s.run()
	if a, b := s.result("a").Record.Replica, s.result("b").Record.Replica; a != 0 || b != 1 {
		t.Fatalf("least-loaded routing put a on %d and b on %d", a, b)
	}
	if c := s.result("c").Record; c.Replica != 0 || c.QueueWait != 10*time.Millisecond {
		t.Fatalf("pinned request: replica %d wait %v, want replica 0 behind a", c.Replica, c.QueueWait)
	}
	s.submit("bad", userReq("x", 1), OnReplica(5))
	if r := s.result("bad"); r.Status != http.StatusBadRequest {
		t.Fatalf("unknown replica: status %d", r.Status)
	}
}

func TestMaxWaitingAnswers503(t *testing.T) {
	s := newSim(t, Config{Slots: 1, MaxWaiting: 1, DecodePerToken: time.Millisecond})
	s.submit("a", userReq("x", 10))
	s.submit("b", userReq("x", 10))
	s.submit("c", userReq("x", 10))
	r := s.result("c") // refused synchronously
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("x-request-id") == "" {
		t.Fatalf("overflow: status %d headers %v", r.Status, r.Header)
	}
	s.run()
	if s.result("b").Status != http.StatusOK {
		t.Fatal("queued request did not complete")
	}
}

func TestPrefixCacheHitReducesPrefill(t *testing.T) {
	cfg := Config{Replicas: 2, Slots: 4, PrefillPerToken: time.Millisecond, BlockSize: 16}
	s := newSim(t, cfg)
	system := words("s", 200) // 200 tokens
	conv := func(user string) *ChatRequest {
		return &ChatRequest{Model: "m", MaxTokens: intp(1), Messages: []Message{
			{Role: "system", Content: Content(system)},
			{Role: "user", Content: Content(user)},
		}}
	}
	s.submit("first", conv(words("u", 30)), OnReplica(0))
	s.run()
	first := s.result("first")
	if first.Record.CachedTokens != 0 || first.Response.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("cold cache reported %d cached tokens", first.Record.CachedTokens)
	}
	prompt := first.Record.PromptTokens // 1 + 200 + 1 + 30 + 1
	if prompt != 233 || first.Record.Prefill != 233*time.Millisecond {
		t.Fatalf("first: prompt %d prefill %v", prompt, first.Record.Prefill)
	}

	// Shares <|system|> + 200 words + <|user|> = 202 tokens: 12 full blocks = 192 tokens.
	s.submit("sibling", conv(words("v", 30)), OnReplica(0))
	// The same prompt on the other replica: that replica's cache is cold.
	s.submit("elsewhere", conv(words("v", 30)), OnReplica(1))
	s.run()
	sib := s.result("sibling")
	if sib.Record.CachedTokens != 192 || sib.Response.Usage.PromptTokensDetails.CachedTokens != 192 {
		t.Fatalf("sibling: %d cached tokens, want 192", sib.Record.CachedTokens)
	}
	if want := time.Duration(233-192) * time.Millisecond; sib.Record.Prefill != want {
		t.Fatalf("sibling prefill %v, want %v", sib.Record.Prefill, want)
	}
	if c := s.result("elsewhere").Record.CachedTokens; c != 0 {
		t.Fatalf("other replica reported %d cached tokens", c)
	}

	// The next turn of the first conversation extends its prompt: the whole previous
	// prompt (233 tokens → 14 blocks = 224) is cached.
	next := conv(words("u", 30))
	next.Messages = append(next.Messages,
		Message{Role: "assistant", Content: first.Response.Choices[0].Message.Content},
		Message{Role: "user", Content: "and then"})
	s.submit("next", next, OnReplica(0))
	// An identical prompt hits all its full blocks.
	s.submit("again", conv(words("u", 30)), OnReplica(0))
	s.run()
	if c := s.result("next").Record.CachedTokens; c != 224 {
		t.Fatalf("next turn: %d cached tokens, want 224", c)
	}
	if c := s.result("again").Record.CachedTokens; c != 224 {
		t.Fatalf("identical prompt: %d cached tokens, want 224 (all but the last block)", c)
	}
}

func TestPrefixCacheEvictsLRU(t *testing.T) {
	// Room for 20 blocks of 16: one 233-token prompt (14 blocks) fits, two do not.
	s := newSim(t, Config{CacheTokens: 320, BlockSize: 16})
	a := &ChatRequest{Model: "m", MaxTokens: intp(1), Messages: []Message{{Role: "user", Content: Content(words("a", 230))}}}
	b := &ChatRequest{Model: "m", MaxTokens: intp(1), Messages: []Message{{Role: "user", Content: Content(words("b", 230))}}}
	s.submit("a1", a)
	s.run()
	s.submit("b1", b)
	s.run()
	s.submit("a2", a)
	s.run()
	if got := s.engine.Stats().Replicas[0].CachedBlocks; got > 20 {
		t.Fatalf("cache holds %d blocks, capacity 20", got)
	}
	// b's 14 blocks pushed out a's tail: a keeps only its 6 most recently used (root) blocks.
	if c := s.result("a2").Record.CachedTokens; c != 6*16 {
		t.Fatalf("a after eviction: %d cached tokens, want 96", c)
	}
}

func TestLoadFactorSlowsDecode(t *testing.T) {
	s := newSim(t, Config{Slots: 3, DecodePerToken: time.Millisecond, LoadFactor: 2, CacheTokens: -1})
	s.submit("a", userReq("x", 100))
	s.submit("b", userReq("x", 100))
	s.submit("c", userReq("x", 100))
	s.run()
	for name, want := range map[string]time.Duration{"a": 100 * time.Millisecond, "b": 150 * time.Millisecond, "c": 200 * time.Millisecond} {
		if got := s.result(name).Record.Decode; got != want {
			t.Errorf("%s: decode %v, want %v", name, got, want)
		}
	}
}

func TestAbandonFreesSlotAndQueue(t *testing.T) {
	s := newSim(t, Config{Slots: 1, DecodePerToken: time.Millisecond, CacheTokens: -1})
	cancelA := s.submit("a", userReq("x", 100))
	cancelB := s.submit("b", userReq("x", 100))
	s.submit("c", userReq("x", 100))
	cancelB() // queued
	s.clock.Advance(40 * time.Millisecond)
	cancelA() // running: c takes the slot now
	cancelA() // idempotent
	s.run()
	if s.result("a").Status != 499 || s.result("b").Status != 499 {
		t.Fatalf("abandoned: a %d, b %d", s.result("a").Status, s.result("b").Status)
	}
	c := s.result("c").Record
	if c.Status != 200 || c.QueueWait != 40*time.Millisecond {
		t.Fatalf("c: status %d wait %v, want 200 after 40ms", c.Status, c.QueueWait)
	}
}

func TestToolCallScripting(t *testing.T) {
	rules := []ToolRule{
		{Match: "weather", Calls: []ScriptedCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}, Reply: "It is sunny in Paris."},
		{Match: "research", Rounds: 2, Calls: []ScriptedCall{{Name: "search", Arguments: `{"q":"x"}`}, {Name: "fetch"}}},
	}
	tools := []Tool{
		{Type: "function", Function: FunctionDef{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object"}`)}},
		{Type: "function", Function: FunctionDef{Name: "search"}},
		{Type: "function", Function: FunctionDef{Name: "fetch"}},
	}
	s := newSim(t, Config{ToolRules: rules})
	req := &ChatRequest{Model: "m", Tools: tools, Messages: []Message{
		{Role: "system", Content: "You are helpful."},
		{Role: "user", Content: "What is the weather?"},
	}}
	s.submit("turn1", req)
	s.run()
	r1 := s.result("turn1").Response
	msg := r1.Choices[0].Message
	if r1.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.Content != "" {
		t.Fatalf("turn 1: %+v", r1.Choices[0])
	}
	call := msg.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.Function.Arguments != `{"city":"Paris"}` || call.Type != "function" || !strings.HasPrefix(call.ID, "call_") {
		t.Fatalf("tool call %+v", call)
	}
	if s.result("turn1").Record.ToolCalls != 1 {
		t.Fatal("log does not count the tool call")
	}

	req2 := *req
	req2.Messages = append(append([]Message(nil), req.Messages...), msg,
		Message{Role: "tool", ToolCallID: call.ID, Content: `{"sky":"clear"}`})
	s.submit("turn2", &req2)
	s.run()
	r2 := s.result("turn2").Response.Choices[0]
	if r2.FinishReason != "stop" || r2.Message.Content != "It is sunny in Paris." || len(r2.Message.ToolCalls) != 0 {
		t.Fatalf("turn 2: %+v", r2)
	}

	// Two rounds, two calls each, then generated text.
	conv := []Message{{Role: "user", Content: "do research"}}
	for round := 1; round <= 3; round++ {
		name := "research" + string(rune('0'+round))
		s.submit(name, &ChatRequest{Model: "m", Tools: tools, Messages: conv, MaxTokens: intp(4)})
		s.run()
		c := s.result(name).Response.Choices[0]
		if round <= 2 {
			if len(c.Message.ToolCalls) != 2 || c.Message.ToolCalls[1].Function.Arguments != "{}" {
				t.Fatalf("round %d: %+v", round, c.Message)
			}
			conv = append(conv, c.Message)
			for _, tc := range c.Message.ToolCalls {
				conv = append(conv, Message{Role: "tool", ToolCallID: tc.ID, Content: "result"})
			}
			continue
		}
		if c.FinishReason != "stop" || CountTokens(string(c.Message.Content)) != 4 {
			t.Fatalf("after two rounds: %+v", c)
		}
	}

	// No rule matches: text. tool_choice none: text even when a rule matches.
	s.submit("plain", &ChatRequest{Model: "m", Tools: tools, Messages: []Message{{Role: "user", Content: "hello"}}})
	none := &ChatRequest{Model: "m", Tools: tools, ToolChoice: json.RawMessage(`"none"`), Messages: req.Messages}
	s.submit("none", none)
	forced := &ChatRequest{Model: "m", Tools: tools, Messages: []Message{{Role: "user", Content: "hello"}},
		ToolChoice: json.RawMessage(`{"type":"function","function":{"name":"fetch"}}`)}
	s.submit("forced", forced)
	s.run()
	for _, n := range []string{"plain", "none"} {
		if c := s.result(n).Response.Choices[0]; c.FinishReason != "stop" || len(c.Message.ToolCalls) != 0 {
			t.Errorf("%s: %+v", n, c)
		}
	}
	if c := s.result("forced").Response.Choices[0]; len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Name != "fetch" {
		t.Errorf("forced tool_choice: %+v", c)
	}

	// A tool message must answer an earlier call.
	orphan := &ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: "x"}, {Role: "tool", ToolCallID: "call_nope", Content: "r"}}}
	s.submit("orphan", orphan)
	if r := s.result("orphan"); r.Status != http.StatusBadRequest || r.Error.Error.Type != "invalid_request_error" {
		t.Fatalf("orphan tool message: %d %+v", r.Status, r.Error)
	}
}

// TestToolRuleFirstOffered: a FirstOffered rule makes the first of its calls whose tool
// the request offers, one per round, for its rounds; offered none, it answers at once.
func TestToolRuleFirstOffered(t *testing.T) {
	rule := ToolRule{FirstOffered: true, Rounds: 2, Reply: "done", Calls: []ScriptedCall{
		{Name: "exec_command", Arguments: `{"cmd":"ls"}`}, {Name: "Bash", Arguments: `{"command":"ls"}`}}}
	s := newSim(t, Config{ToolRules: []ToolRule{rule}})
	offer := func(names ...string) []Tool {
		var out []Tool
		for _, n := range names {
			out = append(out, Tool{Type: "function", Function: FunctionDef{Name: n}})
		}
		return out
	}
	for name, c := range map[string]struct {
		tools []Tool
		want  string
	}{
		"both":   {offer("Read", "Bash", "exec_command"), "exec_command"},
		"second": {offer("Read", "Bash"), "Bash"},
		"none":   {offer("Read"), ""},
	} {
		conv := []Message{{Role: "user", Content: "list files"}}
		for round := 1; round <= 3; round++ {
			id := fmt.Sprintf("%s%d", name, round)
			s.submit(id, &ChatRequest{Model: "m", Tools: c.tools, Messages: conv})
			s.run()
			m := s.result(id).Response.Choices[0].Message
			if c.want == "" || round == 3 {
				if len(m.ToolCalls) != 0 || m.Content != "done" {
					t.Fatalf("%s round %d: %+v", name, round, m)
				}
				break
			}
			if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != c.want {
				t.Fatalf("%s round %d: %+v", name, round, m)
			}
			conv = append(conv, m, Message{Role: "tool", ToolCallID: m.ToolCalls[0].ID, Content: "a.txt"})
		}
	}
}

func TestStructuredOutput(t *testing.T) {
	s := newSim(t, Config{})
	schemaText := `{"type":"object","properties":{"title":{"type":"string"},"score":{"type":"integer","minimum":3}},"required":["title","score"],"additionalProperties":false}`
	req := userReq("rate this", 50)
	req.ResponseFormat = &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: "rating", Schema: json.RawMessage(schemaText), Strict: new(true)}}
	s.submit("json", req)
	bad := userReq("x", 5)
	bad.ResponseFormat = &ResponseFormat{Type: "json_schema"}
	s.submit("bad", bad)
	s.run()
	var v struct {
		Title *string `json:"title"`
		Score *int    `json:"score"`
	}
	r := s.result("json")
	content := string(r.Response.Choices[0].Message.Content)
	if err := json.Unmarshal([]byte(content), &v); err != nil || v.Title == nil || v.Score == nil || *v.Score < 3 {
		t.Fatalf("structured content %q: %v", content, err)
	}
	if r.Response.Usage.CompletionTokens != CountTokens(content) {
		t.Fatalf("completion tokens %d for %q", r.Response.Usage.CompletionTokens, content)
	}
	if s.result("bad").Status != http.StatusBadRequest {
		t.Fatal("json_schema without a name was accepted")
	}
}

func TestValidation(t *testing.T) {
	s := newSim(t, Config{Models: []string{"known"}})
	cases := map[string]*ChatRequest{
		"nomodel":   {Messages: []Message{{Role: "user", Content: "x"}}},
		"unknown":   {Model: "other", Messages: []Message{{Role: "user", Content: "x"}}},
		"empty":     {Model: "known"},
		"role":      {Model: "known", Messages: []Message{{Role: "wizard", Content: "x"}}},
		"maxtokens": {Model: "known", Messages: []Message{{Role: "user", Content: "x"}}, MaxTokens: intp(0)},
		"n":         {Model: "known", Messages: []Message{{Role: "user", Content: "x"}}, N: intp(2)},
		"choice":    {Model: "known", Messages: []Message{{Role: "user", Content: "x"}}, ToolChoice: json.RawMessage(`"sometimes"`)},
	}
	for name, req := range cases {
		s.submit(name, req)
		r := s.result(name)
		want := http.StatusBadRequest
		if name == "unknown" {
			want = http.StatusNotFound
		}
		if r.Status != want || r.Error == nil || r.Error.Error.Message == "" {
			t.Errorf("%s: status %d error %+v", name, r.Status, r.Error)
		}
	}
	if got := s.engine.Log(); len(got) != len(cases) {
		t.Fatalf("log has %d records for %d refusals", len(got), len(cases))
	}
}

func TestGroundTruthLog(t *testing.T) {
	var buf bytes.Buffer
	s := newSim(t, Config{
		Replicas: 2, Slots: 1, PrefillPerToken: time.Millisecond, DecodePerToken: 2 * time.Millisecond,
		Limits: Limits{RPM: 3}, Log: &buf,
	})
	s.submit("a", userReq("alpha beta", 10), WithRun("run-1"), WithClass("batch"))
	s.submit("b", userReq("gamma", 10), OnReplica(0))
	s.submit("c", userReq("delta", 10))
	s.submit("d", userReq("epsilon", 10)) // over the RPM limit
	s.run()
	log := s.engine.Log()
	if len(log) != 4 {
		t.Fatalf("%d records", len(log))
	}
	for i, r := range log {
		if r.Seq != int64(i+1) {
			t.Fatalf("log not in arrival order: %+v", log)
		}
	}
	a := log[0]
	// a: prompt "<|user|> alph a beta <|assistant|>" = 5 tokens, 5ms prefill, 20ms decode.
	if a.Caller != "a" || a.Run != "run-1" || a.Class != "batch" || a.Replica != 0 || a.Status != 200 ||
		a.PromptTokens != 5 || a.OutputTokens != 10 || a.CachedTokens != 0 || a.ChargedTokens != 15 ||
		!a.Start.Equal(t0) || a.FirstToken.Sub(t0) != 5*time.Millisecond || a.Finish.Sub(t0) != 25*time.Millisecond ||
		a.Prefill != 5*time.Millisecond || a.Decode != 20*time.Millisecond {
		t.Fatalf("record a: %+v", a)
	}
	if b := log[1]; b.Replica != 0 || b.QueueWait != 25*time.Millisecond {
		t.Fatalf("record b: %+v", b)
	}
	if c := log[2]; c.Replica != 1 || c.QueueWait != 0 {
		t.Fatalf("record c: %+v", c)
	}
	if d := log[3]; d.Status != 429 || d.Error != "requests" || d.Replica != -1 || !d.Start.IsZero() || d.RetryAfter <= 0 {
		t.Fatalf("record d: %+v", d)
	}

	// The JSONL stream holds the same records, in completion order.
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d JSONL lines", len(lines))
	}
	bySeq := map[int64]Record{}
	for _, l := range lines {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		bySeq[r.Seq] = r
	}
	for _, want := range log {
		got := bySeq[want.Seq]
		if !got.Arrival.Equal(want.Arrival) || !got.Finish.Equal(want.Finish) || got.QueueWait != want.QueueWait ||
			got.Status != want.Status || got.PromptTokens != want.PromptTokens || got.Replica != want.Replica {
			t.Fatalf("JSONL record %+v differs from %+v", got, want)
		}
	}
	for _, l := range lines {
		refused := strings.Contains(l, `"status":429`)
		if !strings.Contains(l, `"queue_wait_ns":`) || strings.Contains(l, `"start":`) != !refused {
			t.Fatalf("JSONL shape: %s", l)
		}
	}
	if s.engine.LogErr() != nil {
		t.Fatal(s.engine.LogErr())
	}
}
