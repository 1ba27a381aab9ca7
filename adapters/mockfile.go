package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/agent"
)

// MockFileModel is the model name mockfile reports when the request names none.
const MockFileModel = "mockfile-1"

// replyFields lists the fields a scripted reply may have, for error messages.
const replyFields = "status, output, text, tokens, usage, delay_ms, findings, error, cost"

func isReplyField(k string) bool {
	switch k {
	case "status", "output", "text", "tokens", "usage", "delay_ms", "findings", "error", "cost":
		return true
	}
	return false
}

// scriptedReply is one reply of a mock file.
type scriptedReply struct {
	Status   agent.Status    `json:"status"`
	Output   json.RawMessage `json:"output"`
	Text     *string         `json:"text"`
	Tokens   *int            `json:"tokens"`
	Usage    *agent.Usage    `json:"usage"`
	DelayMS  int             `json:"delay_ms"`
	Findings []agent.Finding `json:"findings"`
	Error    string          `json:"error"`
	Cost     *float64        `json:"cost"`
}

// MockFile answers agent calls with replies scripted in a JSON file (--mock-file), matched
// by agent name:
//
//	{"responses": {"<name>": {"status": "ok|error|timed_out", "output": <any>, "text": "...",
//	   "tokens": n, "usage": {"input": n, "output": n}, "delay_ms": n, "findings": [...],
//	   "error": "...", "cost": usd}},
//	 "default": {...}}
//
// A request named N gets responses[N]; else the reply of the longest key K such that N
// starts with K followed by a space ("review" answers "review src/a.go"); else "default";
// else the call fails with an error saying how to add a reply. Every field is optional:
// status defaults to ok (or error when "error" is set); without "output" a request with a
// schema gets a valid example of it; without "usage" or "tokens" usage is estimated as the
// mock does. A scripted error or timed_out status is a Result, not a Go error: the agent
// "ran" and reported it. MockFile is safe for concurrent use.
type MockFile struct {
	id      string // registry id; "" = "mockfile"
	path    string
	replies map[string]*scriptedReply
	byLen   []string // keys, longest first, for prefix matching
	def     *scriptedReply
	schemas schemaCache

	mu        sync.Mutex
	matched   int
	defaulted int
	unmatched int
	used      map[string]bool
}

// MockFileCoverage counts how a MockFile's replies were used, so a test can assert that
// its script exercised what it meant to.
type MockFileCoverage struct {
	Matched   int      // calls answered by a named reply (exact or prefix)
	Default   int      // calls answered by the default reply
	Unmatched int      // calls with no reply, which failed
	Unused    []string // reply keys no call matched, sorted
}

// OpenMockFile reads and parses the mock file at path.
func OpenMockFile(path string) (*MockFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mock file: %w", err)
	}
	return NewMockFile(path, data)
}

// NewMockFile parses a mock file; path only names it in messages. Unknown fields, bad
// statuses and negative numbers are errors naming the file and the reply.
func NewMockFile(path string, data []byte) (*MockFile, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("mock file %s: not a JSON object: %v", path, err)
	}
	f := &MockFile{path: path, replies: map[string]*scriptedReply{}, used: map[string]bool{}}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		switch k {
		case "responses":
			var rs map[string]json.RawMessage
			if err := json.Unmarshal(top[k], &rs); err != nil {
				return nil, fmt.Errorf("mock file %s: \"responses\" must be an object mapping agent names to replies: %v", path, err)
			}
			for _, name := range slices.Sorted(maps.Keys(rs)) {
				where := fmt.Sprintf("responses[%q]", name)
				if strings.TrimSpace(name) == "" {
					return nil, fmt.Errorf("mock file %s: %s: an empty agent name never matches; use \"default\" for a catch-all reply", path, where)
				}
				r, err := parseReply(rs[name])
				if err != nil {
					return nil, fmt.Errorf("mock file %s: %s: %v", path, where, err)
				}
				f.replies[name] = r
				f.byLen = append(f.byLen, name)
			}
		case "default":
			r, err := parseReply(top[k])
			if err != nil {
				return nil, fmt.Errorf("mock file %s: default: %v", path, err)
			}
			f.def = r
		default:
			return nil, fmt.Errorf("mock file %s: unknown field %q (known fields: responses, default)", path, k)
		}
	}
	sort.SliceStable(f.byLen, func(i, j int) bool { return len(f.byLen[i]) > len(f.byLen[j]) })
	return f, nil
}

