package scheduler

import (
	"time"
)

// LaneStats are counters a status view can show for one lane.
type LaneStats struct {
	Lane              string
	QueuedInteractive int
	QueuedBatch       int
	Delayed           int // waiting out a backoff before a retry
	Running           int

	Admitted, Completed, Waits, RateLimited, Retries, Refused, Suspended, CircuitOpens uint64

	// Dead-reckoned budgets at the time of Stats; -1 when unknown.
	TokensLeft, TokenLimit     float64
	RequestsLeft, RequestLimit float64

	Margin      float64 // safety margin a 1,000-token turn would get now
	PausedUntil time.Time
	Circuit     string // closed, open, half-open
}

// Stats returns every lane's counters at now, in the order lanes were first used.
func (c *Core) Stats(now time.Time) []LaneStats {
	out := make([]LaneStats, 0, len(c.list))
	for _, l := range c.list {
		s := l.st
		s.Lane = l.name
		s.QueuedInteractive, s.QueuedBatch = l.queued[0], l.queued[1]
		s.Delayed, s.Running = l.delayed, l.running
		s.TokensLeft, s.TokenLimit = -1, -1
		s.RequestsLeft, s.RequestLimit = -1, -1
		if v, ok := l.tokens.levelAt(now); ok {
			s.TokensLeft = v
		}
		if l.tokens.limit > 0 {
			s.TokenLimit = l.tokens.limit
		}
		if v, ok := l.requests.levelAt(now); ok {
			s.RequestsLeft = v
		}
		if l.requests.limit > 0 {
			s.RequestLimit = l.requests.limit
		}
		s.Margin = l.est.margin(1000, now)
		if l.pausedUntil.After(now) {
			s.PausedUntil = l.pausedUntil
		}
		br := l.br
		br.current(now)
		s.Circuit = br.String()
		out = append(out, s)
	}
	return out
}
