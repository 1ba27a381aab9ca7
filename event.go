package luft

import (
	"time"

	"github.com/luft-run/luft/event"
)

// EventType names what an event says happened (SPEC §5 lists their fields).
type EventType string

// The event types a run records, in the order they typically come.
const (
	EventRunStarted       EventType = "run_started"
	EventPlan             EventType = "plan"
	EventPhaseStarted     EventType = "phase_started"
	EventPhaseDone        EventType = "phase_done"
	EventAgentStarted     EventType = "agent_started"
	EventAgentQueued      EventType = "agent_queued"
	EventAgentProgress    EventType = "agent_progress"
	EventAgentRetry       EventType = "agent_retry"
	EventSchemaRetry      EventType = "schema_retry"
	EventAgentDone        EventType = "agent_done"
	EventRateLimit        EventType = "rate_limit"
	EventParallelStarted  EventType = "parallel_started"
	EventParallelDone     EventType = "parallel_done"
	EventPipelineStarted  EventType = "pipeline_started"
	EventPipelineItemDone EventType = "pipeline_item_done"
	EventPipelineDone     EventType = "pipeline_done"
	EventWorkflowStarted  EventType = "workflow_started"
	EventWorkflowDone     EventType = "workflow_done"
	EventConvergeStarted  EventType = "converge_started"
	EventConvergeDone     EventType = "converge_done"
	EventLog              EventType = "log"
	EventReport           EventType = "report"
	EventBudget           EventType = "budget"
	EventRunSuspended     EventType = "run_suspended"
	EventRunDone          EventType = "run_done"
	// EventApprovalRequested: a tool call waits for an answer (Options.Approvals):
	// "approval_id", "call_key", "tool", "arguments". EventApprovalDecided: it was
	// answered: "approval_id", "call_key", "tool", "allow".
	EventApprovalRequested EventType = "approval_requested"
	EventApprovalDecided   EventType = "approval_decided"
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
