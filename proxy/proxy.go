package proxy

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
)

// Upstream is one backend the proxy sends turns to: a [backends.NAME] of type openai
// (chat completions and the Responses API) or anthropic (Anthropic Messages).
type Upstream struct {
	Name string // the backend id; its scheduler lane is Name/model
	// Family is the wires it speaks: FamilyOpenAI (the default) or FamilyAnthropic.
	Family   string
	BaseURL  string   // ends in /v1, as OpenAI and Anthropic clients expect
	Replicas []string // further base URLs serving the same model
	Model    string   // the model it serves; "" = whatever model a request names
	// APIKey, when set, is luft's key for the backend: it replaces the client's
	// Authorization header (x-api-key, for an anthropic upstream). A fallback at another host than the upstream a client
	// addressed gets none of the client's credentials: without an APIKey, turns routed
	// there fail.
	APIKey   string
	Fallback string // the backend that takes this one's turns while its circuit is open
	// Prices in currency units per million tokens, for the runs' cost.
	PriceInPerMTok, PriceOutPerMTok float64

	origins map[string]bool // of BaseURL and Replicas: where the client's credentials may go
}

// Options configure a Proxy.
type Options struct {
	Upstreams []Upstream
	// Default names the upstream that takes a model no upstream of its family names, when
	// that upstream has no model of its own. A family without it takes its only upstream
	// when that one has no model; otherwise such requests are refused.
	Default string
	// Scheduler admits every turn: the process's one scheduler (required).
	Scheduler scheduler.Scheduler
	// Service records the proxy's runs and their turns, as the external runs of the
	// process's runtime (runtime.Service.OpenExternal), and shows them running in list
	// and status while the proxy drives them; nil = not recorded. No answer is given
	// before its turn's start and end are recorded (see the package doc).
	Service *runtime.Service
	// Clock reads the time and times the expiry of idle runs; default the wall clock.
	Clock scheduler.Clock
	// IdleTTL ends a run with no turn for this long; default 15 minutes.
	IdleTTL time.Duration
	// MaxBody is the largest request body accepted; default 32 MiB.
	MaxBody int64
	// MaxRuns bounds the runs tracked at once (the least recently active ends first);
	// default 10,000. MaxToolIDs bounds the tool_call ids remembered; default 200,000.
	MaxRuns, MaxToolIDs int
	// Token, when set, must come with every request as x-luft-token (or Authorization:
	// Bearer): a proxy listening beyond loopback.
	Token string
	// Secret is a token the proxy does not check but never passes upstream either (the
	// daemon's, which the daemon checks itself): an Authorization header carrying it is
	// dropped. Token implies it.
	Secret string
	// Transport sends the upstream requests; default a transport tuned for many
	// concurrent streams to few hosts.
	Transport http.RoundTripper
	// Log receives the proxy's own problems (its state dir failing, an upstream that
	// cannot list its models); never keys. Default discard.
	Log io.Writer
}

// Proxy serves the OpenAI-compatible endpoint. It is an http.Handler; Close ends its
// runs.
type Proxy struct {
	opts     Options
	ups      map[string]*Upstream // by name
	families map[string]*family   // by Upstream.Family
	client   *http.Client
	log      *log.Logger
	runs     *table
	mux      *http.ServeMux
	closed   chan struct{}

	tmu   sync.Mutex // guards the timers
	sweep scheduler.Timer
	poll  scheduler.Timer
}

// family is the upstreams of one family.
type family struct {
	byModel map[string]*Upstream
	def     *Upstream // takes the models none names
	models  []string  // advertised, sorted
}

// Defaults of Options.
const (
	DefaultIdleTTL    = 15 * time.Minute
	DefaultMaxBody    = 32 << 20
	DefaultMaxRuns    = 10_000
	DefaultMaxToolIDs = 200_000
	// maxHeaderValue bounds x-luft-run-id and x-luft-caller.
	maxHeaderValue = 256
)