func parseReply(raw json.RawMessage) (*scriptedReply, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("a reply must be a JSON object: %v", err)
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !isReplyField(k) {
			return nil, fmt.Errorf("unknown field %q (known fields: %s)", k, replyFields)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // reaches into usage and findings
	var r scriptedReply
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if r.Status == "" {
		r.Status = agent.StatusOK
		if r.Error != "" {
			r.Status = agent.StatusError
		}
	}
	switch r.Status {
	case agent.StatusOK:
		if r.Error != "" {
			return nil, fmt.Errorf("\"error\" is set but status is \"ok\"; set \"status\": \"error\" or drop \"error\"")
		}
	case agent.StatusError, agent.StatusTimedOut:
	default:
		return nil, fmt.Errorf("status %q: want \"ok\", \"error\" or \"timed_out\"", r.Status)
	}
	if r.DelayMS < 0 {
		return nil, fmt.Errorf("delay_ms %d: want a number of milliseconds >= 0", r.DelayMS)
	}
	if r.Tokens != nil && *r.Tokens < 0 {
		return nil, fmt.Errorf("tokens %d: want a count >= 0", *r.Tokens)
	}
	if r.Usage != nil && (r.Usage.Input < 0 || r.Usage.Output < 0 || r.Usage.Cached < 0) {
		return nil, errors.New("usage: token counts must be >= 0")
	}
	if r.Tokens != nil && r.Usage != nil && *r.Tokens != r.Usage.Total() {
		return nil, fmt.Errorf("tokens %d disagrees with usage (input %d + output %d); give one of them",
			*r.Tokens, r.Usage.Input, r.Usage.Output)
	}
	return &r, nil
}

// ID implements Backend.
func (f *MockFile) ID() string {
	if f.id != "" {
		return f.id
	}
	return "mockfile"
}

// Named returns f registered as id (a [backends.NAME] of type mockfile).
func (f *MockFile) Named(id string) *MockFile {
	f.id = id
	return f
}

// Coverage reports how replies have been used so far.
func (f *MockFile) Coverage() MockFileCoverage {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := MockFileCoverage{Matched: f.matched, Default: f.defaulted, Unmatched: f.unmatched}
	for k := range f.replies {
		if !f.used[k] {
			c.Unused = append(c.Unused, k)
		}
	}
	sort.Strings(c.Unused)
	return c
}

// lookup finds the reply for an agent name and counts the outcome.
func (f *MockFile) lookup(name string) (*scriptedReply, bool) {
	key, ok := "", false
	if _, exact := f.replies[name]; exact {
		key, ok = name, true
	} else {
		for _, k := range f.byLen {
			if strings.HasPrefix(name, k+" ") {
				key, ok = k, true
				break
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case ok:
		f.matched++
		f.used[key] = true
		return f.replies[key], true
	case f.def != nil:
		f.defaulted++
		return f.def, true
	}
	f.unmatched++
	return nil, false
}

// Run implements Backend.
func (f *MockFile) Run(ctx context.Context, req agent.Request, call Call) (agent.Result, error) {
	if err := ctx.Err(); err != nil {
		return agent.Result{}, err
	}
	r, ok := f.lookup(req.Name)
	if !ok {
		return agent.Result{}, f.unmatchedError(req.Name)
	}
	var res agent.Result
	err := call.Do(ctx, TurnCost{Input: EstimateTokens(req.System) + EstimateTokens(req.Prompt), MaxOutput: req.MaxTokens},
		func(ctx context.Context) TurnReport {
			var err error
			res, err = f.reply(ctx, req, r)
			return TurnReport{Usage: res.Usage, Err: err}
		})
	return res, err
}

// reply is the scripted reply's one turn.
func (f *MockFile) reply(ctx context.Context, req agent.Request, r *scriptedReply) (agent.Result, error) {
	if err := wait(ctx, time.Duration(r.DelayMS)*time.Millisecond); err != nil {
		return agent.Result{}, err
	}

	model := req.Model
	if model == "" {
		model = MockFileModel
	}
	session, _ := sessionID(req, "mockfile")
	res := agent.Result{
		Status:    r.Status,
		Findings:  append([]agent.Finding(nil), r.Findings...),
		SessionID: session,
		Attempts:  1,
		Backend:   f.ID(),
		Model:     model,
	}
	if r.Text != nil {
		res.Text = *r.Text
	}
	var schemaText string
	if r.Status != agent.StatusOK {
		res.Error = r.Error
		if res.Error == "" {
			res.Error = fmt.Sprintf("scripted %s reply for agent %q in %s", r.Status, req.Name, f.path)
		}
	} else {
		var err error
		res.Output, schemaText, err = f.output(req, r, &res.Text)
		if err != nil {
			return agent.Result{}, err
		}
	}
	switch {
	case r.Usage != nil:
		res.Usage = *r.Usage
	case r.Tokens != nil:
		// A bare total is all output: that is what a scripted reply stands for.
		res.Usage = agent.Usage{Output: *r.Tokens}
	default:
		res.Usage = estimateUsage(req, schemaText, res.Text)
	}
	if r.Cost != nil {
		c := *r.Cost
		res.Cost = &c
	}
	return res, nil
}

// output decodes the scripted output, or makes a schema example when none is scripted, and
// fills in the text when the script gave none.
func (f *MockFile) output(req agent.Request, r *scriptedReply, text *string) (any, string, error) {
	var out any
	var schemaText string
	switch {
	case len(r.Output) > 0:
		if err := json.Unmarshal(r.Output, &out); err != nil {
			return nil, "", fmt.Errorf("mockfile: reply for agent %q in %s: output: %v", req.Name, f.path, err)
		}
		if req.Schema != nil {
			// Only for the usage estimate; the runtime validates the scripted output, so a
			// script can feed a bad one on purpose to exercise schema retries.
			_, schemaText, _ = f.schemas.compile(req.Schema)
		}
	case req.Schema != nil:
		v, js, st, err := f.schemas.example(req)
		if err != nil {
			return nil, "", fmt.Errorf("mockfile: reply for agent %q in %s has no output and the request's schema cannot be exemplified: %w", req.Name, f.path, err)
		}
		if r.Text == nil {
			*text = js
		}
		return v, st, nil
	default:
		return *text, "", nil
	}
	if r.Text == nil {
		if s, ok := out.(string); ok {
			*text = s
		} else {
			b, _ := json.Marshal(out)
			*text = string(b)
		}
	}
	return out, schemaText, nil
}

func (f *MockFile) unmatchedError(name string) error {
	if name == "" {
		return fmt.Errorf("mockfile: no scripted reply for an agent without a name in %s: give the agent a name= "+
			"and add it under \"responses\", or add a \"default\" reply", f.path)
	}
	hint := ""
	if first, _, cut := strings.Cut(name, " "); cut {
		hint = fmt.Sprintf(", or %q to answer every agent whose name starts with %q", first, first+" ")
	}
	return fmt.Errorf("mockfile: no scripted reply for agent name %q in %s: add \"responses\": {%q: {\"output\": ...}}%s, "+
		"or a \"default\" reply", name, f.path, name, hint)
}

// DefaultModel is the model of calls that name none (the scheduler's lane).
func (f *MockFile) DefaultModel() string { return MockFileModel }
