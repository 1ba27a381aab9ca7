package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/luft-run/luft/agent"
)

// OpenAIConfig configures an OpenAI-compatible chat-completions backend (OpenAI, Groq,
// vLLM, SGLang, Ollama, llama.cpp server, the testkit fake engine).
type OpenAIConfig struct {
	ID      string // registry id; default "openai"
	BaseURL string // e.g. https://api.openai.com/v1; default go-openai's (OpenAI's)
	APIKey  string
	Model   string // default model when a request names none
	// Prices in currency units per million tokens; when both are zero no cost is reported.
	PriceInPerMTok  float64
	PriceOutPerMTok float64
	// HTTPClient is the client requests go through (default a plain &http.Client{}). Its
	// transport is wrapped, never modified, to capture response headers.
	HTTPClient *http.Client
}

// OpenAI is the "openai" backend: plain chat completions through go-openai (no tool loop
// in this cut).
//
// Retries: go-openai v1.43.0 has no retry loop of its own (a request is sent once and any
// non-2xx status comes back as an error), so the scheduler is the only retry loop. Every
// response's headers — 200, 429, 5xx — are captured by a wrapping http.RoundTripper,
// since go-openai does not expose them: on success they are in Result.Header, on an HTTP
// failure in the returned *HTTPError, which the scheduler reads via StatusCode/Header.
type OpenAI struct {
	cfg    OpenAIConfig
	client *openai.Client
}

// NewOpenAI returns an OpenAI backend for cfg.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.ID == "" {
		cfg.ID = "openai"
	}
	if cfg.PriceInPerMTok < 0 || cfg.PriceOutPerMTok < 0 {
		return nil, fmt.Errorf("openai backend %q: prices must not be negative", cfg.ID)
	}
	cc := openai.DefaultConfig(cfg.APIKey)
	if cfg.BaseURL != "" {
		cc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	}
	cfg.BaseURL = cc.BaseURL
	base := cfg.HTTPClient
	if base == nil {
		base = &http.Client{}
	}
	hc := *base // shallow copy: the caller's client is left alone
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	hc.Transport = &captureTransport{next: next}
	cc.HTTPClient = &hc
	return &OpenAI{cfg: cfg, client: openai.NewClientWithConfig(cc)}, nil
}

// ID returns the configured registry id.
func (o *OpenAI) ID() string { return o.cfg.ID }

// HTTPError is an HTTP failure from the endpoint. StatusCode and Header make it readable
// by scheduler.HTTPStatus, which learns rate limits and retry delays from it.
type HTTPError struct {
	Status int
	// Headers are the response headers. (The brief's field name Header cannot coexist
	// with the Header() method scheduler.HTTPStatus needs, so the field is Headers.)
	Headers http.Header
	Body    string // the raw response body
	BaseURL string
	Message string // the provider's error message, when the body had one
}

func (e *HTTPError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = snippet(e.Body, 300)
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("openai backend: HTTP %d from %s: %s", e.Status, e.BaseURL, msg)
}

// StatusCode returns the HTTP status.
func (e *HTTPError) StatusCode() int { return e.Status }

// Header returns the response headers (retry-after, x-ratelimit-*).
func (e *HTTPError) Header() http.Header { return e.Headers }

