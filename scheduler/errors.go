package scheduler

import (
	"fmt"
	"time"
)

// SuspendError is the answer of Admit (or Retrier.Again) to a turn whose run the
// scheduler suspended: the wait for its lane's budget would have exceeded
// Config.SuspendAfter (SPEC §7). Every queued turn of the run gets it, and so does every
// turn the run submits before Until; turns already running finish normally. The caller
// should stop the run, journal it and resume it after Until.
type SuspendError struct {
	RunID  string
	Lane   string
	Until  time.Time // when the budget is expected back: the run's resume time
	Reason string    // the budget or pause waited for: ReasonTokens, ReasonRetryAfter, ...
}

func (e *SuspendError) Error() string { return "run " + e.RunID + " suspended: " + e.Detail() }

// Detail says why the run was suspended and until when, without naming the run.
func (e *SuspendError) Detail() string {
	until := e.Until.Format(time.RFC3339)
	var why string
	switch e.Reason {
	case ReasonTokens:
		why = "has no tokens-per-minute budget left until " + until
	case ReasonRequests:
		why = "has no requests-per-minute budget left until " + until
	case ReasonInputTokens:
		why = "has no input-tokens-per-minute budget left until " + until
	case ReasonOutputTokens:
		why = "has no output-tokens-per-minute budget left until " + until
	case ReasonRetryAfter:
		why = "was told by the provider (HTTP 429) to wait until " + until
	case ReasonCircuitOpen:
		why = "keeps failing (its circuit is open) until " + until
	default:
		why = "waits (" + e.Reason + ") until " + until
	}
	return "lane " + e.Lane + " " + why + ", longer than suspend_after allows"
}

// RefuseError is the answer to a turn the scheduler will never run: one that alone
// needs about a whole rate-limit window (Reason ReasonOversize), or one whose retries
// after 429s or 5xx are used up (ReasonRetriesExhausted; Err is the last failure).
type RefuseError struct {
	CallKey string
	Lane    string
	Reason  string

	// For ReasonOversize: the tokens the turn needs, and the budget it exceeds.
	Need   int
	Allow  int    // the bucket's limit per minute; 0 = not known
	Budget string // "tokens", "input tokens" or "output tokens"

	// For ReasonRetriesExhausted and ReasonCircuitOpen: the attempts made and the last
	// one's failure.
	Attempts int
	Err      error

	// For ReasonCircuitOpen: when the lane's circuit half-opens (zero: its probe is
	// under way).
	Until time.Time
}

func (e *RefuseError) Error() string {
	switch e.Reason {
	case ReasonOversize:
		if e.Allow > 0 {
			return fmt.Sprintf("turn %s refused: it needs about %d %s but the lane %s allows %d per minute (lower max_tokens or shorten the prompt)",
				e.CallKey, e.Need, e.Budget, e.Lane, e.Allow)
		}
		return fmt.Sprintf("turn %s refused: it needs about %d %s, about the whole budget of lane %s (lower max_tokens or shorten the prompt)",
			e.CallKey, e.Need, e.Budget, e.Lane)
	case ReasonRetriesExhausted:
		msg := fmt.Sprintf("turn %s on lane %s: gave up after %d attempts", e.CallKey, e.Lane, e.Attempts)
		if e.Err != nil {
			msg += ": " + e.Err.Error()
		}
		return msg
	case ReasonCircuitOpen:
		msg := fmt.Sprintf("turn %s refused: lane %s keeps failing (its circuit is open) and no fallback takes its turns", e.CallKey, e.Lane)
		if !e.Until.IsZero() {
			msg += "; it tries again after " + e.Until.Format(time.RFC3339)
		}
		if e.Err != nil {
			msg += "; last failure: " + e.Err.Error()
		}
		return msg
	}
	return fmt.Sprintf("turn %s refused on lane %s: %s", e.CallKey, e.Lane, e.Reason)
}

// Unwrap returns the last failure of a turn whose retries are used up.
func (e *RefuseError) Unwrap() error { return e.Err }