// New checks opts and returns a Proxy. Runs a process that is gone left stored as
// running under proxy:* are ended first (they cannot be resumed: their agent keeps its
// own loop).
func New(opts Options) (*Proxy, error) {
	if opts.Scheduler == nil {
		return nil, errors.New("proxy: Options.Scheduler is required (the process's scheduler)")
	}
	if opts.Clock == nil {
		opts.Clock = scheduler.RealClock()
	}
	if opts.IdleTTL <= 0 {
		opts.IdleTTL = DefaultIdleTTL
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxRuns <= 0 {
		opts.MaxRuns = DefaultMaxRuns
	}
	if opts.MaxToolIDs <= 0 {
		opts.MaxToolIDs = DefaultMaxToolIDs
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Secret == "" {
		opts.Secret = opts.Token
	}
	if opts.Transport == nil {
		opts.Transport = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: 10 * time.Second,
			// The body passes through as the upstream sent it, and usage is read from it.
			DisableCompression: true,
			ForceAttemptHTTP2:  true,
		}
	}
	p := &Proxy{opts: opts, ups: map[string]*Upstream{}, families: map[string]*family{},
		client: &http.Client{Transport: opts.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		log:    log.New(opts.Log, "proxy: ", log.LstdFlags|log.LUTC), closed: make(chan struct{})}
	for i := range opts.Upstreams {
		u := opts.Upstreams[i]
		if u.Name == "" || strings.Contains(u.Name, "/") {
			return nil, fmt.Errorf("proxy: upstream %q: a backend name is required and may not contain /", u.Name)
		}
		if _, dup := p.ups[u.Name]; dup {
			return nil, fmt.Errorf("proxy: upstream %q is configured twice", u.Name)
		}
		// OPENAI_BASE_URL and a Go caller's Options reach here unchecked by the config.
		if err := config.CheckURL(u.BaseURL); err != nil {
			return nil, fmt.Errorf("proxy: upstream %q: base URL: %w", u.Name, err)
		}
		switch u.Family {
		case "":
			u.Family = FamilyOpenAI
		case FamilyOpenAI, FamilyAnthropic:
		default:
			return nil, fmt.Errorf("proxy: upstream %q: family %q: use %q or %q", u.Name, u.Family, FamilyOpenAI, FamilyAnthropic)
		}
		u.BaseURL = strings.TrimRight(u.BaseURL, "/")
		for j := range u.Replicas {
			if err := config.CheckURL(u.Replicas[j]); err != nil {
				return nil, fmt.Errorf("proxy: upstream %q: replica %d: %w", u.Name, j+1, err)
			}
			u.Replicas[j] = strings.TrimRight(u.Replicas[j], "/")
		}
		u.origins = origins(&u)
		p.ups[u.Name] = &u
	}
	// Upstreams by name order, so two that serve one model resolve the same way every time;
	// the default wins such a tie.
	for _, name := range slices.Sorted(maps.Keys(p.ups)) {
		u := p.ups[name]
		f := p.families[u.Family]
		if f == nil {
			f = &family{byModel: map[string]*Upstream{}}
			p.families[u.Family] = f
		}
		if u.Model == "" {
			continue
		}
		if prev, ok := f.byModel[u.Model]; !ok || (name == opts.Default && prev.Name != opts.Default) {
			f.byModel[u.Model] = u
		}
	}
	for _, u := range p.ups {
		if u.Fallback != "" {
			if f, ok := p.ups[u.Fallback]; !ok || f.Family != u.Family {
				return nil, fmt.Errorf("proxy: upstream %q: fallback %q is not a backend of its type (%s)", u.Name, u.Fallback, u.Family)
			}
		}
	}
	// Said at start, not first when the upstream fails: such a fallback refuses its turns.
	for _, name := range slices.Sorted(maps.Keys(p.ups)) {
		if u, f := p.ups[name], p.ups[p.ups[name].Fallback]; f != nil && f.APIKey == "" && !within(f.origins, u.origins) {
			p.log.Printf("upstream %q: its fallback %q is at another host and has no key of its own (api_key_env in [backends.%s]): "+
				"the turns it takes will fail, since the client's credentials are not sent to another host", u.Name, f.Name, f.Name)
		}
	}
	for name, f := range p.families {
		if u, ok := p.ups[opts.Default]; ok && u.Model == "" && u.Family == name {
			f.def = u
		} else if opts.Default == "" || p.ups[opts.Default] == nil || p.ups[opts.Default].Family != name {
			// Without a default of its own, a family's only upstream takes any model when it
			// names none.
			var only []*Upstream
			for _, u := range p.ups {
				if u.Family == name {
					only = append(only, u)
				}
			}
			if len(only) == 1 && only[0].Model == "" {
				f.def = only[0]
			}
		}
		f.models = slices.Sorted(maps.Keys(f.byModel))
	}
	p.runs = newTable(opts.MaxRuns, opts.MaxToolIDs, opts.Service, opts.IdleTTL, p.log)
	p.endStale()
	p.mux = http.NewServeMux()
	for _, wr := range wires {
		p.mux.HandleFunc("POST "+wr.path(), func(w http.ResponseWriter, r *http.Request) { p.serve(wr, w, r) })
	}
	p.mux.HandleFunc("POST /v1/messages/count_tokens", p.countTokens)
	p.mux.HandleFunc("GET /v1/models", p.listModels)
	p.mux.HandleFunc("DELETE /v1/runs/{id}", p.deleteRun)
	p.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		fail := writeError
		if anthropicClient(r) {
			fail = writeAnthropicError
		}
		fail(w, http.StatusNotFound, "invalid_request_error", "not_found",
			fmt.Sprintf("luft's proxy does not serve %s %s: it serves POST /v1/chat/completions, /v1/responses, /v1/messages and /v1/messages/count_tokens, GET /v1/models and DELETE /v1/runs/{id}", r.Method, r.URL.Path))
	})
	p.armSweep()
	p.armCancelPoll()
	return p, nil
}

