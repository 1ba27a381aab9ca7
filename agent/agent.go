package agent

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
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

// Hash returns the SHA-256 of the canonical form of the request, hex encoded. Only what
// decides what the call computes is hashed: backend, model, system, prompt, schema,
// tools, max_tokens, temperature, session and name. Timeouts, retry policy and
// scheduling class change how a call is run, not what it returns, so they are left out.
// Every field is written with its length, so no two requests share an encoding; the
// schema is hashed as JSON, whose map keys encoding/json sorts.
func (r Request) Hash() string {
	h := sha256.New()
	var n [8]byte
	field := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("luft-request-v1")
	field(r.Backend)
	field(r.Model)
	field(r.System)
	field(r.Prompt)
	if r.Schema != nil {
		b, err := json.Marshal(r.Schema)
		if err != nil {
			// A schema that came from Lua or JSON always marshals; make a broken one
			// visible instead of hashing it as empty.
			b = []byte("unhashable:" + err.Error())
		}
		field(string(b))
	} else {
		field("")
	}
	binary.BigEndian.PutUint64(n[:], uint64(len(r.Tools)))
	h.Write(n[:])
	for _, t := range r.Tools {
		field(t)
	}
	field(strconv.Itoa(r.MaxTokens))
	if r.Temperature != nil {
		field(strconv.FormatFloat(*r.Temperature, 'g', -1, 64))
	} else {
		field("-")
	}
	field(r.SessionID)
	field(r.Name)
	return hex.EncodeToString(h.Sum(nil))
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
	// Transcript is the conversation an openai agent had, kept so that a later call with
	// its session_id can continue it (journaled with the result, so it survives resume).
	Transcript []Message `json:"transcript,omitempty"`
	// Header holds the response headers of the backend's last request (rate-limit
	// telemetry the scheduler learns budgets from); nil when the backend has none. It is
	// not journaled.
	Header http.Header `json:"-"`
}

// Message is one message of a kept conversation.
type Message struct {
	Role    string `json:"role"` // system, user or assistant
	Content string `json:"content"`
}

// OK reports whether the call succeeded.
func (r Result) OK() bool { return r.Status == StatusOK }