// Run sends one chat completion.
func (o *OpenAI) Run(ctx context.Context, req agent.Request, call Call) (agent.Result, error) {
	model := req.Model
	if model == "" {
		model = o.cfg.Model
	}
	if model == "" {
		return agent.Result{}, fmt.Errorf("openai backend %q: no model: set model in the agent call (agent{model=...}) or a default model in the backend's configuration", o.cfg.ID)
	}
	var msgs []openai.ChatCompletionMessage
	if req.System != "" {
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: req.System})
	}
	msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: req.Prompt})
	creq := openai.ChatCompletionRequest{Model: model, Messages: msgs, MaxTokens: req.MaxTokens}
	cp := &capture{}
	if req.Temperature != nil {
		creq.Temperature = float32(*req.Temperature)
		// go-openai drops temperature 0 (omitempty); the transport puts it back.
		cp.zeroTemperature = *req.Temperature == 0
	}
	if req.Schema != nil {
		raw, err := json.Marshal(req.Schema)
		if err != nil {
			return agent.Result{}, fmt.Errorf("openai backend %q: encoding schema: %w", o.cfg.ID, err)
		}
		creq.ResponseFormat = &openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name: "output", Strict: false, Schema: json.RawMessage(raw),
			},
		}
	}

	var resp openai.ChatCompletionResponse
	err := call.Do(ctx, TurnCost{Input: EstimateTokens(req.System) + EstimateTokens(req.Prompt), MaxOutput: req.MaxTokens},
		func(ctx context.Context) TurnReport {
			*cp = capture{zeroTemperature: cp.zeroTemperature}
			var err error
			resp, err = o.client.CreateChatCompletion(context.WithValue(ctx, captureKey{}, cp), creq)
			if err != nil {
				return TurnReport{Header: cp.header, Err: o.wrapErr(ctx, cp, err)}
			}
			return TurnReport{Usage: usageOf(resp.Usage), Header: cp.header}
		})
	if err != nil {
		return agent.Result{}, err
	}
	res := agent.Result{Backend: o.cfg.ID, Model: resp.Model, Status: agent.StatusOK, Header: cp.header}
	if res.Model == "" {
		res.Model = model
	}
	if len(resp.Choices) > 0 {
		res.Text = resp.Choices[0].Message.Content
	}
	res.Output = res.Text
	if req.Schema != nil {
		var v any
		if json.Unmarshal([]byte(res.Text), &v) == nil {
			res.Output = v
		}
	}
	res.Usage = usageOf(resp.Usage)
	if o.cfg.PriceInPerMTok != 0 || o.cfg.PriceOutPerMTok != 0 {
		c := (float64(res.Usage.Input)*o.cfg.PriceInPerMTok + float64(res.Usage.Output)*o.cfg.PriceOutPerMTok) / 1e6
		res.Cost = &c
	}
	call.Report(Update{Kind: "message", Text: res.Text})
	return res, nil
}

func usageOf(u openai.Usage) agent.Usage {
	out := agent.Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		out.Cached = d.CachedTokens
	}
	return out
}

// wrapErr turns go-openai's error into an *HTTPError when the endpoint answered, or a
// wrapped error naming the base URL when it could not be reached.
func (o *OpenAI) wrapErr(ctx context.Context, cp *capture, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("openai backend %q: request to %s: %w", o.cfg.ID, o.cfg.BaseURL, ctxErr)
	}
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	status := 0
	msg := ""
	switch {
	case errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0:
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0:
		status = reqErr.HTTPStatusCode
		if reqErr.Err != nil && !isJSONSyntax(reqErr.Err) {
			msg = reqErr.Err.Error()
		}
	}
	if status == 0 && cp.status >= 300 {
		status = cp.status
	}
	if status != 0 {
		h := cp.header
		if h == nil {
			h = http.Header{}
		}
		return &HTTPError{Status: status, Headers: h, Body: cp.body, BaseURL: o.cfg.BaseURL, Message: msg}
	}
	return fmt.Errorf("openai backend %q: request to %s: %w", o.cfg.ID, o.cfg.BaseURL, err)
}

func isJSONSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}

// capture is one call's view of its HTTP exchange, filled in by captureTransport.
type capture struct {
	zeroTemperature bool

	status int
	header http.Header
	body   string // only for non-2xx responses
}

type captureKey struct{}

// captureTransport records each response's status and headers (and an error body) into
// the capture carried by the request's context. Requests without one pass through.
type captureTransport struct{ next http.RoundTripper }

// maxErrorBody bounds how much of an error body is kept.
const maxErrorBody = 64 << 10

func (t *captureTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	cp, _ := r.Context().Value(captureKey{}).(*capture)
	if cp == nil {
		return t.next.RoundTrip(r)
	}
	if cp.zeroTemperature && r.Body != nil {
		nr, err := withZeroTemperature(r)
		if err != nil {
			return nil, err
		}
		r = nr
	}
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	cp.status = resp.StatusCode
	cp.header = resp.Header.Clone()
	if resp.StatusCode >= 300 {
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		cp.body = string(b)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		if rerr != nil {
			return nil, rerr
		}
	}
	return resp, nil
}

// withZeroTemperature returns a copy of r whose JSON body has "temperature": 0.
func withZeroTemperature(r *http.Request) (*http.Request, error) {
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) == nil {
		m["temperature"] = json.RawMessage("0")
		if nb, err := json.Marshal(m); err == nil {
			b = nb
		}
	}
	nr := r.Clone(r.Context())
	nr.Body = io.NopCloser(bytes.NewReader(b))
	nr.ContentLength = int64(len(b))
	nr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return nr, nil
}
