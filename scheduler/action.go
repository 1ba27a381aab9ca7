package scheduler

import (
	"fmt"
	"time"

	"github.com/luft-run/luft/agent"
)

// TurnID names one turn in the decision core. The executor assigns it; a turn keeps its
// id across retries, which is how a retried turn keeps its rank.
type TurnID uint64

// Job is a turn as the decision core sees it: the runtime's Turn plus an identity and
// the times the core ranks it by.
type Job struct {
	ID TurnID
	Turn
	// EstOutput is the part of Turn.EstTokens expected as output (max_tokens); 0 =
	// unknown, then the lane's learned share is used. It matters only for lanes
	// with separate input and output buckets (Anthropic).
	EstOutput int
	// Arrival is when the turn asked to run; zero means the now of Submit.
	Arrival time.Time
	// RunStart is when the turn's run started, for ranking continuations by run age;
	// zero means the first time the core saw the run.
	RunStart time.Time
}

// Status is how a turn ended, as the decision core needs to know it.
type Status uint8

// The statuses of Result.
const (
	StatusOK          Status = iota // the turn ran; its usage is real
	StatusRateLimited               // HTTP 429: honour the wait, retry at the same rank
	StatusServerError               // 5xx, timeout, connection error: back off and retry
	StatusError                     // any other failure; the turn is over, no retry
	StatusCanceled                  // the caller gave up; the turn is over
)

var statusNames = [...]string{"ok", "rate_limited", "server_error", "error", "canceled"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// StatusFromHTTP classifies an HTTP status code; 0 means the request never got a
// response (a network error or timeout), which is retried like a 5xx. 408 and 409 are
// retried too, as the OpenAI and Anthropic SDKs do.
func StatusFromHTTP(code int) Status {
	switch {
	case code == 429:
		return StatusRateLimited
	case code == 0 || code >= 500 || code == 408 || code == 409:
		return StatusServerError
	case code >= 400:
		return StatusError
	}
	return StatusOK
}

// Result is how an admitted turn ended.
type Result struct {
	Status    Status
	Usage     agent.Usage
	Telemetry Telemetry // parsed response headers (ParseTelemetry); may be empty
}

// ActionKind says what the executor must do with an Action.
type ActionKind uint8

// The actions of the decision core.
const (
	// ActAdmit: send the turn now, to Action.Lane (the fallback lane when the turn's
	// own lane has an open circuit) and Action.Replica. Report it with Complete.
	ActAdmit ActionKind = iota + 1
	// ActWait: the turn is next in line but its lane's budget is short until
	// Action.Until (Reason says which budget). It stays queued; this is a notice for
	// the run's rate_limit{action: "wait"} event, sent once per wait.
	ActWait
	// ActRateLimit: the lane as a whole started waiting (lane-level rate_limit notice);
	// ID is zero.
	ActRateLimit
	// ActSuspend: the wait of the run's turn would exceed SuspendAfter. The core has
	// dropped every queued turn of Action.RunID (their Admit calls should fail with the
	// resume time Action.Until); turns already running finish normally.
	ActSuspend
	// ActRefuse: the turn will never run (Reason: oversize, retries_exhausted,
	// duplicate, or circuit_open for a turn with NoCircuitWait, Until then being when the
	// circuit half-opens). The core has forgotten it.
	ActRefuse
	// ActRetry: the admitted turn failed (429 or 5xx) and is queued again at its
	// original rank; it will not be admitted before Action.Until. Attempt is the
	// attempt about to be made (2 for the first retry). For agent_retry events.
	ActRetry
)

var actionNames = [...]string{"", "admit", "wait", "rate_limit", "suspend", "refuse", "retry"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && k > 0 {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", k)
}

// Action is one decision of the core for the executor to carry out.
type Action struct {
	Kind    ActionKind
	ID      TurnID
	RunID   string
	Lane    string
	Replica int
	Until   time.Time
	Reason  string
	Attempt int
}

func (a Action) String() string {
	s := fmt.Sprintf("%s #%d", a.Kind, a.ID)
	if a.Lane != "" {
		s += " lane=" + a.Lane
	}
	if a.Kind == ActAdmit {
		s += fmt.Sprintf(" replica=%d", a.Replica)
	}
	if !a.Until.IsZero() {
		s += " until=" + a.Until.Format(time.RFC3339Nano)
	}
	if a.Reason != "" {
		s += " reason=" + a.Reason
	}
	return s
}

// Reasons carried by actions.
const (
	ReasonTokens           = "tokens"            // tokens-per-minute budget short
	ReasonRequests         = "requests"          // requests-per-minute budget short
	ReasonInputTokens      = "input_tokens"      // Anthropic input-token budget short
	ReasonOutputTokens     = "output_tokens"     // Anthropic output-token budget short
	ReasonRetryAfter       = "retry_after"       // lane paused by a 429
	ReasonCircuitOpen      = "circuit_open"      // lane's circuit open and no fallback free
	ReasonRateLimited      = "rate_limited"      // retry after a 429
	ReasonServerError      = "server_error"      // retry after a 5xx or network error
	ReasonOversize         = "oversize"          // the turn alone needs about a whole window
	ReasonRetriesExhausted = "retries_exhausted" // too many failed attempts
	ReasonDuplicate        = "duplicate"         // the id is already in the core
)
