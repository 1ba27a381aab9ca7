package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Server serves an Engine over HTTP on three wires, OpenAI's chat completions and
// Responses API and Anthropic's Messages API, each the same engine (latency, slots,
// rate limits, tool rules, the log) behind its own request and response shapes:
//
//	POST /v1/chat/completions                 routed by the engine
//	POST /replicas/{i}/v1/chat/completions    pinned to replica i (one base URL per replica)
//	POST /v1/responses, /replicas/{i}/v1/responses
//	POST /v1/messages, /replicas/{i}/v1/messages
//	POST /v1/messages/count_tokens            Anthropic's token count; not limited, not logged
//	GET  /v1/models, /replicas/{i}/v1/models  Anthropic's shape with an anthropic-version header
//	GET  /v1/models/{id}
//	GET  /health, /metrics
//
// x-luft-caller (or x-gateway-inference-fairness-id, or the body's user, or Anthropic's
// metadata.user_id), x-luft-run-id and x-luft-class are copied into the ground-truth
// log, with the wire. A streamed request gets its first event when prefill ends and the
// rest when decoding ends. Query strings (Claude Code's ?beta=true) are ignored.
type Server struct {
	// AllowNonLoopback lets Start bind an address that is not a loopback address.
	AllowNonLoopback bool
	// RecordHeaders keeps the headers of every chat completions, responses and messages
	// request (RequestHeaders; not count_tokens), for tests of what a client or a proxy
	// sends upstream. Set it before Start.
	RecordHeaders bool

	engine *Engine
	mux    *http.ServeMux
	stored *responseStore // the Responses API's stored conversations

	mu      sync.Mutex
	srv     *http.Server
	url     string
	headers []http.Header // of each completion request, in order of arrival
}

// NewServer returns a server for the engine; call Start, or mount Handler yourself.
func NewServer(e *Engine) *Server {
	s := &Server{engine: e, mux: http.NewServeMux(), stored: newResponseStore(responsesKept)}
	for _, prefix := range []string{"", "/replicas/{replica}"} {
		s.mux.HandleFunc("POST "+prefix+"/v1/chat/completions", s.chat)
		s.mux.HandleFunc("POST "+prefix+"/v1/responses", s.responses)
		s.mux.HandleFunc("POST "+prefix+"/v1/messages", s.messages)
		s.mux.HandleFunc("POST "+prefix+"/v1/messages/count_tokens", s.countTokens)
		s.mux.HandleFunc("GET "+prefix+"/v1/models", s.models)
		s.mux.HandleFunc("GET "+prefix+"/v1/models/{model...}", s.model)
	}
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, APIError{
			Message: fmt.Sprintf("%s %s: no such endpoint", r.Method, r.URL.Path),
			Type:    "invalid_request_error", Code: strptr("unknown_url"),
		})
	})
	return s
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Start listens on addr ("127.0.0.1:0" when empty) and serves in the background. It
// returns the base URL, ending in /v1 as OpenAI clients expect (OPENAI_BASE_URL). An
// address that is not loopback is refused unless AllowNonLoopback is set.
func (s *Server) Start(addr string) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("fake engine: listen address %q: %w", addr, err)
	}
	if !s.AllowNonLoopback && !IsLoopback(host) {
		return "", fmt.Errorf("fake engine: refusing to listen on %q: not a loopback address (use 127.0.0.1, [::1] or localhost)", addr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return "", errors.New("fake engine: server already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("fake engine: %w", err)
	}
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	s.url = "http://" + ln.Addr().String() + "/v1"
	srv := s.srv
	go func() { _ = srv.Serve(ln) }()
	return s.url, nil
}

// IsLoopback reports whether host (a name or an IP, as in a listen address) is
// localhost or a loopback IP. An empty host (all interfaces) is not.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// URL returns the base URL (…/v1) once started.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// ReplicaURL returns the base URL that pins requests to replica i.
func (s *Server) ReplicaURL(i int) string {
	u := s.URL()
	return strings.TrimSuffix(u, "/v1") + "/replicas/" + strconv.Itoa(i) + "/v1"
}

// RequestHeaders returns the headers of every chat completions, responses and messages
// request the server got while RecordHeaders was set, in order of arrival.
func (s *Server) RequestHeaders() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]http.Header, len(s.headers))
	for i, h := range s.headers {
		out[i] = h.Clone()
	}
	return out
}

// Close stops the server at once; requests in flight are abandoned.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	return s.srv.Close()
}

// Shutdown stops the server gracefully.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Shutdown(ctx)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, e APIError) {
	writeJSON(w, status, ErrorResponse{Error: e})
}

