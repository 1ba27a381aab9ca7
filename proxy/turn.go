package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/scheduler"
)

// maxRetainedError bounds the body of a failed attempt kept to hand to the client when
// luft gives up retrying.
const maxRetainedError = 1 << 20

// serve serves one turn of an agent's loop on wire: POST /v1/chat/completions,
// /v1/responses or /v1/messages.
func (p *Proxy) serve(wr *wire, w http.ResponseWriter, r *http.Request) {
	now := p.opts.Clock.Now()
	var hdr [3]string
	for i, name := range [...]string{"x-luft-run-id", "x-luft-caller", "x-luft-class"} {
		v, err := headerValue(r, name)
		if err != nil {
			wr.fail(w, http.StatusBadRequest, "invalid_request_error", "invalid_header", err.Error())
			return
		}
		hdr[i] = v
	}
	clientRun, caller := hdr[0], callerOr(hdr[1])
	class := agent.ClassInteractive
	switch strings.ToLower(hdr[2]) {
	case "", "interactive":
	case "batch":
		class = agent.ClassBatch
	default:
		wr.fail(w, http.StatusBadRequest, "invalid_request_error", "invalid_header",
			fmt.Sprintf("x-luft-class %q: use interactive or batch", hdr[2]))
		return
	}
	body, err := readBody(w, r, p.opts.MaxBody)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			wr.fail(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
				fmt.Sprintf("request body over %d bytes: luft's proxy accepts at most that much (its max body setting)", mb.Limit))
			return
		}
		wr.fail(w, http.StatusBadRequest, "invalid_request_error", "unreadable_body", "reading the request body: "+err.Error())
		return
	}
	req, err := wr.parse(body)
	if err != nil {
		code := "invalid_json"
		if json.Valid(body) {
			code = "missing_field"
		}
		wr.fail(w, http.StatusBadRequest, "invalid_request_error", code, err.Error())
		return
	}
	up := p.upstreamOf(wr.family, req.model)
	if up == nil {
		wr.fail(w, http.StatusNotFound, "invalid_request_error", "model_not_found", p.unknownModel(wr, req.model))
		return
	}
	ctx, stop := context.WithCancelCause(r.Context())
	defer stop(nil)
	r = r.WithContext(ctx)
	j, started := p.runs.join(caller, clientRun, class, up.Name, req.model, req.echoed, req.cont, stop, now)
	w.Header().Set("x-luft-run", j.id)
	// A run's first turn goes upstream only once the run is recorded, so that list and
	// status show it while its turn is upstream. A later turn's start is recorded while it
	// is on its way: its answer waits for that (relay), and none is given without it.
	bg := context.WithoutCancel(ctx)
	startErr := make(chan error, 1)
	if j.turn == 1 {
		err := started.do(bg)
		startErr <- err
		if err != nil {
			p.refuseUnrecorded(wr, w, j, err, "so it did not send it upstream")
			return
		}
	} else {
		go func() { startErr <- started.do(bg) }()
	}
	// A cap beyond any model's output is no reservation luft could hold: it is held to
	// maxReserved (the upstream will refuse it, or not use it).
	maxOut, in := min(req.maxOut, maxReserved), min(req.estIn, maxReserved)
	if req.chained {
		// The upstream prepends the conversation so far: the run's last prompt and answer.
		in += min(j.context, maxReserved)
	}
	t := &turn{p: p, wire: wr, w: w, r: r, j: j, up: up, model: req.model, body: body, stream: req.stream,
		lane: up.Name + "/" + req.model, start: now, estIn: in, startErr: startErr}
	end := t.run(scheduler.Turn{RunID: j.id, CallKey: callKey(j.turn), Lane: t.lane, Class: class, Caller: caller,
		EstTokens: in + maxOut, EstOutput: maxOut, Continuation: j.continuation, CallStart: j.callStart,
		Conversation: j.id, RunStart: j.runStart, Notify: p.notify(j.run, callKey(j.turn)),
		// The client retries on its own: while a lane keeps failing it is told so at once.
		NoCircuitWait: true})
	end.elapsed = p.opts.Clock.Now().Sub(now)
	if err := t.started(); err != nil {
		// Its start could not be recorded: what the client got says so when the answer
		// had come (relay); the turn counts in nothing.
		p.runs.finish(j, turnEnd{unrecorded: true}, p.opts.Clock.Now())
		p.log.Printf("run %s: turn %d: %v", j.id, j.turn, err)
		return
	}
	// The answer is the client's once its turn's end is recorded: what is held of it
	// (a whole answer, a stream's [DONE]) waits for that.
	err = p.runs.finish(j, end, p.opts.Clock.Now()).do(context.WithoutCancel(ctx))
	if err != nil {
		p.log.Printf("run %s: turn %d: %v", j.id, j.turn, err)
	}
	t.deliver(err)
}

