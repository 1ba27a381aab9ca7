package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/adapters/tools"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/schema"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
)

// maxSchemaRetries is how often an agent is re-prompted when its output does not match
// its schema (SPEC §2.2).
const maxSchemaRetries = 3

var errCallTimeout = errors.New("agent call timed out")

// call runs one agent call with its retries.
func (h *host) call(ctx context.Context, c lua.Call, req agent.Request, b adapters.Backend, tally *turnTally) (agent.Result, error) {
	var sch *schema.Schema
	if req.Schema != nil {
		s, err := schema.Compile(req.Schema)
		if err != nil {
			return agent.Result{Status: agent.StatusError, Backend: req.Backend, Model: req.Model, Attempts: 1},
				fmt.Errorf("schema is not a valid JSON Schema: %w", err)
		}
		sch = s
	}
	var (
		res   agent.Result
		err   error
		total agent.Usage
		cost  float64
		paid  bool
	)
	attempts := 0
	for attempt := 1; attempt <= 1+req.Retries; attempt++ {
		if attempt > 1 {
			wait := h.e.opts.Backoff(attempt)
			reason := res.Error
			if err != nil {
				reason = err.Error()
			}
			h.emit(event.AgentRetry, map[string]any{"call_key": c.Key, "attempt": attempt, "reason": reason, "wait_ms": wait.Milliseconds()})
			if !sleepOn(ctx, h.e.opts.Clock, wait) {
				break
			}
		}
		attempts = attempt
		res, err = h.structured(ctx, c, req, b, sch, tally)
		total = total.Add(res.Usage)
		if res.Cost != nil {
			cost += *res.Cost
			paid = true
		}
		if (err == nil && res.OK()) || ctx.Err() != nil || res.Status == agent.StatusTimedOut && req.Retries == 0 ||
			!tally.runtimeRetries(err) {
			break
		}
	}
	res.Usage = total
	if paid {
		res.Cost = &cost
	}
	res.Attempts = attempts + tally.resends
	if res.Backend == "" {
		res.Backend = req.Backend
	}
	if res.Model == "" {
		res.Model = req.Model
	}
	if ctx.Err() != nil && (err != nil || !res.OK()) {
		res.Status, err = agent.StatusCancelled, context.Cause(ctx)
	}
	return res, err
}

// structured runs one attempt and, when the call has a schema, checks the output and
// re-prompts with the validation errors up to maxSchemaRetries times.
func (h *host) structured(ctx context.Context, c lua.Call, req agent.Request, b adapters.Backend, sch *schema.Schema, tally *turnTally) (agent.Result, error) {
	res, err := h.turn(ctx, c, req, b, tally)
	if sch == nil || err != nil || !res.OK() {
		return res, err
	}
	total := res.Usage
	for retry := 1; ; retry++ {
		out, verr := decodeStructured(res)
		if verr == nil {
			verr = sch.Validate(out)
		}
		if verr == nil {
			res.Output = out
			res.Usage = total
			return res, nil
		}
		if retry > maxSchemaRetries {
			res.Status, res.Error = agent.StatusError, "output does not match the schema: "+verr.Error()
			res.Usage = total
			return res, nil
		}
		h.emit(event.SchemaRetry, map[string]any{"call_key": c.Key, "attempt": retry, "errors": verr.Error()})
		again := req
		correction := "Your previous reply did not match the required JSON schema:\n" + verr.Error() +
			"\nReply again with only a JSON value that matches the schema."
		if h.session(res.SessionID) != nil {
			// The backend keeps the conversation: the correction continues it.
			again.SessionID, again.Prompt = res.SessionID, correction
		} else {
			again.Prompt = req.Prompt + "\n\n" + correction
			if req.SessionID == "" && res.SessionID != "" {
				again.SessionID = res.SessionID
			}
		}
		res, err = h.turn(ctx, c, again, b, tally)
		total = total.Add(res.Usage)
		if err != nil || !res.OK() {
			res.Usage = total
			return res, err
		}
	}
}

// decodeStructured returns the JSON value of a structured reply: the backend's decoded
// output, or JSON extracted from its text.
func decodeStructured(res agent.Result) (any, error) {
	if res.Output != nil {
		if s, ok := res.Output.(string); !ok {
			return res.Output, nil
		} else if res.Text == "" {
			res.Text = s
		}
	}
	text := strings.TrimSpace(res.Text)
	if i := strings.Index(text, "```"); i >= 0 {
		rest := text[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			text = strings.TrimSpace(rest[:j])
		}
	}
	var v any
	if err := json.Unmarshal([]byte(text), &v); err == nil {
		return v, nil
	}
	if i, j := strings.IndexAny(text, "{["), strings.LastIndexAny(text, "}]"); i >= 0 && j > i {
		if err := json.Unmarshal([]byte(text[i:j+1]), &v); err == nil {
			return v, nil
		}
	}
	return nil, errors.New("the reply contains no JSON value")
}

