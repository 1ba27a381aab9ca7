package luft

import (
	"testing"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// The package's own names of statuses and event types are the runtime's, spelled out so
// that go doc shows them.
func TestConstantsMatchTheRuntime(t *testing.T) {
	for got, want := range map[Status]runtime.Status{
		StatusRunning: runtime.StatusRunning, StatusCompleted: runtime.StatusCompleted, StatusFailed: runtime.StatusFailed,
		StatusCancelled: runtime.StatusCancelled, StatusSuspended: runtime.StatusSuspended, StatusInterrupted: runtime.StatusInterrupted,
		StatusAwaitingApproval: runtime.StatusAwaitingApproval,
	} {
		if string(got) != string(want) {
			t.Errorf("status %q, the runtime's is %q", got, want)
		}
	}
	for got, want := range map[EventType]string{
		EventRunStarted: event.RunStarted, EventPlan: event.Plan, EventPhaseStarted: event.PhaseStarted, EventPhaseDone: event.PhaseDone,
		EventAgentStarted: event.AgentStarted, EventAgentQueued: event.AgentQueued, EventAgentProgress: event.AgentProgress,
		EventAgentRetry: event.AgentRetry, EventSchemaRetry: event.SchemaRetry, EventAgentDone: event.AgentDone,
		EventRateLimit: event.RateLimit, EventParallelStarted: event.ParallelStarted, EventParallelDone: event.ParallelDone,
		EventPipelineStarted: event.PipelineStarted, EventPipelineItemDone: event.PipelineItemDone, EventPipelineDone: event.PipelineDone,
		EventWorkflowStarted: event.WorkflowStarted, EventWorkflowDone: event.WorkflowDone, EventConvergeStarted: event.ConvergeStarted,
		EventConvergeDone: event.ConvergeDone, EventLog: event.Log, EventReport: event.Report, EventBudget: event.Budget,
		EventRunSuspended: event.RunSuspended, EventRunDone: event.RunDone,
		EventApprovalRequested: event.ApprovalRequested, EventApprovalDecided: event.ApprovalDecided,
	} {
		if string(got) != want {
			t.Errorf("event type %q, the runtime's is %q", got, want)
		}
	}
	for got, want := range map[string]string{
		ApprovalPending: storage.ApprovalPending, ApprovalAllowed: storage.ApprovalAllowed, ApprovalDeclined: storage.ApprovalDeclined,
	} {
		if got != want {
			t.Errorf("approval status %q, the store's is %q", got, want)
		}
	}
}
