package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/storage"
)

// Lease is the lease under which a node holds the runs its Service drives (package node
// keeps it: it renews the lease of every run Held returns, on its own connection).
type Lease interface {
	// Until is the end of a lease taken now: what a new run or a claim records.
	Until() time.Time
	// Valid reports whether the lease is surely still held, by this process's monotonic
	// clock: false once the last renewal + the lease's length - a margin has passed.
	Valid() bool
}

// ErrLeaseLapsed stops a run whose node's lease may have lapsed: the node starts no call
// and no tool for it (another node may be taking it over), and leaves its end unwritten.
var ErrLeaseLapsed = errors.New("this node's lease may have lapsed (no renewal reached the store in time): it starts no call or tool and leaves the run to whichever node claims it")

// ownershipLost reports whether err means the run is no longer this process's to drive.
func ownershipLost(err error) bool {
	return errors.Is(err, storage.ErrOwnershipLost) || errors.Is(err, ErrLeaseLapsed)
}

// leaseUntil is the lease end a run started or claimed now records (zero: no lease).
func (s *Service) leaseUntil() time.Time {
	if s.opts.Lease == nil {
		return time.Time{}
	}
	return s.opts.Lease.Until()
}

// leaseValid is the self-fence: false once the node's lease may have lapsed.
func (s *Service) leaseValid() error {
	if s.opts.Lease != nil && !s.opts.Lease.Valid() {
		return ErrLeaseLapsed
	}
	return nil
}

// Held returns the runs this Service drives under its lease, each at its attempt.
func (s *Service) Held() []storage.Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]storage.Lease, 0, len(s.live)+len(s.claimed)+len(s.heldExt))
	for id, r := range s.live {
		out = append(out, storage.Lease{RunID: id, Attempt: r.Attempt})
	}
	// A run claimed and not launched yet (its journal is being read) is held too: under a
	// load that read may take longer than the lease.
	for id, a := range s.claimed {
		if _, ok := s.live[id]; !ok {
			out = append(out, storage.Lease{RunID: id, Attempt: a})
		}
	}
	// An external run a door of this process records (OpenExternal) is at its first
	// attempt while it is this process's.
	for id := range s.heldExt {
		out = append(out, storage.Lease{RunID: id, Attempt: 1})
	}
	return out
}

// Lost stops at once each run of lost this Service drives at that attempt: another node
// claimed it. The run writes nothing more (its writes are fenced in any case). An external
// run lost is no longer renewed; its door's further records of it fail as fenced.
func (s *Service) Lost(lost []storage.Lease) {
	for _, l := range lost {
		s.mu.Lock()
		r := s.live[l.RunID]
		if l.Attempt == 1 {
			delete(s.heldExt, l.RunID)
		}
		s.mu.Unlock()
		if r != nil && r.Attempt == l.Attempt {
			r.cancel(fmt.Errorf("run %s attempt %d: %w", l.RunID, l.Attempt, storage.ErrOwnershipLost))
		}
	}
}

// Claimable returns up to limit runs this Service may take over now (Resume them), in the
// order to take them: running runs whose lease lapsed, running runs whose process is gone
// (one of this host: another host's process cannot be checked from here), then suspended
// runs whose resume time has come. A run that needs a workspace this node does not serve
// is left to a node that does (Serves).
func (s *Service) Claimable(ctx context.Context, limit int) ([]storage.Run, error) {
	runs, err := s.opts.Store.Claimable(ctx, s.opts.Now(), 0)
	if err != nil {
		return nil, err
	}
	var out []storage.Run
	for _, r := range runs {
		if limit > 0 && len(out) >= limit {
			break
		}
		if s.driven(r) || PlanFailed(r) {
			continue
		}
		// A run that needs a workspace this node lacks waits for a node that has it.
		if !s.Serves(r.Workspace) {
			continue
		}
		// A run suspended because its state dir could not be written waits for space and
		// a resume by hand: woken now, it would fail again on the full disk, and again.
		if r.Status == storage.StatusSuspended && strings.Contains(r.Error, storage.ErrUnwritable.Error()) {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// Owner is who drives a running run as a person reads it: "node N" or "node N, pid P"
// for a run held by a process rather than a lease; "" when the run records no node.
func Owner(r storage.Run) string {
	switch {
	case r.Node == "":
		return ""
	case r.LeaseUntil.IsZero() && r.PID != 0:
		return fmt.Sprintf("%s, pid %d", r.Node, r.PID)
	}
	return r.Node
}

// fencedStore is the store as one attempt of a run writes to it: every write for the run
// is fenced on the attempt (storage.WithFence), so once another process claims the run
// nothing of this attempt lands.
type fencedStore struct {
	storage.Store
	id      string
	attempt int
}

func (f fencedStore) fence(ctx context.Context) context.Context {
	return storage.WithFence(ctx, f.id, f.attempt)
}

func (f fencedStore) Append(ctx context.Context, runID string, evs ...event.Event) ([]event.Event, error) {
	return f.Store.Append(f.fence(ctx), runID, evs...)
}

func (f fencedStore) AppendAsync(ctx context.Context, runID string, evs ...event.Event) func() ([]event.Event, error) {
	if a, ok := f.Store.(asyncAppender); ok {
		return a.AppendAsync(f.fence(ctx), runID, evs...)
	}
	out, err := f.Store.Append(f.fence(ctx), runID, evs...)
	return func() ([]event.Event, error) { return out, err }
}

func (f fencedStore) UpdateRun(ctx context.Context, id string, u storage.RunUpdate) error {
	return f.Store.UpdateRun(f.fence(ctx), id, u)
}

func (f fencedStore) SaveFile(ctx context.Context, runID, path string, content []byte) (string, error) {
	return f.Store.SaveFile(f.fence(ctx), runID, path, content)
}

func (f fencedStore) JournalScheduled(ctx context.Context, e storage.Entry) error {
	return f.Store.JournalScheduled(f.fence(ctx), e)
}

func (f fencedStore) JournalFinish(ctx context.Context, e storage.Entry) (int64, error) {
	return f.Store.JournalFinish(f.fence(ctx), e)
}

func (f fencedStore) InvalidateFrom(ctx context.Context, runID string, completedSeq int64) (int, error) {
	return f.Store.InvalidateFrom(f.fence(ctx), runID, completedSeq)
}

func (f fencedStore) ToolStarted(ctx context.Context, tc storage.ToolCall) error {
	return f.Store.ToolStarted(f.fence(ctx), tc)
}

func (f fencedStore) ToolDone(ctx context.Context, tc storage.ToolCall) error {
	return f.Store.ToolDone(f.fence(ctx), tc)
}

func (f fencedStore) AskApproval(ctx context.Context, a storage.Approval) (storage.Approval, error) {
	return f.Store.AskApproval(f.fence(ctx), a)
}
