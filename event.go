package luft

import (
	"time"

	"github.com/luft-run/luft/event"
)

// EventType names what an event says happened (SPEC §5 lists their fields).
type EventType string

// The event types a run records, in the order they typically come.
const (
	EventRunStarted       EventType = event.RunStarted
	EventPlan             EventType = event.Plan
	EventPhaseStarted     EventType = event.PhaseStarted
	EventPhaseDone        EventType = event.PhaseDone
	EventAgentStarted     EventType = event.AgentStarted
	EventAgentQueued      EventType = event.AgentQueued
	EventAgentProgress    EventType = event.AgentProgress
	EventAgentRetry       EventType = event.AgentRetry
	EventSchemaRetry      EventType = event.SchemaRetry
	EventAgentDone        EventType = event.AgentDone
	EventRateLimit        EventType = event.RateLimit
	EventParallelStarted  EventType = event.ParallelStarted
	EventParallelDone     EventType = event.ParallelDone
	EventPipelineStarted  EventType = event.PipelineStarted
	EventPipelineItemDone EventType = event.PipelineItemDone
	EventPipelineDone     EventType = event.PipelineDone
	EventWorkflowStarted  EventType = event.WorkflowStarted
	EventWorkflowDone     EventType = event.WorkflowDone
	EventConvergeStarted  EventType = event.ConvergeStarted
	EventConvergeDone     EventType = event.ConvergeDone
	EventLog              EventType = event.Log
	EventReport           EventType = event.Report
	EventBudget           EventType = event.Budget
	EventRunSuspended     EventType = event.RunSuspended
	EventRunDone          EventType = event.RunDone
)

// Event is one entry of a run's stream. Seq numbers a run's events from 1 without gaps;
// an event is stored before anyone is shown it.
type Event struct {
	Seq   int64
	RunID string
	Time  time.Time
	Type  EventType
	// Data holds the type's fields as JSON decodes them (numbers are float64 when read
	// back from the store): run_done has "status", "report", "error", "tokens", "cost";
	// agent_done has "call_key", "status", "cached", "tokens"; and so on.
	Data map[string]any
}

// MarshalJSON writes the event as luft's JSON event stream does:
// {"seq","run_id","ts","type", then the fields}.
func (e Event) MarshalJSON() ([]byte, error) { return e.internal().MarshalJSON() }

// Field is the string data field name, or "" when it is absent or not a string.
func (e Event) Field(name string) string {
	s, _ := e.Data[name].(string)
	return s
}

func (e Event) internal() event.Event {
	return event.Event{Seq: e.Seq, RunID: e.RunID, TS: e.Time, Type: string(e.Type), Data: e.Data}
}

func eventOf(ev event.Event) Event {
	return Event{Seq: ev.Seq, RunID: ev.RunID, Time: ev.TS, Type: EventType(ev.Type), Data: ev.Data}
}