// turnTally is what the turns of one agent call share: what they tell its retry loop,
// and when the call was first admitted, which ranks its later turns.
type turnTally struct {
	mu           sync.Mutex
	resends      int       // turns the scheduler sent again after a 429, a 5xx or no response
	schedRetries bool      // the scheduler retries HTTP failures itself (its permits are Retriers)
	asked        bool      // a turn of the call has asked to run
	admitted     time.Time // the call's first admission; zero before it
	// queued is the time the call's turns waited for the scheduler, approval the time its
	// tool calls waited for a person: neither is the agent's own working time.
	queued, approval time.Duration
}

// waited adds d to the call's time in the scheduler's queue.
func (t *turnTally) waited(d time.Duration) {
	t.mu.Lock()
	t.queued += d
	t.mu.Unlock()
}

// timed is hold (a call timer's) that also counts the time until resume as waiting for
// a person.
func (t *turnTally) timed(now func() time.Time, hold func() (resume func())) func() (resume func()) {
	return func() func() {
		since := now()
		resume := hold()
		return func() {
			t.mu.Lock()
			t.approval += now().Sub(since)
			t.mu.Unlock()
			resume()
		}
	}
}

// split divides a call's elapsed time into its wait for the scheduler, its wait for
// approvals and the rest, the time the agent ran.
func (t *turnTally) split(elapsed time.Duration) callTime {
	t.mu.Lock()
	defer t.mu.Unlock()
	return callTime{elapsed: elapsed, queued: t.queued, approval: t.approval, run: max(elapsed-t.queued-t.approval, 0)}
}

// callTime is how an agent call's time went, for its agent_done event.
type callTime struct {
	elapsed, queued, approval, run time.Duration
}

// begin records a turn asking to run and returns whether it continues the call (any
// turn after its first, across schema re-prompts and retry attempts) and when the call
// was first admitted (SPEC §7: a continuation ranks by it).
func (t *turnTally) begin() (continuation bool, callStart time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	continuation, t.asked = t.asked, true
	return continuation, t.admitted
}

// admit records an admission of one of the call's turns at now.
func (t *turnTally) admit(now time.Time, p scheduler.Permit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.admitted.IsZero() {
		t.admitted = now
	}
	_, t.schedRetries = p.(scheduler.Retrier)
}

// runtimeRetries reports whether the call's own retry loop (req.Retries) should try again
// after err. It does not when the scheduler refused the turn or suspended the run, nor
// after an HTTP failure when the scheduler has already retried it as far as it would;
// errors without an HTTP status (the mock's, a transport that gave up) are retried as
// before.
func (t *turnTally) runtimeRetries(err error) bool {
	var (
		re *scheduler.RefuseError
		se *scheduler.SuspendError
	)
	var ae *tools.ApprovalError
	var pe interface{ Permanent() bool } // a failure no retry can cure (a used-up quota)
	if errors.As(err, &re) || errors.As(err, &se) || errors.As(err, &ae) || errors.As(err, &pe) && pe.Permanent() {
		return false
	}
	if _, _, ok := scheduler.HTTPStatus(err); ok && t.schedRetries {
		return false
	}
	return true
}

