package event

import (
	"bytes"
	"encoding/json"
	"sort"
	"time"
)

// The event types of SPEC §5.
const (
	RunStarted   = "run_started"
	Plan         = "plan"
	PhaseStarted = "phase_started"
	PhaseDone    = "phase_done"
	AgentStarted = "agent_started"
	AgentQueued  = "agent_queued"
	AgentDone    = "agent_done"
	AgentRetry   = "agent_retry"
	// AgentProgress is a running agent's streamed progress (a line of its reply, a tool call, an
	// edit): {call_key, kind, text}. Not in SPEC §5's list; added for live views.
	AgentProgress    = "agent_progress"
	SchemaRetry      = "schema_retry"
	RateLimit        = "rate_limit"
	ParallelStarted  = "parallel_started"
	ParallelDone     = "parallel_done"
	PipelineStarted  = "pipeline_started"
	PipelineItemDone = "pipeline_item_done"
	PipelineDone     = "pipeline_done"
	WorkflowStarted  = "workflow_started"
	WorkflowDone     = "workflow_done"
	// ConvergeStarted and ConvergeDone bracket a converge() call: {items, max_rounds,
	// adversarial, phase_id} and {rounds, converged, findings, phase_id}.
	ConvergeStarted = "converge_started"
	ConvergeDone    = "converge_done"
	Log             = "log"
	Report          = "report"
	Budget          = "budget"
	RunSuspended    = "run_suspended"
	// ApprovalRequested and ApprovalDecided bracket a destructive tool call parked under
	// [tools] approval = "ask": {approval_id, call_key, tool, arguments} and
	// {approval_id, call_key, tool, allow}. Not in SPEC §5's list.
	ApprovalRequested = "approval_requested"
	ApprovalDecided   = "approval_decided"
	RunDone           = "run_done"
)

// Event is one entry of a run's stream.
type Event struct {
	Seq   int64
	RunID string
	TS    time.Time
	Type  string
	Data  map[string]any
}

// New returns an unstamped event of type typ with the given fields.
func New(typ string, data map[string]any) Event {
	return Event{Type: typ, Data: data}
}

// MarshalJSON writes {"seq","run_id","ts","type", then the fields in sorted order}.
func (e Event) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"seq":`)
	seq, _ := json.Marshal(e.Seq)
	b.Write(seq)
	b.WriteString(`,"run_id":`)
	id, _ := json.Marshal(e.RunID)
	b.Write(id)
	b.WriteString(`,"ts":`)
	ts, _ := json.Marshal(e.TS.UTC().Format(time.RFC3339Nano))
	b.Write(ts)
	b.WriteString(`,"type":`)
	typ, _ := json.Marshal(e.Type)
	b.Write(typ)
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		switch k {
		case "seq", "run_id", "ts", "type":
			continue // the envelope wins; a field may not shadow it
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(e.Data[k])
		if err != nil {
			return nil, err
		}
		b.WriteByte(',')
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Event) UnmarshalJSON(data []byte) error {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if v, ok := m["seq"].(float64); ok {
		e.Seq = int64(v)
	}
	e.RunID, _ = m["run_id"].(string)
	e.Type, _ = m["type"].(string)
	if s, ok := m["ts"].(string); ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return err
		}
		e.TS = t
	}
	for _, k := range []string{"seq", "run_id", "ts", "type"} {
		delete(m, k)
	}
	e.Data = m
	return nil
}
