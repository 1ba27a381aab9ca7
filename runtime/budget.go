package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/storage"
)

// Budgets under concurrency (SPEC §2). Checking recorded usage before a call lets every
// call of a parallel fan-out start before any finishes, so budget{tokens=10} over 50
// agents once spent 300 tokens. Instead every turn reserves its estimate against the
// token and USD budgets before it asks the scheduler to run, and holds it until it ends:
//
//   - a turn whose estimate, added to what finished turns used, exceeds the budget is
//     refused, and the refusal ends the run (it cannot be caught, like any budget);
//   - a turn that fits only once the reservations of running turns are settled waits
//     for them (they may use less than they reserved);
//   - a turn whose cost cannot be estimated yet (no max_tokens and no finished turn on
//     its lane to learn the output length from; for usd, no priced call yet) runs only
//     alone: when no other turn of the run holds a reservation or is between turns.
//
// So the run overshoots a budget by at most one turn's estimation error.

// ledger is the run's budget bookkeeping beyond recorded usage; guarded by host.mu.
type ledger struct {
	tokens int     // reserved by turns admitted and not finished
	usd    float64 // the same in USD
	holds  int     // turns holding a reservation
	// live is what finished turns of calls still running used: the call's usage
	// reaches host.usage only when the call ends.
	live map[string]turnUse
	// output is the largest completion seen per lane, the estimate of a turn that
	// sets no max_tokens; usdPerToken the price per token seen per lane.
	output      map[string]int
	usdPerToken map[string]float64
	freed       chan struct{} // closed and replaced whenever a reservation is released
}

type turnUse struct {
	tokens int
	usd    float64
}

func newLedger() ledger {
	return ledger{live: map[string]turnUse{}, output: map[string]int{}, usdPerToken: map[string]float64{},
		freed: make(chan struct{})}
}

// hold is one turn's reservation.
type hold struct {
	tokens int
	usd    float64
}

// costLane is how the ledger names a call's lane: the backend and the model it asked for.
func costLane(req agent.Request) string { return req.Backend + "/" + req.Model }

// usedLocked is what the run has used: finished calls plus finished turns of running ones.
func (h *host) usedLocked() (tokens int, usd float64) {
	tokens, usd = h.usage.Total(), h.cost
	for _, u := range h.ledger.live {
		tokens += u.tokens
		usd += u.usd
	}
	return tokens, usd
}