// ServeHTTP serves the proxy's endpoints.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.opts.Token != "" && !p.authorized(r) {
		fail := writeError
		if anthropicClient(r) {
			fail = writeAnthropicError
		}
		fail(w, http.StatusUnauthorized, "invalid_request_error", "luft_token",
			"this luft proxy needs its token: send it as the x-luft-token header (LUFT_TOKEN of the proxy), as a bearer token, or as x-api-key")
		return
	}
	p.mux.ServeHTTP(w, r)
}

// authorized reports whether r carries the proxy's token.
func (p *Proxy) authorized(r *http.Request) bool {
	for _, tok := range [...]string{r.Header.Get("x-luft-token"), bearer(r), r.Header.Get("x-api-key")} {
		if tok != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(p.opts.Token)) == 1 {
			return true
		}
	}
	return false
}

// Close ends every run the proxy tracks (each is stored completed) and returns once
// their ends are written. Requests still in flight finish on their own.
func (p *Proxy) Close() error {
	select {
	case <-p.closed:
		return nil
	default:
	}
	close(p.closed)
	p.tmu.Lock()
	for _, t := range []scheduler.Timer{p.sweep, p.poll} {
		if t != nil {
			t.Stop()
		}
	}
	p.tmu.Unlock()
	if err := p.runs.endAll(p.opts.Clock.Now(), "the proxy stopped").do(context.Background()); err != nil {
		p.log.Printf("record the end of its runs: %v", err)
		return fmt.Errorf("proxy: record the end of its runs: %w", err)
	}
	return nil
}

// isClosed reports whether Close was called.
func (p *Proxy) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// armSweep schedules the next expiry sweep.
func (p *Proxy) armSweep() {
	every := p.opts.IdleTTL / 4
	if every < time.Second {
		every = time.Second
	}
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if p.isClosed() {
		return
	}
	p.sweep = p.opts.Clock.AfterFunc(every, func() {
		if p.isClosed() {
			return
		}
		if err := p.runs.expire(p.opts.Clock.Now(), p.opts.IdleTTL).do(context.Background()); err != nil {
			p.log.Printf("record the end of idle runs: %v", err)
		}
		p.armSweep()
	})
}

// cancelPoll is how often the proxy looks for its runs being cancelled (luft cancel in
// any process, the dashboard's cancel button).
const cancelPoll = time.Second