// keepHeaders records the request's headers when RecordHeaders is set.
func (s *Server) keepHeaders(r *http.Request) {
	if s.RecordHeaders {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
	}
}

// maxBody is the largest request body any endpoint reads (a variable so that tests can
// reach it cheaply).
var maxBody int64 = 64 << 20

// readBody decodes the request's JSON body (at most maxBody bytes) into v; tooLarge
// says the body was cut off there.
func readBody(w http.ResponseWriter, r *http.Request, v any) (tooLarge bool, err error) {
	err = json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(v)
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe), err
}

// callOptions are the per-call facts of the request's path and headers: the pinned
// replica, the caller, run and class, and the wire.
func (s *Server) callOptions(r *http.Request, req *ChatRequest, wire Wire) ([]CallOption, error) {
	opts := []CallOption{WithWire(wire)}
	if v := r.PathValue("replica"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("replica %q: want a replica index from 0", v)
		}
		opts = append(opts, OnReplica(i))
	}
	caller := r.Header.Get("x-luft-caller")
	if caller == "" {
		caller = r.Header.Get("x-gateway-inference-fairness-id")
	}
	if caller == "" {
		caller = req.User
	}
	return append(opts, WithCaller(caller), WithRun(r.Header.Get("x-luft-run-id")),
		WithClass(r.Header.Get("x-luft-class"))), nil
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	s.keepHeaders(r)
	var req ChatRequest
	if _, err := readBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, APIError{
			Message: "We could not parse the JSON body of your request: " + err.Error(),
			Type:    "invalid_request_error",
		})
		return
	}
	opts, err := s.callOptions(r, &req, WireChat)
	if err != nil {
		writeError(w, http.StatusNotFound, APIError{Message: err.Error(), Type: "invalid_request_error"})
		return
	}
	if req.Stream {
		s.stream(w, r, &req, opts)
		return
	}
	res, err := s.engine.Do(r.Context(), &req, opts...)
	if err != nil {
		return // the client went away
	}
	maps.Copy(w.Header(), res.Header)
	if res.Status != http.StatusOK {
		writeJSON(w, res.Status, res.Error)
		return
	}
	writeJSON(w, http.StatusOK, res.Response)
}

// await submits req for a streamed answer and waits for it. head runs once the stream
// may start, with the headers and the record so far: when prefill ends, or with the
// final result when that came first. await returns the final result (a refusal without
// head having run), or nil when the client went away, abandoning the request.
func (s *Server) await(r *http.Request, req *ChatRequest, opts []CallOption, head func(*Result)) *Result {
	first := make(chan *Result, 1)
	done := make(chan *Result, 1)
	opts = append(slices.Clip(opts), OnFirstToken(func(res *Result) { first <- res }))
	cancel := s.engine.Submit(req, func(res *Result) { done <- res }, opts...)
	select {
	case <-r.Context().Done():
		cancel()
		return nil
	case res := <-done:
		if res.Status == http.StatusOK {
			head(res)
		}
		return res
	case partial := <-first:
		head(partial)
	}
	select {
	case <-r.Context().Done():
		cancel()
		return nil
	case res := <-done:
		return res
	}
}