// maxReserved bounds a turn's estimated prompt and completion cap, each, in tokens.
const maxReserved = 1 << 30

// codeUnrecorded is the error code of a turn luft could not record.
const codeUnrecorded = "luft_state_unwritable"

// started waits until the turn's start is recorded and returns how that went.
func (t *turn) started() error {
	err := <-t.startErr
	t.startErr <- err // for the next to ask
	return err
}

// refuseUnrecorded answers a turn whose start could not be recorded and forgets it.
func (p *Proxy) refuseUnrecorded(wr *wire, w http.ResponseWriter, j joined, err error, what string) {
	p.runs.finish(j, turnEnd{unrecorded: true}, p.opts.Clock.Now())
	p.log.Printf("run %s: turn %d refused: %v", j.id, j.turn, err)
	wr.fail(w, http.StatusServiceUnavailable, "server_error", codeUnrecorded,
		"luft could not record this turn in its state dir, "+what+": "+err.Error())
}

// readBody reads a request body of at most limit bytes, in one allocation when the
// request says its length.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		b := make([]byte, n)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(rd)
}

// upstreamOf is the upstream of family serving model, nil when none does.
func (p *Proxy) upstreamOf(family, model string) *Upstream {
	f := p.families[family]
	if f == nil {
		return nil
	}
	if u, ok := f.byModel[model]; ok {
		return u
	}
	return f.def
}

// unknownModel says that no upstream of wr serves model, and which models there are.
func (p *Proxy) unknownModel(wr *wire, model string) string {
	var models []string
	if f := p.families[wr.family]; f != nil {
		models = f.models
	}
	list := strings.Join(models, ", ")
	if list == "" {
		list = fmt.Sprintf("none (configure [backends.NAME] with type = %q and a model)", wr.family)
	}
	return fmt.Sprintf("model %q is not served by luft's proxy on %s; configured models: %s", model, wr.path(), list)
}

// query is the request's query string for an attempt at replica of up: it goes with the
// request to the upstream the client addressed (Claude Code asks for
// /v1/messages?beta=true) or one at its origins, never to a fallback at another origin
// (it may carry a credential, or mean something only to the client's upstream).
func (t *turn) query(up *Upstream, replica int) string {
	if up != t.up && !t.up.origins[origin(baseOf(up, replica))] {
		return ""
	}
	return query(t.r)
}

