package daemon

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/luft-run/luft/door"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// RunJSON is a run as the API shows it: the one shape of a run every door answers with
// (door.Run), with Hosted set (this daemon drives it) and, for GET /api/runs/{id}, the
// pending approvals (Pending; POST /api/runs/{id}/approve answers one).
type RunJSON = door.Run

// ApprovalJSON is a tool call waiting for a person's answer.
type ApprovalJSON = door.Approval

// ApproveRequest is the body of POST /api/runs/{id}/approve.
type ApproveRequest struct {
	ApprovalID string `json:"approval_id,omitempty"` // "" = the run's only pending approval
	Allow      *bool  `json:"allow"`
}

// PhaseJSON is one phase of a run.
type PhaseJSON = door.Phase

// RunPage is one page of GET /api/runs.
type RunPage struct {
	Runs       []RunJSON `json:"runs"`
	NextCursor string    `json:"next_cursor,omitempty"` // pass as ?cursor= for the next page
}

// LaneJSON is one scheduler lane in the daemon's status.
type LaneJSON struct {
	Lane              string    `json:"lane"`
	Running           int       `json:"running"`
	QueuedInteractive int       `json:"queued_interactive"`
	QueuedBatch       int       `json:"queued_batch"`
	Admitted          uint64    `json:"admitted"`
	Waits             uint64    `json:"waits"`
	RateLimited       uint64    `json:"rate_limited"`
	Retries           uint64    `json:"retries"`
	Suspended         uint64    `json:"suspended"`
	TokensLeft        float64   `json:"tokens_left"`
	TokenLimit        float64   `json:"token_limit"`
	RequestsLeft      float64   `json:"requests_left"`
	RequestLimit      float64   `json:"request_limit"`
	PausedUntil       time.Time `json:"paused_until,omitzero"` // a 429's Retry-After holds the lane until then
	Circuit           string    `json:"circuit"`
}

// StatusJSON is GET /api/daemon.
type StatusJSON struct {
	Info
	UptimeSeconds float64    `json:"uptime_s"`
	RunsHosted    int        `json:"runs_hosted"` // started or resumed here since it started
	RunsLive      int        `json:"runs_live"`   // running here now
	Stopping      bool       `json:"stopping"`
	Lanes         []LaneJSON `json:"lanes"`
	// StorageProblem is the last failure to write the state dir (a full disk, say) that
	// stopped a hosted run or refused a start, with what to do; "" once a later run's
	// attempt has ended without one.
	StorageProblem string `json:"storage_problem,omitempty"`
	// Node is this daemon's node id ("" without one); Nodes every node of the store.
	Node  string     `json:"node,omitempty"`
	Nodes []NodeJSON `json:"nodes"`
}

// NodeJSON is a node of the store as GET /api/daemon lists it.
type NodeJSON struct {
	ID              string    `json:"id"`
	Address         string    `json:"address"`
	PID             int       `json:"pid"`
	StartedAt       time.Time `json:"started_at"`
	Heartbeat       time.Time `json:"heartbeat"`
	HeartbeatAgeSec float64   `json:"heartbeat_age_s"`
	RunsOwned       int       `json:"runs_owned"` // running runs it is the owner of
	Self            bool      `json:"self,omitempty"`
}