// startSSE sends the status line and headers of an event stream.
func startSSE(w http.ResponseWriter, h http.Header) {
	maps.Copy(w.Header(), h)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, req *ChatRequest, opts []CallOption) {
	res := s.await(r, req, opts, func(partial *Result) {
		startSSE(w, partial.Header)
		s.writeChunk(w, partial.Record, req.Model, ChunkChoice{Delta: Delta{Role: "assistant", Content: strptr("")}}, nil)
	})
	switch {
	case res == nil:
		return
	case res.Status != http.StatusOK:
		maps.Copy(w.Header(), res.Header)
		writeJSON(w, res.Status, res.Error)
		return
	}
	rec := res.Record
	msg := res.Response.Choices[0].Message
	for _, piece := range splitKeepSpace(string(msg.Content)) {
		s.writeChunk(w, rec, req.Model, ChunkChoice{Delta: Delta{Content: strptr(piece)}}, nil)
	}
	for i, c := range msg.ToolCalls {
		idx := i
		head := ToolCall{Index: &idx, ID: c.ID, Type: c.Type, Function: FunctionCall{Name: c.Function.Name}}
		s.writeChunk(w, rec, req.Model, ChunkChoice{Delta: Delta{ToolCalls: []ToolCall{head}}}, nil)
		args := ToolCall{Index: &idx, Function: FunctionCall{Arguments: c.Function.Arguments}}
		s.writeChunk(w, rec, req.Model, ChunkChoice{Delta: Delta{ToolCalls: []ToolCall{args}}}, nil)
	}
	s.writeChunk(w, rec, req.Model, ChunkChoice{Delta: Delta{}, FinishReason: strptr(res.Response.Choices[0].FinishReason)}, nil)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		s.writeChunk(w, rec, req.Model, nil, res.Response.Usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	flush(w)
}

func (s *Server) writeChunk(w http.ResponseWriter, rec Record, model string, choice any, usage *Usage) {
	c := ChatChunk{
		ID: rec.ID, Object: "chat.completion.chunk", Created: rec.Arrival.Unix(), Model: model,
		SystemFingerprint: "fp_luft_fake", Choices: []ChunkChoice{}, Usage: usage,
	}
	if cc, ok := choice.(ChunkChoice); ok {
		c.Choices = []ChunkChoice{cc}
	}
	b, _ := json.Marshal(c)
	fmt.Fprintf(w, "data: %s\n\n", b)
	flush(w)
}

// writeEvent writes one named server-sent event whose data is fields with their type
// first, as the Responses and Messages APIs send them.
func writeEvent(w http.ResponseWriter, typ string, fields map[string]any) {
	b, _ := json.Marshal(fields)
	t, _ := json.Marshal(typ)
	data := `{"type":` + string(t)
	if len(b) > 2 {
		data += "," + string(b[1:])
	} else {
		data += "}"
	}
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data)
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// splitKeepSpace splits s into pieces of leading white space plus one word, so that the
// pieces concatenate back to s exactly; one piece per streamed chunk.
func splitKeepSpace(s string) []string {
	var out []string
	start := 0
	inWord := false
	for i, r := range s {
		space := unicode.IsSpace(r)
		if space && inWord {
			out = append(out, s[start:i])
			start = i
		}
		inWord = !space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// modelsCreated is when every listed model was created, as far as clients can tell.
const modelsCreated = 1700000000

// anthropicClient reports whether the request is an Anthropic client's: its SDKs send
// anthropic-version on every call.
func anthropicClient(r *http.Request) bool { return r.Header.Get("anthropic-version") != "" }

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	ids := s.engine.Models()
	if anthropicClient(r) {
		list := AnthropicModelList{Data: []AnthropicModel{}, FirstID: ids[0], LastID: ids[len(ids)-1]}
		for _, id := range ids {
			list.Data = append(list.Data, anthropicModel(id))
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	list := ModelList{Object: "list"}
	for _, id := range ids {
		list.Data = append(list.Data, openAIModel(id))
	}
	writeJSON(w, http.StatusOK, list)
}

// model answers GET /v1/models/{id}, in Anthropic's shape for an Anthropic client.
func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("model")
	known := len(s.engine.Config().Models) == 0 || slices.Contains(s.engine.Config().Models, id)
	switch {
	case anthropicClient(r) && known:
		writeJSON(w, http.StatusOK, anthropicModel(id))
	case anthropicClient(r):
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", "model: "+id, "")
	case known:
		writeJSON(w, http.StatusOK, openAIModel(id))
	default:
		writeError(w, http.StatusNotFound, APIError{
			Message: fmt.Sprintf("The model '%s' does not exist", id),
			Type:    "invalid_request_error", Param: strptr("model"), Code: strptr("model_not_found"),
		})
	}
}

func openAIModel(id string) Model {
	return Model{ID: id, Object: "model", Created: modelsCreated, OwnedBy: "luft-testkit"}
}

// metrics exposes vLLM's queue gauges per replica, which routers such as llm-d scrape,
// plus the engine's counters.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	st := s.engine.Stats()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for i, r := range st.Replicas {
		fmt.Fprintf(&b, "vllm:num_requests_running{replica=\"%d\"} %d\n", i, r.Busy)
	}
	b.WriteString("# TYPE vllm:num_requests_waiting gauge\n")
	for i, r := range st.Replicas {
		fmt.Fprintf(&b, "vllm:num_requests_waiting{replica=\"%d\"} %d\n", i, r.Queued)
	}
	b.WriteString("# TYPE luft_fake_prefix_cache_blocks gauge\n")
	for i, r := range st.Replicas {
		fmt.Fprintf(&b, "luft_fake_prefix_cache_blocks{replica=\"%d\"} %d\n", i, r.CachedBlocks)
	}
	fmt.Fprintf(&b, "# TYPE luft_fake_requests_total counter\nluft_fake_requests_total %d\n", st.Requests)
	fmt.Fprintf(&b, "# TYPE luft_fake_requests_completed_total counter\nluft_fake_requests_completed_total %d\n", st.Completed)
	fmt.Fprintf(&b, "# TYPE luft_fake_requests_rejected_total counter\nluft_fake_requests_rejected_total %d\n", st.Rejected)
	_, _ = w.Write([]byte(b.String()))
}