// query is the request's query string with its ?, or "".
func query(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

// notify turns the scheduler's notices about a waiting turn into the run's events.
func (p *Proxy) notify(ru *run, key string) func(scheduler.Notice) {
	if p.opts.Service == nil {
		return nil
	}
	return func(n scheduler.Notice) {
		var ev event.Event
		switch n.Kind {
		case scheduler.NoticeQueued:
			ev = event.New(event.AgentQueued, map[string]any{"call_key": key, "lane": n.Lane, "position": n.Position})
		case scheduler.NoticeWait, scheduler.NoticeSuspend:
			action := "wait"
			if n.Kind == scheduler.NoticeSuspend {
				action = "suspend"
			}
			ev = event.New(event.RateLimit, map[string]any{"call_key": key, "lane": n.Lane, "action": action,
				"wait_ms": n.Wait.Milliseconds(), "reason": n.Reason})
		case scheduler.NoticeRetry:
			reason := n.Reason
			if n.Err != nil {
				reason = n.Err.Error()
			}
			ev = event.New(event.AgentRetry, map[string]any{"call_key": key, "attempt": n.Attempt, "reason": reason,
				"wait_ms": n.Wait.Milliseconds()})
		default:
			return
		}
		p.runs.notice(ru, ev)
	}
}

// turn is one request on its way through the scheduler and upstream.
type turn struct {
	p      *Proxy
	wire   *wire
	w      http.ResponseWriter
	r      *http.Request
	j      joined
	up     *Upstream
	model  string
	body   []byte
	stream bool
	lane   string
	start  time.Time
	estIn  int
	wrote  bool // the response has begun
	// held is the end of the answer, kept back until the turn's end is recorded: a whole
	// answer (then its status and headers are held too: header) or a stream's [DONE].
	held       []byte
	heldHeader bool
	status     int
	// startErr holds the outcome of the record of the turn's start (see started).
	startErr chan error
}

// sendError is an upstream that gave no response. Its StatusCode of 0 tells the
// scheduler to back off and retry (see scheduler.HTTPStatus).
type sendError struct {
	backend string
	err     error
}

func (e *sendError) Error() string {
	return fmt.Sprintf("backend %s: no response: %v", e.backend, e.err)
}
func (e *sendError) Unwrap() error   { return e.err }
func (e *sendError) StatusCode() int { return 0 }

// run admits the turn, sends it (again, as long as the scheduler retries it) and
// relays the response; it returns how the turn ended.
func (t *turn) run(st scheduler.Turn) turnEnd {
	p, ctx := t.p, t.r.Context()
	permit, err := p.opts.Scheduler.Admit(ctx, st)
	if err != nil {
		return t.refused(err)
	}
	end := turnEnd{wait: p.opts.Clock.Now().Sub(t.start), backend: t.up.Name}
	p.runs.admitted(t.j, p.opts.Clock.Now())
	for {
		end.attempts++
		up, replica, model := t.target(permit)
		end.backend = up.Name
		hdr, err := t.header(up, replica)
		if err != nil {
			// Not the fallback's failure: its lane's health and budget are left as they were.
			permit.Done(scheduler.Outcome{Err: err})
			t.wire.fail(t.w, http.StatusBadGateway, "upstream_error", "fallback_without_key", err.Error())
			end.status, end.errMsg = string(agent.StatusError), err.Error()
			return end
		}
		resp, err := t.send(ctx, up, replica, model, hdr)
		if err != nil {
			o := scheduler.Outcome{Err: &sendError{backend: up.Name, err: err}}
			if ctx.Err() != nil {
				permit.Done(scheduler.Outcome{Err: context.Cause(ctx)})
				return t.stopped(end)
			}
			next, serr := scheduler.Finish(ctx, permit, o)
			if next != nil {
				permit = next
				continue
			}
			if ctx.Err() != nil {
				return t.stopped(end)
			}
			if circuitOpen(serr) {
				return t.refusedAfter(end, serr)
			}
			msg := fmt.Sprintf("luft could not reach backend %q at %s: %v", up.Name, baseOf(up, replica), err)
			if serr != nil {
				msg += " (" + serr.Error() + ")"
			}
			t.wire.fail(t.w, http.StatusBadGateway, "upstream_error", "backend_unreachable", msg)
			end.status, end.errMsg = string(agent.StatusError), msg
			return end
		}
		switch scheduler.StatusFromHTTP(resp.StatusCode) {
		case scheduler.StatusRateLimited, scheduler.StatusServerError:
			// Kept, so that the client gets the upstream's own answer if luft gives up.
			failed, _ := io.ReadAll(io.LimitReader(resp.Body, maxRetainedError))
			resp.Body.Close()
			next, serr := scheduler.Finish(ctx, permit, scheduler.Outcome{StatusCode: resp.StatusCode, Header: resp.Header,
				Err: fmt.Errorf("backend %s: HTTP %d", up.Name, resp.StatusCode)})
			if next != nil {
				permit = next
				continue
			}
			if ctx.Err() != nil {
				return t.stopped(end)
			}
			if circuitOpen(serr) {
				// The failure opened the lane's circuit while the turn waited to retry.
				return t.refusedAfter(end, serr)
			}
			copyHeader(t.w.Header(), resp.Header)
			t.w.Header().Set("Content-Length", strconv.Itoa(len(failed)))
			t.w.WriteHeader(resp.StatusCode)
			_, _ = t.w.Write(failed)
			end.status, end.errMsg = string(agent.StatusError), fmt.Sprintf("backend %s answered HTTP %d", up.Name, resp.StatusCode)
			return end
		}
		if resp.StatusCode == http.StatusOK && t.stream {
			// A stream's headers come with its first token, long before its end: the
			// scheduler learns from them now. A whole answer's headers come with the
			// answer and are read when the turn ends (read early, they would count a
			// completion the provider billed before writing them twice).
			if o, ok := permit.(scheduler.Observer); ok {
				o.Observe(resp.Header)
			}
		}
		res := t.relay(resp)
		resp.Body.Close()
		var usage agent.Usage
		if resp.StatusCode == http.StatusOK {
			usage = res.usage(t.estIn) // a refused request is not billed
		}
		o := scheduler.Outcome{Usage: usage, Header: resp.Header, StatusCode: resp.StatusCode}
		end.usage = usage
		end.cost = (float64(usage.Input)*up.PriceInPerMTok + float64(usage.Output)*up.PriceOutPerMTok) / 1e6
		switch {
		case res.err != nil:
			// The client went away (or the upstream broke off) mid-answer: nothing is
			// retried, the slot is freed.
			o.Err, o.StatusCode = res.err, 0
			if ctx.Err() != nil {
				o.Err = context.Cause(ctx)
			}
			permit.Done(o)
			end.status, end.errMsg = string(agent.StatusCancelled), "broken off mid-answer: "+res.err.Error()
			if ctx.Err() == nil {
				end.status = string(agent.StatusError)
			}
		case resp.StatusCode != http.StatusOK:
			permit.Done(o)
			end.status, end.errMsg = string(agent.StatusError), fmt.Sprintf("backend %s answered HTTP %d", up.Name, resp.StatusCode)
		default:
			permit.Done(o)
			end.ok, end.status, end.ids = true, string(agent.StatusOK), res.ids
		}
		return end
	}
}

// stopped ends a turn whose context ended: the client went away, or its run was
// cancelled (then a client still waiting is told so, unless its answer had begun).
func (t *turn) stopped(end turnEnd) turnEnd {
	end.status, end.errMsg = string(agent.StatusCancelled), "the client went away"
	if errors.Is(context.Cause(t.r.Context()), ErrRunCancelled) {
		end.errMsg = "its run was cancelled"
		if !t.wrote {
			t.wire.fail(t.w, http.StatusConflict, "invalid_request_error", "run_cancelled",
				fmt.Sprintf("luft run %s was cancelled (luft cancel or the dashboard): start a new run", t.j.id))
		}
	}
	return end
}

// circuitOpen reports whether err is the scheduler's refusal of a turn whose lane's
// circuit is open with no fallback to take it.
func circuitOpen(err error) bool {
	var re *scheduler.RefuseError
	return errors.As(err, &re) && re.Reason == scheduler.ReasonCircuitOpen
}

// refusedAfter answers a turn refused after some attempts, keeping their count.
func (t *turn) refusedAfter(end turnEnd, err error) turnEnd {
	r := t.refused(err)
	r.wait, r.attempts, r.backend = end.wait, end.attempts, end.backend
	return r
}

// refused answers a turn the scheduler would not admit.
func (t *turn) refused(err error) turnEnd {
	end := turnEnd{status: string(agent.StatusError), errMsg: err.Error(), backend: t.up.Name}
	var (
		se *scheduler.SuspendError
		re *scheduler.RefuseError
	)
	switch {
	case t.r.Context().Err() != nil:
		return t.stopped(end)
	case errors.As(err, &se):
		wait := max(se.Until.Sub(t.p.opts.Clock.Now()), 0)
		secs := int((wait + time.Second - 1) / time.Second)
		t.w.Header().Set("Retry-After", strconv.Itoa(secs))
		t.w.Header().Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
		t.wire.fail(t.w, http.StatusTooManyRequests, "rate_limit_exceeded", "luft_budget_wait",
			fmt.Sprintf("luft holds this turn back: lane %s is short of %s for %s, longer than luft waits in line (suspend_after); retry after that", se.Lane, se.Reason, wait.Round(time.Second)))
	case errors.As(err, &re) && re.Reason == scheduler.ReasonCircuitOpen:
		// Said at once rather than held until the circuit half-opens: the client's own
		// retry (the openai SDKs honour retry-after on a 503) comes back then.
		wait := max(re.Until.Sub(t.p.opts.Clock.Now()), time.Second)
		secs := int((wait + time.Second - 1) / time.Second)
		t.w.Header().Set("Retry-After", strconv.Itoa(secs))
		t.w.Header().Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
		msg := fmt.Sprintf("backend %q keeps failing: luft stopped sending it turns for now (its circuit is open) and it has no fallback; retry after %s, or set fallback in [backends.%s]",
			t.up.Name, wait.Round(time.Second), t.up.Name)
		if re.Err != nil {
			msg += "; its last failure: " + re.Err.Error()
		}
		t.wire.fail(t.w, http.StatusServiceUnavailable, "server_error", "backend_circuit_open", msg)
	case errors.As(err, &re):
		t.wire.fail(t.w, http.StatusBadRequest, "invalid_request_error", "too_large_for_rate_limit",
			"luft refuses this turn: "+re.Error())
	default:
		t.wire.fail(t.w, http.StatusServiceUnavailable, "server_error", "not_admitted", "luft could not admit the turn: "+err.Error())
	}
	return end
}

// target is where the permit sends the attempt: the turn's upstream, or its fallback
// when the scheduler routed it there, with the replica and the model to ask for.
func (t *turn) target(permit scheduler.Permit) (*Upstream, int, string) {
	up, model, replica := t.up, t.model, 0
	rp, ok := permit.(scheduler.Router)
	if !ok {
		return up, replica, model
	}
	if lane := rp.Lane(); lane != "" && lane != t.lane {
		name, m, _ := strings.Cut(lane, "/")
		if f, ok := t.p.ups[name]; ok {
			up = f
			if m != "" && m != "*" {
				model = m
			}
		}
	}
	replica = rp.Replica()
	if replica < 0 || replica > len(up.Replicas) {
		replica = 0
	}
	return up, replica, model
}

// baseOf is the base URL of an upstream's replica.
func baseOf(up *Upstream, replica int) string {
	if replica > 0 {
		return up.Replicas[replica-1]
	}
	return up.BaseURL
}

// send makes one upstream request with the client's body (its model set to model)
// and hdr.
func (t *turn) send(ctx context.Context, up *Upstream, replica int, model string, hdr http.Header) (*http.Response, error) {
	body := t.body
	if model != t.model {
		b, err := withModel(body, model)
		if err != nil {
			return nil, err
		}
		body = b
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseOf(up, replica)+t.wire.endpoint+t.query(up, replica), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = hdr
	return t.p.client.Do(req)
}

// withModel returns body with its model field set to model (for a fallback upstream
// that serves another model).
func withModel(body []byte, model string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(model)
	m["model"] = b
	return json.Marshal(m)
}

// Headers a proxy does not pass on (hop-by-hop, and the ones the transport sets).
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// skipRequestHeader reports whether a client header (canonical name) stays behind.
// The x-luft-* headers are luft's own (run id, caller, class, token): they are for the
// proxy, and would tell the upstream who the caller is.
func skipRequestHeader(k string) bool {
	switch k {
	case "Host", "Content-Length", "Accept-Encoding":
		return true
	}
	return hopByHop[k] || strings.HasPrefix(k, "X-Luft-")
}

// copyHeader copies an upstream response's headers for the client.
func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		if hopByHop[k] {
			continue
		}
		dst[k] = vv
	}
}
