package tui

import (
	"fmt"
	"strings"
	"time"
)

// Lane is what the admission scheduler says about one lane (a backend and model): its
// queue by class, what runs, the budgets it has left and what it had to wait for. The
// caller samples the scheduler and hands the lanes to the view (Live.SetLanes,
// Plain.SetLanes, SummaryOptions.Lanes); they are not events.
type Lane struct {
	Name                           string
	Running                        int
	QueuedInteractive, QueuedBatch int
	// Budgets left and their limits; a limit ≤ 0 is unknown (nothing learned yet).
	TokensLeft, TokenLimit      float64
	RequestsLeft, RequestLimit  float64
	Admitted                    uint64
	Waits, RateLimited, Retries uint64
	Suspended                   uint64
	PausedUntil                 time.Time
	Circuit                     string // closed, open, half-open

	// others is what of Running and the queues the run's own agents do not account for
	// (another run's turns on a shared scheduler), as of the sample; see State.lanes.
	othersRunning, othersQueued int
}

// LanesMsg replaces the lanes the board shows.
type LanesMsg []Lane

// maxLaneLines bounds the lane lines on the board.
const maxLaneLines = 3

// busy reports whether a lane has anything to show.
func (l Lane) busy() bool {
	return l.Admitted > 0 || l.Running > 0 || l.QueuedInteractive+l.QueuedBatch > 0
}

// line is a lane in one line: "lane local/m · 2 running · queued 1 interactive, 5 batch ·
// tokens 2.1k/6.0k left · requests 12/30 left · 3 waits · 1 × 429 · paused 4s".
func (l Lane) line(now time.Time) string {
	parts := []string{"lane " + strings.TrimSuffix(l.Name, "/"), fmt.Sprintf("%d running", l.Running)}
	if q := l.QueuedInteractive + l.QueuedBatch; q > 0 {
		parts = append(parts, fmt.Sprintf("queued %d interactive, %d batch", l.QueuedInteractive, l.QueuedBatch))
	}
	if l.othersRunning+l.othersQueued > 0 {
		parts = append(parts, fmt.Sprintf("other runs %d running, %d queued", l.othersRunning, l.othersQueued))
	}
	if l.TokenLimit > 0 {
		parts = append(parts, fmt.Sprintf("tokens %s/%s left", fmtTok(int(max(0, l.TokensLeft))), fmtTok(int(l.TokenLimit))))
	}
	if l.RequestLimit > 0 {
		parts = append(parts, fmt.Sprintf("requests %d/%d left", int(max(0, l.RequestsLeft)), int(l.RequestLimit)))
	}
	if l.Waits > 0 {
		parts = append(parts, plural(int(l.Waits), "wait", "waits"))
	}
	if l.RateLimited > 0 {
		parts = append(parts, fmt.Sprintf("%d × 429", l.RateLimited))
	}
	if l.Suspended > 0 {
		parts = append(parts, plural(int(l.Suspended), "suspension", "suspensions"))
	}
	if l.PausedUntil.After(now) {
		parts = append(parts, "paused "+fmtDur(l.PausedUntil.Sub(now)))
	}
	if l.Circuit != "" && l.Circuit != "closed" {
		parts = append(parts, "circuit "+l.Circuit)
	}
	return strings.Join(parts, " · ")
}

// limited reports whether a lane met or learned a limit: worth a line in the summary.
func (l Lane) limited() bool {
	return l.TokenLimit > 0 || l.RequestLimit > 0 || l.Waits > 0 || l.RateLimited > 0 || l.Retries > 0 ||
		l.Suspended > 0 || (l.Circuit != "" && l.Circuit != "closed")
}

// limitedOnly keeps the lanes that met or learned a limit.
func limitedOnly(ls []Lane) []Lane {
	var out []Lane
	for _, l := range ls {
		if l.limited() {
			out = append(out, l)
		}
	}
	return out
}

// laneLines are the busy lanes' lines, at most max of them.
func laneLines(ls []Lane, now time.Time, max int) []string {
	var out []string
	for _, l := range ls {
		if !l.busy() {
			continue
		}
		if len(out) == max {
			out = append(out, fmt.Sprintf("+%d more lanes", countBusy(ls)-max))
			break
		}
		out = append(out, l.line(now))
	}
	return out
}

func countBusy(ls []Lane) int {
	n := 0
	for _, l := range ls {
		if l.busy() {
			n++
		}
	}
	return n
}

// SyncLanes makes the agents shown running agree with the scheduler's sample of its
// lanes. Events say when an agent call starts and ends, not when each of its turns holds
// a slot, so the board guesses; the sample knows. On every lane the sample covers, the
// agents started last beyond its running count are shown queued, and queued agents fill
// the running places it shows. Agents of other lanes are left as they are.
func (s *State) SyncLanes(ls []Lane) {
	for _, l := range ls {
		var running []*Agent
		for _, e := range s.running.items[s.running.head:] {
			if e.live() && onLane(e.a, l.Name) {
				running = append(running, e.a)
			}
		}
		for i := len(running) - 1; i >= max(l.Running, 0); i-- {
			a := running[i]
			s.move(a, Queued)
			s.queue(a.LaneName()).add(a)
		}
		for n := len(running); n < l.Running; n++ {
			next := s.queue(l.Name).pop()
			if next == nil {
				break
			}
			s.move(next, Running)
		}
	}
	// What the sample holds beyond the run's own agents is another run's.
	s.others = map[string][2]int{}
	for _, l := range ls {
		r, q := s.onLaneCounts(l.Name)
		s.others[l.Name] = [2]int{max(l.Running-r, 0), max(l.QueuedInteractive+l.QueuedBatch-q, 0)}
	}
}

// onLaneCounts counts the run's agents running and queued on the lane.
func (s *State) onLaneCounts(lane string) (running, queued int) {
	for _, a := range s.agents {
		if !onLane(a, lane) {
			continue
		}
		switch a.Status {
		case Running:
			running++
		case Queued:
			queued++
		}
	}
	return running, queued
}

// lanes is the sampled lanes as the board shows them now: on a lane the run uses, the
// running and queued counts are its agents' as the agent list shows them (one source,
// so the lane line and the list cannot disagree in a frame, whatever events came after
// the sample), and the turns of other runs the sample had are shown apart. Budgets,
// waits and the circuit are the sample's.
func (s *State) lanes(ls []Lane) []Lane {
	out := make([]Lane, len(ls))
	for i, l := range ls {
		out[i] = l
		if !s.usesLane(l.Name) {
			continue
		}
		o := s.others[l.Name]
		out[i].Running, out[i].QueuedInteractive, out[i].QueuedBatch = 0, 0, 0
		out[i].othersRunning, out[i].othersQueued = o[0], o[1]
		for _, a := range s.agents {
			if !onLane(a, l.Name) {
				continue
			}
			switch {
			case a.Status == Running:
				out[i].Running++
			case a.Status == Queued && a.Class == "batch":
				out[i].QueuedBatch++
			case a.Status == Queued:
				out[i].QueuedInteractive++
			}
		}
	}
	return out
}

// usesLane reports whether an agent of the run is on the lane now.
func (s *State) usesLane(lane string) bool {
	for _, a := range s.agents {
		if onLane(a, lane) {
			return true
		}
	}
	return false
}

// onLane reports whether a is on the scheduler lane named lane. An agent whose model is
// not known yet (the backend's default) matches its backend's lane.
func onLane(a *Agent, lane string) bool {
	return a.LaneName() == lane || a.Lane == "" && a.Model == "" && strings.HasPrefix(lane, a.Backend+"/")
}