// reserve reserves a turn's estimated cost against the run's token and USD budgets,
// waiting while only running turns' reservations stand in the way. It returns nil when
// the run has no such budget. A refusal ends the run and is returned as the turn's error.
func (h *host) reserve(ctx context.Context, c lua.Call, req agent.Request, cost adapters.TurnCost) (*hold, error) {
	lane := costLane(req)
	for {
		h.mu.Lock()
		b := h.budget
		if b.Tokens <= 0 && b.USD <= 0 {
			h.mu.Unlock()
			return nil, nil
		}
		out, known := cost.MaxOutput, cost.MaxOutput > 0
		if !known {
			out, known = h.ledger.output[lane]
		}
		need := cost.Input + out
		rate, priced := h.ledger.usdPerToken[lane]
		needUSD := float64(need) * rate
		known = known && (b.USD <= 0 || priced)
		used, usedUSD := h.usedLocked()
		var limit string
		switch {
		case b.Tokens > 0 && used+need > b.Tokens:
			limit = fmt.Sprintf("tokens=%d (%d used, this turn needs about %d)", b.Tokens, used, need)
		case b.USD > 0 && usedUSD+needUSD > b.USD:
			limit = fmt.Sprintf("usd=%g ($%.4f spent, this turn needs about $%.4f)", b.USD, usedUSD, needUSD)
		}
		if limit != "" && (h.ledger.holds == 0 || used >= b.Tokens && b.Tokens > 0 || usedUSD >= b.USD && b.USD > 0) {
			h.mu.Unlock()
			err := budgetRefusal(c, limit)
			h.run.cancel(err)
			return nil, err
		}
		fits := limit == "" && (b.Tokens <= 0 || used+h.ledger.tokens+need <= b.Tokens) &&
			(b.USD <= 0 || usedUSD+h.ledger.usd+needUSD <= b.USD)
		// Alone means no other turn holds a reservation and no other call is between
		// turns: its finished turns' cost may not be priced yet.
		if fits && (known || h.ledger.holds == 0 && len(h.ledger.live) == 0) {
			h.ledger.tokens += need
			h.ledger.usd += needUSD
			h.ledger.holds++
			h.mu.Unlock()
			return &hold{tokens: need, usd: needUSD}, nil
		}
		freed := h.ledger.freed
		h.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// settleTurn releases a turn's reservation and records what its sends used, so the
// next reservation sees it before the call ends.
func (h *host) settleTurn(key string, req agent.Request, hd *hold, u agent.Usage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	lane := costLane(req)
	if u.Output > h.ledger.output[lane] {
		h.ledger.output[lane] = u.Output
	}
	lu := h.ledger.live[key]
	lu.tokens += u.Total()
	lu.usd += float64(u.Total()) * h.ledger.usdPerToken[lane]
	h.ledger.live[key] = lu
	if hd != nil {
		h.ledger.tokens -= hd.tokens
		h.ledger.usd -= hd.usd
		h.ledger.holds--
		h.ledger.wake()
	}
}

// wake tells turns waiting in reserve that the ledger changed; host.mu is held.
func (l *ledger) wake() {
	close(l.freed)
	l.freed = make(chan struct{})
}

// settleCallLocked forgets a finished call's live turns (its usage is now in host.usage) and
// learns its lane's price; h.mu is held.
func (h *host) settleCallLocked(key string, req agent.Request, res agent.Result) {
	delete(h.ledger.live, key)
	defer h.ledger.wake()
	if res.Cached {
		return
	}
	lane := costLane(req)
	switch t := res.Usage.Total(); {
	case res.Cost != nil && t > 0:
		h.ledger.usdPerToken[lane] = max(h.ledger.usdPerToken[lane], *res.Cost/float64(t))
	case res.Cost == nil && t > 0:
		if _, ok := h.ledger.usdPerToken[lane]; !ok {
			h.ledger.usdPerToken[lane] = 0 // the backend reports no cost
		}
	}
}

// drivenBefore is how long the earlier attempts of the run were driven, read before the
// current attempt's run_started is stored: from each run_started to that attempt's
// run_done, or, for an attempt whose process died, to its last event. The time budget counts it (SPEC §2: time counts over all attempts).
func drivenBefore(ctx context.Context, st storage.Store, runID string) (time.Duration, error) {
	marks, err := st.EventsOfType(ctx, runID, 0, 0, []string{event.RunStarted, event.RunDone})
	if err != nil {
		return 0, fmt.Errorf("run %s: read its earlier attempts: %w", runID, err)
	}
	var total time.Duration
	for i, ev := range marks {
		if ev.Type != event.RunStarted {
			continue
		}
		var end time.Time
		switch {
		case i+1 < len(marks) && marks[i+1].Type == event.RunDone:
			end = marks[i+1].TS
		case i+1 < len(marks): // the attempt died: its last event is just before the next start
			last, err := st.EventsOfType(ctx, runID, marks[i+1].Seq-2, 1, nil)
			if err != nil {
				return 0, fmt.Errorf("run %s: read its earlier attempts: %w", runID, err)
			}
			if len(last) == 1 {
				end = last[0].TS
			}
		default: // the latest attempt died: find its last event
			for since := ev.Seq; ; {
				page, err := st.EventsOfType(ctx, runID, since, 4096, nil)
				if err != nil {
					return 0, fmt.Errorf("run %s: read its earlier attempts: %w", runID, err)
				}
				if len(page) == 0 {
					break
				}
				end, since = page[len(page)-1].TS, page[len(page)-1].Seq
			}
		}
		if end.After(ev.TS) {
			total += end.Sub(ev.TS)
		}
	}
	return total, nil
}
