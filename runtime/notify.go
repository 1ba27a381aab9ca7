package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/luft-run/luft/storage"
)

// notifier is a store that tells this process at once when another process requested a
// cancel of a run or answered an approval (storage.Postgres: LISTEN/NOTIFY). The runtime
// still polls the store: notices are hints, lost while the listener is down.
type notifier interface {
	// Notices calls fn with each notice until stop; fn must not block.
	Notices(fn func(storage.Notice)) (stop func())
	// Listening reports whether notices arrive now.
	Listening() bool
}

// notifiedPollFactor lengthens the poll while the store's listener is up: the poll is then
// only the fallback for a notice that never came (a pooler that drops LISTEN, a listener
// that died between two pings), and it still finds a cancel within a second.
const notifiedPollFactor = 4

// pollEvery is how long a run waits between two looks at the store for a cancel request
// or an approval answer made by another process.
func (s *Service) pollEvery() time.Duration {
	if n, ok := s.opts.Store.(notifier); ok && n.Listening() {
		return notifiedPollFactor * s.opts.CancelPoll
	}
	return s.opts.CancelPoll
}

// listenNotices subscribes this Service to its store's notices, once, when it starts
// driving its first run (a command that only reads or cancels opens no listener).
func (s *Service) listenNotices() {
	n, ok := s.opts.Store.(notifier)
	if !ok {
		return
	}
	s.notifyOnce.Do(func() { n.Notices(s.noticed) })
}

// noticed acts on a notice: the work goes to a goroutine, since the store's listener
// delivers the next notice only when this returns.
func (s *Service) noticed(n storage.Notice) {
	switch n.Kind {
	case storage.NoticeCancel:
		s.mu.Lock()
		r := s.live[n.RunID]
		s.mu.Unlock()
		if r != nil {
			go s.checkCancel(r)
		}
	case storage.NoticeApproval:
		s.mu.Lock()
		waited := len(s.approvals[n.RunID+"/"+n.ApprovalID]) > 0
		s.mu.Unlock()
		if waited {
			go s.checkApprovals(n.RunID)
		}
	case storage.NoticeResync:
		// Notices sent while the listener was down are lost: look at every run now.
		s.mu.Lock()
		runs := make([]*Run, 0, len(s.live))
		for _, r := range s.live {
			runs = append(runs, r)
		}
		waiting := map[string]bool{}
		for _, r := range runs {
			waiting[r.ID] = false
		}
		for key := range s.approvals {
			if id, _, ok := cutKey(key); ok {
				waiting[id] = true
			}
		}
		s.mu.Unlock()
		go func() {
			for _, r := range runs {
				s.checkCancel(r)
			}
			for id, w := range waiting {
				if w {
					s.checkApprovals(id)
				}
			}
		}()
	}
}

// checkCancel cancels r when the store holds a cancel request for it, and reports whether
// it stopped r. A request stored for a run that another process has claimed since (a
// node woken after losing its runs: the claim keeps the request for the new owner) stops
// r as lost, not cancelled: the run is not this attempt's to end.
func (s *Service) checkCancel(r *Run) bool {
	yes, err := s.opts.Store.CancelRequested(context.Background(), r.ID)
	if err != nil || !yes {
		return false
	}
	if row, err := s.opts.Store.GetRun(context.Background(), r.ID); err == nil && row.Attempt != r.Attempt {
		r.cancel(fmt.Errorf("run %s attempt %d: %w (attempt %d holds it now)", r.ID, r.Attempt, storage.ErrOwnershipLost, row.Attempt))
		return true
	}
	r.Cancel()
	return true
}

// checkApprovals hands each answered approval of run id to the calls parked on it.
func (s *Service) checkApprovals(id string) {
	rows, err := s.opts.Store.Approvals(context.Background(), storage.ApprovalFilter{RunID: id})
	if err != nil {
		return // the waiter's own poll tries again
	}
	for _, a := range rows {
		if a.Status != storage.ApprovalPending {
			s.answered(a)
		}
	}
}

// answered tells the calls parked on approval a (listenApproval) its answer.
func (s *Service) answered(a storage.Approval) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.approvals[a.RunID+"/"+a.ID] {
		select {
		case ch <- a:
		default:
		}
	}
}

// cutKey splits a key of Service.approvals into run id and approval id.
func cutKey(key string) (runID, approvalID string, ok bool) {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}
