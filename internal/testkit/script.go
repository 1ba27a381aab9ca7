package testkit

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/luft-run/luft/internal/schema"
)

// ToolRule scripts tool calls. When the last user message matches the rule (Match as a
// substring, or Pattern), the engine answers with Calls as assistant tool_calls instead
// of text; once the conversation holds Rounds assistant tool-call turns after that user
// message, the engine answers text (Reply, or generated text). Rules are tried in order;
// the first match wins. An empty Match with a nil Pattern matches every user message. A
// rule without Calls answers Reply at once (a scripted, possibly wrong, answer).
type ToolRule struct {
	Match   string
	Pattern *regexp.Regexp
	Calls   []ScriptedCall
	Rounds  int    // tool-call turns before the text answer; default 1
	Reply   string // the text answer after the tool rounds; "" generates text
	// Offered makes the calls only when the request offers every tool they name, as a
	// model calls only the tools it is given; otherwise the rule answers text at once.
	Offered bool
	// FirstOffered makes Calls alternatives, tried in order: each round the rule makes
	// only the first call whose tool the request offers, so one rule drives clients that
	// name the same tool differently (a coding agent's shell tool is exec_command, shell
	// or Bash, each with its own arguments). When the request offers none of them the
	// rule answers text at once, as with Offered.
	FirstOffered bool
}

// offers reports whether req offers a function tool of that name.
func offers(req *ChatRequest, name string) bool {
	for _, t := range req.Tools {
		if t.Function.Name == name {
			return true
		}
	}
	return false
}

// offered reports whether req offers every tool r's calls name.
func (r *ToolRule) offered(req *ChatRequest) bool {
	for _, c := range r.Calls {
		if !offers(req, c.Name) {
			return false
		}
	}
	return true
}

// callsFor returns the calls r makes for req: all of Calls, or none when Offered (or
// FirstOffered) finds them not offered, or with FirstOffered the first one offered.
func (r *ToolRule) callsFor(req *ChatRequest) []ScriptedCall {
	switch {
	case r.FirstOffered:
		for i, c := range r.Calls {
			if offers(req, c.Name) {
				return r.Calls[i : i+1]
			}
		}
		return nil
	case r.Offered && !r.offered(req):
		return nil
	}
	return r.Calls
}

// ScriptedCall is one tool call a rule makes. Arguments is the JSON object sent as the
// function arguments ("{}" when empty).
type ScriptedCall struct {
	Name      string
	Arguments string
	// Verbatim sends Arguments as they are, even "" (as some models do for a tool
	// without parameters), instead of "{}" for an empty one.
	Verbatim bool
}

func (r *ToolRule) matches(text string) bool {
	if r.Pattern != nil {
		return r.Pattern.MatchString(text)
	}
	return strings.Contains(text, r.Match)
}

// answer is what the engine will generate for a request, fixed at arrival.
type answer struct {
	content   string
	toolCalls []ToolCall
	tokens    int // completion tokens
	finish    string
}

// outputWords are one token each under the engine's tokenizer, so generated text of n
// words is exactly n completion tokens.
var outputWords = []string{
	"the", "fake", "tok", "slot", "run", "turn", "tool", "luft", "data", "rate",
	"load", "wait", "plan", "step", "done", "next", "more", "ok", "fast", "bit",
}

// seedOf hashes the rendered conversation so every choice the engine makes (words, ids)
// is a function of the request alone.
func seedOf(req *ChatRequest) uint64 {
	h := fnv.New64a()
	for _, m := range req.Messages {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", m.Role, m.Content, m.ToolCallID)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(h, "%s\x00%s\x00%s\x00", c.ID, c.Function.Name, c.Function.Arguments)
		}
	}
	return h.Sum64()
}

func generateText(seed uint64, n int) string {
	if n <= 0 {
		return ""
	}
	var b strings.Builder
	x := seed | 1
	for i := 0; i < n; i++ {
		// xorshift64: cheap, deterministic, good enough to vary the words.
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(outputWords[x%uint64(len(outputWords))])
	}
	return b.String()
}