// turn runs one attempt of the call on the backend. The backend sends each of its model
// turns through the TurnFunc made here, so every turn is admitted by the scheduler, not
// just the call's first (SPEC §7). The call's very first turn is new work; every later
// one (after a tool result, a schema re-prompt or a failed attempt) is a continuation,
// ranked by the call's first admission, so it goes ahead of its siblings' first turns.
// Affinity follows the conversation: the session_id when the call continues one, else
// the call. When the scheduler retries a failed send itself (a 429 honours the server's
// wait and keeps the turn's place, a 5xx backs off), the send runs again after its
// re-admission.
//
// timeout_ms bounds the agent's working time: it starts when the first turn is admitted,
// so time spent queued for that admission does not count.
func (h *host) turn(ctx context.Context, c lua.Call, req agent.Request, b adapters.Backend, tally *turnTally) (agent.Result, error) {
	actx, cancel := ctx, context.CancelCauseFunc(func(error) {})
	if req.TimeoutMS > 0 {
		actx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
	}
	lane := laneOf(req, b)
	conversation := h.run.ID + "/" + c.Key
	if req.SessionID != "" {
		conversation = h.run.ID + "/session/" + req.SessionID
	}
	ct := &callTimer{clock: h.e.opts.Clock, left: time.Duration(req.TimeoutMS) * time.Millisecond,
		fire: func() { cancel(errCallTimeout) }}
	defer ct.stop()
	admit := func(tctx context.Context, cost adapters.TurnCost, send func(context.Context) adapters.TurnReport) error {
		hd, err := h.reserve(tctx, c, req, cost)
		if err != nil {
			return err
		}
		var used agent.Usage
		defer func() { h.settleTurn(c.Key, req, hd, used) }()
		cont, callStart := tally.begin()
		asked := h.e.opts.Now()
		permit, err := h.e.opts.Scheduler.Admit(tctx, scheduler.Turn{
			RunID: h.run.ID, CallKey: c.Key, Lane: lane, Class: req.Class,
			Caller: h.caller(), EstTokens: cost.Input + cost.MaxOutput, Continuation: cont,
			CallStart: callStart, Conversation: conversation,
			EstOutput: cost.MaxOutput, RunStart: h.start, Notify: h.notify(c.Key),
		})
		tally.waited(h.e.opts.Now().Sub(asked))
		if err != nil {
			return err
		}
		ct.start()
		tally.admit(h.e.opts.Now(), permit)
		return h.e.sendTurn(tctx, req, lane, permit, send, func(rep adapters.TurnReport) { used = used.Add(rep.Usage) }, func() {
			tally.mu.Lock()
			tally.resends++
			tally.mu.Unlock()
		})
	}
	prog := &progress{h: h, key: c.Key}
	res, err := b.Run(actx, req, adapters.Call{Turn: admit, Progress: prog.update, Key: h.run.ID + "/" + c.Key,
		Transcript: h.session(req.SessionID), Tool: h.toolJournal(c, req, tally.timed(h.e.opts.Now, ct.hold))})
	prog.flush()
	h.keepSession(res)
	var (
		se *scheduler.SuspendError
		re *scheduler.RefuseError
	)
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errCallTimeout):
		return agent.Result{Status: agent.StatusTimedOut, Error: fmt.Sprintf("timed out after %d ms (timeout_ms)", req.TimeoutMS),
			Usage: res.Usage, Cost: res.Cost, Backend: req.Backend, Model: req.Model}, nil
	case errors.As(err, &se):
		// The scheduler suspended the turn: the whole run stops before the script sees the
		// call fail, and ends suspended with the scheduler's resume time (SPEC §7). res
		// carries what earlier sends of the turn used.
		h.run.cancel(suspension{se})
		res.Status = agent.StatusCancelled
		return res, err
	case errors.As(err, &re): // the scheduler refused the turn: the call fails
		res.Status, res.Error = agent.StatusError, err.Error()
		return res, err
	}
	if err != nil && res.Status == "" {
		res.Status = agent.StatusError
	}
	if err == nil && res.Status == "" {
		res.Status = agent.StatusOK
	}
	return res, err
}

// callTimer bounds an agent call's working time (timeout_ms): it starts at the call's
// first admission and holds while a tool call waits for a person's answer, so that
// time is not the agent's.
type callTimer struct {
	clock scheduler.Clock
	fire  func()

	mu      sync.Mutex
	left    time.Duration // 0: no bound
	since   time.Time     // when the running timer was set
	t       scheduler.Timer
	started bool
}

func (ct *callTimer) start() {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.left <= 0 || ct.started {
		return
	}
	ct.started, ct.since = true, ct.clock.Now()
	ct.t = ct.clock.AfterFunc(ct.left, ct.fire)
}

// hold stops the clock of a running bound and returns what starts it again with the time
// left; both are no-ops when no bound runs (none set, not admitted yet, or it fired).
func (ct *callTimer) hold() (resume func()) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.t == nil || !ct.t.Stop() {
		return func() {}
	}
	ct.left -= ct.clock.Now().Sub(ct.since)
	ct.t = nil
	return func() {
		ct.mu.Lock()
		defer ct.mu.Unlock()
		ct.since = ct.clock.Now()
		ct.t = ct.clock.AfterFunc(max(ct.left, 0), ct.fire)
	}
}

func (ct *callTimer) stop() {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.t != nil {
		ct.t.Stop()
		ct.t = nil
	}
}

// laneOf is the scheduler lane of a call: its backend and model, the backend's default
// model standing in when the call names none, so that calls with and without an explicit
// model share one lane (one set of slots and limits for one endpoint).
func laneOf(req agent.Request, b adapters.Backend) string {
	model := req.Model
	if model == "" {
		if dm, ok := b.(interface{ DefaultModel() string }); ok {
			model = dm.DefaultModel()
		}
	}
	return req.Backend + "/" + model
}