// armCancelPoll schedules the next look for cancel requests.
func (p *Proxy) armCancelPoll() {
	if p.opts.Service == nil {
		return
	}
	p.tmu.Lock()
	defer p.tmu.Unlock()
	if p.isClosed() {
		return
	}
	p.poll = p.opts.Clock.AfterFunc(cancelPoll, func() {
		if p.isClosed() {
			return
		}
		p.cancelRequested()
		p.armCancelPoll()
	})
}

// cancelRequested ends the runs of this proxy whose cancel was requested.
func (p *Proxy) cancelRequested() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids, err := p.opts.Service.CancelRequests(ctx, workflowPrefix)
	if err != nil {
		p.log.Printf("%v", err)
		return
	}
	if len(ids) > 0 {
		if err := p.runs.cancel(ids, p.opts.Clock.Now()).do(ctx); err != nil {
			p.log.Printf("record the end of cancelled runs: %v", err)
		}
	}
}

// endStale ends the proxy runs left running by a process that is gone.
func (p *Proxy) endStale() {
	if p.opts.Service == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.opts.Service.EndLeft(ctx, workflowPrefix, "ended: the proxy that hosted it stopped"); err != nil {
		p.log.Printf("%v", err)
	}
}

// modelJSON is one entry of GET /v1/models.
type modelJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelsTimeout bounds the question to the default upstream for its models.
const modelsTimeout = 10 * time.Second

// listModels answers GET /v1/models with the configured upstreams' models: those of
// type openai, or, to an Anthropic client (one that sends anthropic-version), those of
// type anthropic in Anthropic's shape. A family's default upstream, when it names no
// model, takes any: the models it lists itself are added (asked with the client's
// credentials, as a turn would be), or, when it cannot say, its backend name, so that the
// list is never empty while the proxy serves something.
func (p *Proxy) listModels(w http.ResponseWriter, r *http.Request) {
	name := FamilyOpenAI
	if anthropicClient(r) {
		name = FamilyAnthropic
	}
	var ids, owners []string
	if f := p.families[name]; f != nil {
		for _, m := range f.models {
			ids, owners = append(ids, m), append(owners, f.byModel[m].Name)
		}
		if f.def != nil {
			more, err := p.upstreamModels(r, f.def)
			if err != nil {
				p.log.Printf("GET /v1/models: ask backend %q for its models: %v (listing the backend's name instead)", f.def.Name, err)
				more = []string{f.def.Name}
			}
			for _, id := range more {
				if _, listed := f.byModel[id]; !listed {
					ids, owners = append(ids, id), append(owners, f.def.Name)
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if name == FamilyAnthropic {
		type model struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		}
		out := struct {
			Data    []model `json:"data"`
			HasMore bool    `json:"has_more"`
			FirstID *string `json:"first_id"`
			LastID  *string `json:"last_id"`
		}{Data: []model{}}
		for _, id := range ids {
			out.Data = append(out.Data, model{Type: "model", ID: id, DisplayName: id, CreatedAt: "1970-01-01T00:00:00Z"})
		}
		if len(ids) > 0 {
			out.FirstID, out.LastID = &ids[0], &ids[len(ids)-1]
		}
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	out := struct {
		Object string      `json:"object"`
		Data   []modelJSON `json:"data"`
	}{Object: "list", Data: []modelJSON{}}
	for i, id := range ids {
		out.Data = append(out.Data, modelJSON{ID: id, Object: "model", OwnedBy: owners[i]})
	}
	_ = json.NewEncoder(w).Encode(out)
}

// anthropicClient reports whether r comes from an Anthropic client: every Anthropic SDK
// sends anthropic-version.
func anthropicClient(r *http.Request) bool {
	return r.Header.Get("anthropic-version") != ""
}

// bearer is the token of r's Authorization: Bearer header, "" without one.
func bearer(r *http.Request) string {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return tok
}

// maxCountBody bounds the answer of an upstream's count_tokens.
const maxCountBody = 1 << 20

// countTokens serves POST /v1/messages/count_tokens: passed to the Anthropic upstream of
// the request's model as it came (it costs no tokens, so it is not scheduled), its
// answer passed back.
func (p *Proxy) countTokens(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, p.opts.MaxBody)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeAnthropicError(w, http.StatusRequestEntityTooLarge, "", "request_too_large",
				fmt.Sprintf("request body over %d bytes: luft's proxy accepts at most that much (its max body setting)", mb.Limit))
			return
		}
		writeAnthropicError(w, http.StatusBadRequest, "", "unreadable_body", "reading the request body: "+err.Error())
		return
	}
	var q struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(body, &q); err != nil || q.Model == "" {
		writeAnthropicError(w, http.StatusBadRequest, "", "invalid_request", "a count_tokens request is a JSON object with model and messages")
		return
	}
	up := p.upstreamOf(FamilyAnthropic, q.Model)
	if up == nil {
		writeAnthropicError(w, http.StatusNotFound, "", "model_not_found", p.unknownModel(messagesWire, q.Model))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), modelsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, up.BaseURL+"/messages/count_tokens"+query(r), bytes.NewReader(body))
	if err != nil {
		writeAnthropicError(w, http.StatusBadGateway, "", "backend_unreachable", err.Error())
		return
	}
	req.Header = p.homeHeader(r, up)
	resp, err := p.client.Do(req)
	if err != nil {
		writeAnthropicError(w, http.StatusBadGateway, "", "backend_unreachable",
			fmt.Sprintf("luft could not reach backend %q at %s: %v", up.Name, up.BaseURL, err))
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCountBody))
	if err != nil {
		writeAnthropicError(w, http.StatusBadGateway, "", "backend_unreachable", fmt.Sprintf("backend %q broke off its answer: %v", up.Name, err))
		return
	}
	copyHeader(w.Header(), resp.Header)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
}