// toolChoice reads tool_choice: "none", "auto", "required", or a named function.
func toolChoice(raw json.RawMessage) (mode, forced string, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "auto", "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			return s, "", nil
		}
		return "", "", fmt.Errorf("tool_choice %q: want none, auto, required or a function", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Type != "function" || obj.Function.Name == "" {
		return "", "", fmt.Errorf("tool_choice: want a string or {\"type\":\"function\",\"function\":{\"name\":...}}")
	}
	return "function", obj.Function.Name, nil
}

// decide builds the answer: scripted tool calls, a forced tool call, structured output,
// or generated text of outTokens tokens.
func decide(req *ChatRequest, rules []ToolRule, outTokens int) answer {
	seed := seedOf(req)
	mode, forced, _ := toolChoice(req.ToolChoice) // validated earlier

	lastUser := -1
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			lastUser = i
			break
		}
	}
	rounds := 0
	for i := lastUser + 1; i < len(req.Messages); i++ {
		if m := req.Messages[i]; m.Role == "assistant" && len(m.ToolCalls) > 0 {
			rounds++
		}
	}
	afterTool := len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool"

	var rule *ToolRule
	if lastUser >= 0 {
		for i := range rules {
			if rules[i].matches(string(req.Messages[lastUser].Content)) {
				rule = &rules[i]
				break
			}
		}
	}
	var ruleCalls []ScriptedCall
	if rule != nil {
		ruleCalls = rule.callsFor(req)
	}
	var calls []ScriptedCall
	if mode != "none" {
		switch {
		case rule != nil && rounds < max(rule.Rounds, 1) && len(ruleCalls) > 0:
			calls = ruleCalls
		case !afterTool && mode == "function":
			calls = []ScriptedCall{{Name: forced}}
		case !afterTool && mode == "required" && len(req.Tools) > 0:
			calls = []ScriptedCall{{Name: req.Tools[0].Function.Name}}
		}
	}
	if len(calls) > 0 {
		a := answer{finish: "tool_calls"}
		for i, c := range calls {
			args := c.Arguments
			if strings.TrimSpace(args) == "" && !c.Verbatim {
				args = "{}"
			}
			a.toolCalls = append(a.toolCalls, ToolCall{
				ID:       fmt.Sprintf("call_%016x", seed^uint64(rounds+1)<<32^uint64(i+1)),
				Type:     "function",
				Function: FunctionCall{Name: c.Name, Arguments: args},
			})
			a.tokens += max(1, CountTokens(c.Name)+CountTokens(args))
		}
		return a
	}

	a := answer{finish: "stop"}
	switch {
	case rule != nil && rule.Reply != "" && (afterTool || len(ruleCalls) == 0):
		a.content = rule.Reply
		a.tokens = CountTokens(a.content)
	case req.ResponseFormat != nil && req.ResponseFormat.Type == "json_schema" && req.ResponseFormat.JSONSchema != nil:
		a.content = exampleJSON(req.ResponseFormat.JSONSchema.Schema, fmt.Sprintf("%x", seed))
		a.tokens = CountTokens(a.content)
	case schemaInPrompt(req) != "":
		a.content = "Here is the result:\n```json\n" + exampleJSON(json.RawMessage(schemaInPrompt(req)), fmt.Sprintf("%x", seed)) + "\n```"
		a.tokens = CountTokens(a.content)
	case req.ResponseFormat != nil && req.ResponseFormat.Type == "json_object":
		a.content = "{}"
		a.tokens = 1
	default:
		a.content = generateText(seed, outTokens)
		a.tokens = outTokens
	}
	return a
}

// schemaInPrompt returns the JSON Schema a message gives between <json-schema> tags (the
// way a client without response formats asks for structured output), or "".
func schemaInPrompt(req *ChatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		text := string(req.Messages[i].Content)
		a := strings.Index(text, "<json-schema>")
		b := strings.Index(text, "</json-schema>")
		if a >= 0 && b > a {
			return strings.TrimSpace(text[a+len("<json-schema>") : b])
		}
	}
	return ""
}

// exampleJSON returns a valid instance of the schema, or "{}" when none can be built.
func exampleJSON(raw json.RawMessage, seed string) string {
	if len(raw) == 0 {
		return "{}"
	}
	v, err := schema.Example([]byte(raw), seed)
	if err != nil {
		return "{}"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(b)
}