// sendTurn sends an admitted turn where the scheduler placed it and reports each send to
// the scheduler; a send it retries (a 429 waits and keeps the turn's place, a 5xx backs
// off) runs again on the permit it hands back. sent is told of every send's report,
// resent of every re-admission; either may be nil.
func (s *Service) sendTurn(tctx context.Context, req agent.Request, lane string, permit scheduler.Permit,
	send func(context.Context) adapters.TurnReport, sent func(adapters.TurnReport), resent func()) error {
	for {
		var observe func(http.Header)
		if o, ok := permit.(interface{ Observe(http.Header) }); ok {
			observe = o.Observe
		}
		sctx := tctx
		if r := s.route(req, lane, permit); r.Replica != 0 || r.Fallback != nil || observe != nil {
			sctx = adapters.WithSend(tctx, r, observe)
		}
		if err := s.leaseValid(); err != nil {
			permit.Done(scheduler.Outcome{Err: err}) // the self-fence: nothing is sent
			return err
		}
		if sp, ok := permit.(interface{ Sent() }); ok {
			// The spread from admission to the request written sizes the margin of a
			// budget shared across nodes (scheduler.SharedConfig).
			sctx = httptrace.WithClientTrace(sctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sp.Sent() }})
		}
		rep := send(sctx)
		if sent != nil {
			sent(rep)
		}
		next, serr := scheduler.Finish(tctx, permit, scheduler.Outcome{Usage: rep.Usage, Err: rep.Err, Header: rep.Header})
		if next == nil {
			if serr != nil {
				return serr
			}
			return rep.Err
		}
		if resent != nil {
			resent()
		}
		permit = next
	}
}

// route says where the scheduler sent a turn: the replica it chose, and the fallback
// lane's backend when the turn's own lane has an open circuit.
func (s *Service) route(req agent.Request, own string, p scheduler.Permit) adapters.Route {
	var r adapters.Route
	if rp, ok := p.(interface{ Replica() int }); ok {
		r.Replica = rp.Replica()
	}
	if lp, ok := p.(interface{ Lane() string }); ok {
		if lane := lp.Lane(); lane != "" && lane != own {
			id, _, _ := strings.Cut(lane, "/")
			if b, err := s.opts.Backends.Get(id); err == nil && id != req.Backend {
				r.Fallback = b
			}
		}
	}
	return r
}

// progress turns a backend's streamed updates into agent_progress events. Chunks of
// streamed text are gathered into lines, so a long reply is a handful of events, not one
// per token; flush emits what is left when the call ends.
type progress struct {
	h        *host
	key      string
	mu       sync.Mutex
	buf      strings.Builder
	streamed int // bytes of streamed text so far
}

func (p *progress) update(u adapters.Update) {
	if u.Kind != "text" {
		p.flush()
		p.h.emit(event.AgentProgress, map[string]any{"call_key": p.key, "kind": u.Kind, "text": clip(u.Text, maxProgressText)})
		return
	}
	p.mu.Lock()
	p.buf.WriteString(u.Text)
	p.streamed += len(u.Text)
	full := strings.Contains(u.Text, "\n") || p.buf.Len() >= maxProgressText
	p.mu.Unlock()
	if full {
		p.flush()
	}
}

func (p *progress) flush() {
	p.mu.Lock()
	line := p.buf.String()
	p.buf.Reset()
	streamed := p.streamed
	p.mu.Unlock()
	if strings.TrimSpace(line) != "" {
		// tokens: the output streamed so far, estimated, for live views.
		p.h.emit(event.AgentProgress, map[string]any{"call_key": p.key, "kind": "text", "text": clip(strings.TrimSpace(line), maxProgressText),
			"tokens": (streamed + 3) / 4})
	}
}

// maxProgressText bounds the text of one agent_progress event.
const maxProgressText = 400

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// notify turns the scheduler's notices about one turn of the call key into the run's
// events (SPEC §5).
func (h *host) notify(key string) func(scheduler.Notice) {
	return func(n scheduler.Notice) {
		switch n.Kind {
		case scheduler.NoticeQueued:
			h.emit(event.AgentQueued, map[string]any{"call_key": key, "lane": n.Lane, "position": n.Position})
		case scheduler.NoticeWait, scheduler.NoticeSuspend:
			action := "wait"
			if n.Kind == scheduler.NoticeSuspend {
				action = "suspend"
			}
			d := map[string]any{"lane": n.Lane, "action": action, "wait_ms": n.Wait.Milliseconds(), "reason": n.Reason, "call_key": key}
			if !n.Until.IsZero() {
				d["until"] = n.Until.UTC().Format(time.RFC3339Nano)
			}
			h.emit(event.RateLimit, d)
		case scheduler.NoticeRetry:
			d := map[string]any{"call_key": key, "attempt": n.Attempt, "reason": n.Reason, "wait_ms": n.Wait.Milliseconds()}
			if n.Err != nil {
				d["error"] = n.Err.Error()
			}
			h.emit(event.AgentRetry, d)
		}
	}
}

// caller is who the run's turns count against in the scheduler's fair shares.
func (h *host) caller() string {
	if h.run.spec.Caller != "" {
		return h.run.spec.Caller
	}
	return h.e.opts.Caller
}