// upstreamModels asks up for the models it serves (GET {base_url}/models).
func (p *Proxy) upstreamModels(r *http.Request, up *Upstream) ([]string, error) {
	ctx, cancel := context.WithTimeout(r.Context(), modelsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, up.BaseURL+"/models", nil)
	if err != nil {
		return nil, err
	}
	req.Header = p.homeHeader(r, up)
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxParsed)).Decode(&list); err != nil {
		return nil, fmt.Errorf("its answer is not a model list: %w", err)
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID != "" {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("it lists no model")
	}
	return ids, nil
}

// deleteRun ends a run at once: DELETE /v1/runs/{id}, the id the client named
// (x-luft-run-id, within its caller) or luft's run id (the x-luft-run header).
func (p *Proxy) deleteRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	caller, err := headerValue(r, "x-luft-caller")
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_header", err.Error())
		return
	}
	if len(id) > maxHeaderValue {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_run_id", fmt.Sprintf("run id of %d bytes: at most %d", len(id), maxHeaderValue))
		return
	}
	ended, ok, ws := p.runs.end(callerOr(caller), id, p.opts.Clock.Now(), "ended by DELETE /v1/runs")
	if err := ws.do(context.Background()); err != nil {
		writeError(w, http.StatusServiceUnavailable, "server_error", codeUnrecorded,
			fmt.Sprintf("run %q ended, but luft could not record its end in its state dir: %v", id, err))
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, "invalid_request_error", "run_not_found",
			fmt.Sprintf("no live run %q for caller %q (runs are named per caller: send the same x-luft-caller; a run ends by itself after %s idle)", id, callerOr(caller), p.opts.IdleTTL))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "run_id": ended, "object": "run.deleted", "deleted": true})
}

// callerOr is the caller a request without x-luft-caller counts as.
func callerOr(c string) string {
	if c == "" {
		return "proxy"
	}
	return c
}

// headerValue reads an x-luft-* header, refusing values that are too long or hold
// control characters.
func headerValue(r *http.Request, name string) (string, error) {
	v := r.Header.Get(name)
	if len(v) > maxHeaderValue {
		return "", fmt.Errorf("header %s is %d bytes long: at most %d", name, len(v), maxHeaderValue)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return "", fmt.Errorf("header %s holds a control character", name)
		}
	}
	return v, nil
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}