// handler is the API. Over HTTP every request needs the bearer token and a loopback Host
// (and Origin, when sent); the unix socket is private to its owner already.
func (d *Daemon) handler(overHTTP bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/daemon", d.getDaemon)
	mux.HandleFunc("POST /api/daemon/shutdown", d.postShutdown)
	mux.HandleFunc("GET /api/runs", d.listRuns)
	mux.HandleFunc("POST /api/runs", d.startRun)
	mux.HandleFunc("GET /api/runs/{id}", d.getRun)
	mux.HandleFunc("GET /api/runs/{id}/events", d.getEvents)
	mux.HandleFunc("GET /api/runs/{id}/report", d.getReport)
	mux.HandleFunc("POST /api/runs/{id}/cancel", d.cancelRun)
	mux.HandleFunc("POST /api/runs/{id}/resume", d.resumeRun)
	mux.HandleFunc("POST /api/runs/{id}/approve", d.approveRun)
	open := http.NewServeMux() // mounts that need no token on a loopback listener
	hasOpen := false
	for _, m := range d.mounts {
		mux.Handle(m.Pattern, m.Handler)
		if m.OpenOnLoopback && d.loopbackListener() {
			open.Handle(m.Pattern, m.Handler)
			hasOpen = true
		}
	}
	if !overHTTP {
		return refusePeers(mux)
	}
	web := dashboard()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(hostOnly(r.Host)) {
			apiError(w, http.StatusForbidden, "Host %q is not a loopback name: the API answers only requests addressed to this machine", r.Host)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || !loopbackHost(hostOnly(u.Host)) {
				apiError(w, http.StatusForbidden, "Origin %q is not a loopback page: cross-site requests are refused", o)
				return
			}
		}
		if isDashboard(r) {
			web.ServeHTTP(w, r)
			return
		}
		if hasOpen {
			if _, pattern := open.Handler(r); pattern != "" {
				open.ServeHTTP(w, r)
				return
			}
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if tok := r.Header.Get("X-Luft-Token"); tok != "" {
			// A door whose clients send their own Authorization upstream (the proxy)
			// takes the token in this header instead.
			got, ok = tok, true
		}
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(d.token)) != 1 {
			// An Anthropic client (Claude Code's ANTHROPIC_API_KEY) sends its key as x-api-key.
			got, ok = r.Header.Get("X-Api-Key"), true
		}
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(d.token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="luft"`)
			apiError(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <token>, x-luft-token: <token> or x-api-key: <token> (LUFT_TOKEN, or the file %s in the state dir)", TokenFile)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// hostOnly is the host of a host[:port].
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

func apiError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// runError answers a failure to find or act on a run.
func runError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, storage.ErrRunNotFound):
		apiError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, storage.ErrAmbiguousRun):
		apiError(w, http.StatusBadRequest, "%v", err)
	default:
		apiError(w, http.StatusInternalServerError, "%v", err)
	}
}

func (d *Daemon) status() StatusJSON {
	d.mu.Lock()
	hosted := d.hosted
	d.mu.Unlock()
	st := StatusJSON{Info: d.info, UptimeSeconds: d.opts.Now().Sub(d.info.StartedAt).Seconds(), RunsHosted: hosted,
		RunsLive: len(d.opts.Service.Live()), Stopping: d.stopping.Load(), Lanes: []LaneJSON{}}
	if p := d.storageProblem.Load(); p != nil {
		st.StorageProblem = *p
	}
	st.Nodes = []NodeJSON{}
	if d.opts.Keeper != nil {
		st.Node = d.opts.Keeper.ID()
	}
	if nodes, err := d.opts.Store.Nodes(context.Background()); err == nil {
		now := d.opts.Now()
		for _, n := range nodes {
			st.Nodes = append(st.Nodes, NodeJSON{ID: n.ID, Address: n.Address, PID: n.PID, StartedAt: n.StartedAt,
				Heartbeat: n.HeartbeatAt, HeartbeatAgeSec: max(now.Sub(n.HeartbeatAt).Seconds(), 0), RunsOwned: n.Runs,
				Self: n.ID == st.Node})
		}
	}
	if stats, ok := d.opts.Service.SchedulerStats(); ok {
		for _, l := range stats.Lanes {
			st.Lanes = append(st.Lanes, LaneJSON{Lane: l.Lane, Running: l.Running, QueuedInteractive: l.QueuedInteractive,
				QueuedBatch: l.QueuedBatch, Admitted: l.Admitted, Waits: l.Waits, RateLimited: l.RateLimited,
				Retries: l.Retries, Suspended: l.Suspended, TokensLeft: l.TokensLeft, TokenLimit: l.TokenLimit,
				RequestsLeft: l.RequestsLeft, RequestLimit: l.RequestLimit, PausedUntil: l.PausedUntil, Circuit: l.Circuit})
		}
	}
	return st
}

func (d *Daemon) getDaemon(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, d.status())
}

// ShutdownRequest is the optional body of POST /api/daemon/shutdown.
type ShutdownRequest struct {
	// GraceMS, when set, is how long hosted runs may go on before they are suspended,
	// in place of the daemon's own grace period (0 = suspend them at once).
	GraceMS *int64 `json:"grace_ms,omitempty"`
}

// ShutdownReply answers POST /api/daemon/shutdown.
type ShutdownReply struct {
	Stopping bool  `json:"stopping"`
	PID      int   `json:"pid"`
	GraceMS  int64 `json:"grace_ms"` // the grace period the shutdown has
}

func (d *Daemon) postShutdown(w http.ResponseWriter, r *http.Request) {
	var req ShutdownRequest
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			apiError(w, http.StatusBadRequest, "shutdown: the body is not a shutdown request: %v (fields: grace_ms)", err)
			return
		}
	}
	grace := d.opts.Grace
	if req.GraceMS != nil {
		if *req.GraceMS < 0 {
			apiError(w, http.StatusBadRequest, "shutdown: grace_ms %d is negative: give 0 or more", *req.GraceMS)
			return
		}
		grace = time.Duration(*req.GraceMS) * time.Millisecond
	}
	grace = d.ShutdownWithin(grace)
	writeJSON(w, http.StatusAccepted, ShutdownReply{Stopping: true, PID: d.info.PID, GraceMS: grace.Milliseconds()})
}

func (d *Daemon) runJSON(r storage.Run) RunJSON {
	out := door.NewRun(r).WaitingAt(r, d.opts.Now())
	hosted := runtime.Running(r.Status) && r.PID == d.info.PID
	out.Hosted = &hosted
	return out
}

// listRuns is GET /api/runs?status=&workflow=&limit=&cursor=: newest first; the cursor is
// the id of the last run of the previous page.
func (d *Daemon) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 50
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			apiError(w, http.StatusBadRequest, "limit %q: want a whole number from 1 to 1000", s)
			return
		}
		limit = n
	}
	status, wf, cursor := q.Get("status"), q.Get("workflow"), q.Get("cursor")
	if cursor != "" {
		if _, err := d.opts.Store.GetRun(r.Context(), cursor); err != nil {
			apiError(w, http.StatusBadRequest, "cursor %q is not a run of this list: start again without cursor", cursor)
			return
		}
	}
	// One more than a page tells whether another follows. A workflow filter is applied
	// here, so it reads on until the page is full.
	opts := storage.ListOptions{Status: status, Before: cursor, Limit: limit + 1}
	if wf != "" {
		opts.Limit = 0
	}
	runs, err := d.opts.Service.List(r.Context(), opts)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "list runs: %v", err)
		return
	}
	page := RunPage{Runs: []RunJSON{}}
	for _, run := range runs {
		if wf != "" && !strings.Contains(run.Workflow, wf) {
			continue
		}
		if len(page.Runs) == limit {
			page.NextCursor = page.Runs[limit-1].ID
			break
		}
		page.Runs = append(page.Runs, d.runJSON(run))
	}
	writeJSON(w, http.StatusOK, page)
}

func (d *Daemon) getRun(w http.ResponseWriter, r *http.Request) {
	info, err := d.opts.Service.Status(r.Context(), r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return
	}
	run := d.runJSON(info.Run)
	run.Pending = door.NewApprovals(info.Pending)
	// phases is always there, [] before the first one (the dashboard reads it), where
	// the shape leaves an empty list out.
	phases := door.NewPhases(info.Phases)
	if phases == nil {
		phases = []PhaseJSON{}
	}
	writeJSON(w, http.StatusOK, struct {
		RunJSON
		Phases []PhaseJSON `json:"phases"`
	}{run, phases})
}

// approveRun is POST /api/runs/{id}/approve {approval_id, allow}: it answers a tool call
// the run waits on.
func (d *Daemon) approveRun(w http.ResponseWriter, r *http.Request) {
	var req ApproveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Allow == nil {
		detail := "allow is missing"
		if err != nil {
			detail = err.Error()
		}
		apiError(w, http.StatusBadRequest, "approve: the body is not an approval: %s (send {\"approval_id\": \"...\", \"allow\": true|false}; approval_id may be left out when the run waits on one call)", detail)
		return
	}
	a, err := d.opts.Service.Approve(r.Context(), r.PathValue("id"), req.ApprovalID, *req.Allow)
	switch {
	case errors.Is(err, storage.ErrRunNotFound), errors.Is(err, storage.ErrAmbiguousRun):
		runError(w, err)
		return
	case errors.Is(err, runtime.ErrNoApproval):
		apiError(w, http.StatusNotFound, "%v", err)
		return
	case errors.Is(err, runtime.ErrApprovalAmbiguous), errors.Is(err, storage.ErrApprovalDecided):
		apiError(w, http.StatusConflict, "%v", err)
		return
	case err != nil:
		apiError(w, http.StatusInternalServerError, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": a.RunID, "approval_id": a.ID, "tool": a.Tool, "status": a.Status})
}

func (d *Daemon) getReport(w http.ResponseWriter, r *http.Request) {
	run, err := d.opts.Service.Resolve(r.Context(), r.PathValue("id"))
	if err != nil {
		runError(w, err)
		return
	}
	if !run.HasReport {
		apiError(w, http.StatusNotFound, "run %s has no report (it is %s)", run.ID, run.Status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(run.Report)
}

func (d *Daemon) cancelRun(w http.ResponseWriter, r *http.Request) {
	run, err := d.opts.Service.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		if errors.Is(err, storage.ErrRunNotFound) || errors.Is(err, storage.ErrAmbiguousRun) {
			runError(w, err)
			return
		}
		apiError(w, http.StatusConflict, "%v", err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"run_id": run.ID, "status": "cancelling"})
}

func (d *Daemon) startRun(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxScript))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "start: the body is not a start request: %v (fields: script, path, args, backend, model, class, concurrency, max_agent_calls, timeout_ns, caller, unattended)", err)
		return
	}
	run, err := d.start(r.Context(), req)
	if err != nil {
		var ie *inputError
		switch {
		case errors.Is(err, errStopping):
			apiError(w, http.StatusServiceUnavailable, "%v", err)
		case errors.As(err, &ie), lua.ErrorKindOf(err) != "":
			apiError(w, http.StatusBadRequest, "%v", err)
		default:
			apiError(w, http.StatusBadRequest, "start: %v", err)
		}
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"run_id": run.ID, "status": "running", "attempt": run.Attempt})
}

// getEvents is GET /api/runs/{id}/events?since=&types=a,b&follow=1: JSON lines, or
// Server-Sent Events when the client accepts text/event-stream (the event id is its seq,
// so a reconnect with Last-Event-ID goes on where it stopped). With follow (always for
// SSE) the stream ends after run_done.
func (d *Daemon) getEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since int64
	if s := q.Get("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			apiError(w, http.StatusBadRequest, "since %q: want a seq >= 0", s)
			return
		}
		since = n
	}
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	if s := r.Header.Get("Last-Event-ID"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > since {
			since = n
		}
	}
	var types []string
	if s := q.Get("types"); s != "" {
		types = strings.Split(s, ",")
	}
	follow := sse || q.Get("follow") == "1" || q.Get("follow") == "true"
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	events, errc, err := d.events(ctx, r.PathValue("id"), runtime.EventsOptions{Since: since, Types: types, Follow: follow})
	if err != nil {
		runError(w, err)
		return
	}
	flusher, _ := w.(http.Flusher)
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	for ev := range events {
		if err := writeEvent(w, ev, sse); err != nil {
			return // the client went away
		}
		if len(events) == 0 && flusher != nil {
			flusher.Flush()
		}
	}
	if err := <-errc; err != nil && sse {
		fmt.Fprintf(w, "event: error\ndata: %q\n\n", err.Error())
	}
}

func writeEvent(w http.ResponseWriter, ev event.Event, sse bool) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if sse {
		_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// events streams a run's events. A run this daemon hosts is followed on its event bus,
// which wakes the stream as each event is stored; any other run is read from the store.
func (d *Daemon) events(ctx context.Context, ref string, o runtime.EventsOptions) (<-chan event.Event, <-chan error, error) {
	if o.Follow {
		if row, err := d.opts.Service.Resolve(ctx, ref); err == nil {
			for _, run := range d.opts.Service.Live() {
				if run.ID == row.ID {
					return filterTypes(ctx, run.Subscribe(ctx, o.Since), o.Types)
				}
			}
		}
	}
	return d.opts.Service.Events(ctx, ref, o)
}

// filterTypes passes on the events of the given types (all when none are given).
func filterTypes(ctx context.Context, in <-chan event.Event, types []string) (<-chan event.Event, <-chan error, error) {
	errc := make(chan error, 1)
	close(errc)
	if len(types) == 0 {
		return in, errc, nil
	}
	out := make(chan event.Event, cap(in))
	go func() {
		defer close(out)
		for ev := range in {
			if !slices.Contains(types, ev.Type) {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc, nil
}

// ResumeRequest is the body of POST /api/runs/{id}/resume (the id "-" is the newest
// unfinished run).
type ResumeRequest struct {
	AllowChangedScript  bool   `json:"allow_changed_script,omitempty"`
	RerunFromDivergence bool   `json:"rerun_from_divergence,omitempty"`
	Caller              string `json:"caller,omitempty"`
	// Repeated are start settings given again (runtime.ResumeSpec.Repeated).
	Repeated map[string]string `json:"repeated,omitempty"`
}

func (d *Daemon) resumeRun(w http.ResponseWriter, r *http.Request) {
	var req ResumeRequest
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			apiError(w, http.StatusBadRequest, "resume: the body is not a resume request: %v (fields: allow_changed_script, rerun_from_divergence, caller, repeated)", err)
			return
		}
	}
	if d.stopping.Load() {
		apiError(w, http.StatusServiceUnavailable, "%v", errStopping)
		return
	}
	ref := r.PathValue("id")
	if ref == "-" {
		ref = ""
	}
	run, err := d.opts.Service.Resume(context.WithoutCancel(r.Context()), runtime.ResumeSpec{Run: ref,
		AllowChangedScript: req.AllowChangedScript, RerunFromDivergence: req.RerunFromDivergence, Repeated: req.Repeated})
	if err != nil {
		switch {
		case errors.Is(err, runtime.ErrSettingChanged):
			apiError(w, http.StatusBadRequest, "%v", err)
		case errors.Is(err, storage.ErrRunNotFound), errors.Is(err, storage.ErrAmbiguousRun):
			runError(w, err)
		case errors.Is(err, runtime.ErrNotResumable), errors.Is(err, runtime.ErrScriptChanged), errors.Is(err, runtime.ErrStillRunning):
			apiError(w, http.StatusConflict, "%v", err)
		case lua.ErrorKindOf(err) != "":
			apiError(w, http.StatusBadRequest, "%v", err)
		default:
			apiError(w, http.StatusInternalServerError, "%v", err)
		}
		return
	}
	status := "running"
	if run.AlreadyCompleted() {
		status = "completed"
	} else {
		d.track(run, req.Caller)
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": run.ID, "status": status, "attempt": run.Attempt})
}
