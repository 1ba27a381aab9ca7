package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Status is the outcome of one agent call as a script sees it.
type Status string

// The statuses of SPEC §2.1.
const (
	StatusOK        Status = "ok"
	StatusError     Status = "error"
	StatusCancelled Status = "cancelled"
	StatusTimedOut  Status = "timed_out"
)

// Class orders work in the admission scheduler.
type Class string

// The two classes of SPEC §7.
const (
	ClassInteractive Class = "interactive"
	ClassBatch       Class = "batch"
)

// Request is one agent call as the script asked for it, after validation.
type Request struct {
	Prompt      string   `json:"prompt"`
	System      string   `json:"system,omitempty"`
	Schema      any      `json:"schema,omitempty"` // decoded JSON Schema, nil when none
	Model       string   `json:"model,omitempty"`
	Backend     string   `json:"backend,omitempty"`
	Name        string   `json:"name,omitempty"`
	Role        string   `json:"role,omitempty"`
	Description string   `json:"description,omitempty"`
	Tools       []string `json:"tools,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TimeoutMS   int      `json:"timeout_ms,omitempty"`
	Retries     int      `json:"retries,omitempty"`
	SessionID   string   `json:"session_id,omitempty"`
	Class       Class    `json:"class,omitempty"`
}

// canonical is the part of a Request that decides what the call computes. Timeouts, retry
// policy and scheduling class change how a call is run, not what it returns, so they are
// left out of the input hash.
type canonical struct {
	Backend     string   `json:"backend"`
	Model       string   `json:"model"`
	System      string   `json:"system"`
	Prompt      string   `json:"prompt"`
	Schema      any      `json:"schema"`
	Tools       []string `json:"tools"`
	MaxTokens   int      `json:"max_tokens"`
	Temperature *float64 `json:"temperature"`
	SessionID   string   `json:"session_id"`
	Name        string   `json:"name"`
}

// Hash returns the SHA-256 of the canonical form of the request, hex encoded. encoding/json
// sorts map keys, so a schema decoded into maps hashes the same however it was written.
func (r Request) Hash() string {
	b, err := json.Marshal(canonical{
		Backend: r.Backend, Model: r.Model, System: r.System, Prompt: r.Prompt,
		Schema: r.Schema, Tools: r.Tools, MaxTokens: r.MaxTokens,
		Temperature: r.Temperature, SessionID: r.SessionID, Name: r.Name,
	})
	if err != nil {
		// A schema that came from Lua or JSON always marshals; make a broken one visible
		// instead of hashing it as empty.
		b = []byte("unhashable:" + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Usage counts the tokens of one call (or a sum of calls).
type Usage struct {
	Input  int `json:"input"`
	Output int `json:"output"`
	Cached int `json:"cached"`
}

// Total is input plus output tokens.
func (u Usage) Total() int { return u.Input + u.Output }

// Add returns the sum of two usages.
func (u Usage) Add(o Usage) Usage {
	return Usage{Input: u.Input + o.Input, Output: u.Output + o.Output, Cached: u.Cached + o.Cached}
}

// Finding is one structured observation an agent reported.
type Finding struct {
	Kind     string `json:"kind,omitempty"`
	Severity string `json:"severity,omitempty"`
	Title    string `json:"title"`
	Detail   string `json:"detail,omitempty"`
}

// Result is what one agent call produced. Output is the decoded JSON when the request had a
// schema, otherwise the final text.
type Result struct {
	Status    Status    `json:"status"`
	Output    any       `json:"output"`
	Text      string    `json:"text"`
	Error     string    `json:"error,omitempty"`
	Usage     Usage     `json:"usage"`
	Cost      *float64  `json:"cost,omitempty"`
	Findings  []Finding `json:"findings,omitempty"`
	SessionID string    `json:"session_id,omitempty"`
	Cached    bool      `json:"cached"`
	Attempts  int       `json:"attempts"`
	Backend   string    `json:"backend"`
	Model     string    `json:"model"`
}

// OK reports whether the call succeeded.
func (r Result) OK() bool { return r.Status == StatusOK }
