package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// HTTPError is an HTTP failure from the endpoint. StatusCode and Header make it readable
// by scheduler.HTTPStatus, which learns rate limits and retry delays from it.
type HTTPError struct {
	Status int
	// Headers are the response headers. (A field named Header could not coexist with the
	// Header() method scheduler.HTTPStatus needs.)
	Headers http.Header
	Body    string // the raw response body
	BaseURL string
	Message string // the provider's error message, when the body had one
	err     error  // the transport error, when Status is 0
}

// QuotaError is an HTTP 429 whose provider says the key's quota or credit is used up
// (OpenAI's insufficient_quota). It is not a rate limit: no wait makes it pass, so it has
// no StatusCode method on purpose (the scheduler, which retries 429s, does not see one)
// and it is Permanent (the runtime's own retries skip it too): the call fails at once.
type QuotaError struct {
	ID   string // the backend's registry id
	HTTP *HTTPError
}

func (e *QuotaError) Error() string {
	msg := e.HTTP.Message
	if msg == "" {
		msg = snippet(e.HTTP.Body, 300)
	}
	return fmt.Sprintf("openai backend %q: %s has no quota left for this key (HTTP 429 insufficient_quota: %s); "+
		"this is not a rate limit and waiting will not help: add credit or raise the quota with the provider, or use another key, then resume the run",
		e.ID, e.HTTP.BaseURL, msg)
}

// Permanent reports that retrying cannot help.
func (e *QuotaError) Permanent() bool { return true }

// Unwrap returns the transport error of a request that got no response.
func (e *HTTPError) Unwrap() error { return e.err }

func (e *HTTPError) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("openai backend: no response from %s: %s", e.BaseURL, e.Message)
	}
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

// schemaFormatRefused reports whether err is an endpoint's 400 saying it has no
// json_schema response format — not one refusing this call's schema (OpenAI's "Invalid
// schema for response_format"), which instructions would not cure.
func schemaFormatRefused(err error) bool {
	text, ok := badRequestText(err)
	if !ok || !strings.Contains(text, "response_format") && !strings.Contains(text, "json_schema") || strings.Contains(text, "invalid schema") {
		return false
	}
	return containsAny(text, "support", "unknown", "unrecognized", "not allowed", "not permitted", "extra", "unexpected", "must be one of", "is not one of")
}

// maxCompletionRefused reports whether err is an endpoint's 400 saying it does not know
// max_completion_tokens (older servers and API versions), as opposed to one saying the
// value is too large ("supports at most ..."), which max_tokens would not cure.
func maxCompletionRefused(err error) bool {
	text, ok := badRequestText(err)
	return ok && strings.Contains(text, "max_completion_tokens") &&
		containsAny(text, "unsupported", "not supported", "unknown", "unrecognized", "not allowed", "not permitted", "extra", "unexpected")
}

// badRequestText is the lower-cased message and body of an HTTP 400.
func badRequestText(err error) (string, bool) {
	var he *HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
		return "", false
	}
	return strings.ToLower(he.Message + " " + he.Body), true
}

func containsAny(s string, words ...string) bool {
	return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
}

// truncatedError explains a reply the endpoint cut at the output cap (finish_reason
// "length").
func truncatedError(id string, maxTokens, turn int, schema bool) string {
	limit := "the model's own output limit"
	if maxTokens > 0 {
		limit = fmt.Sprintf("max_tokens=%d", maxTokens)
	}
	what := "the reply"
	if schema {
		what = "the structured reply (so its JSON is incomplete)"
	}
	return fmt.Sprintf("openai backend %q: %s was cut off at %s in model turn %d (finish_reason \"length\"); "+
		"raise max_tokens in the agent call or ask for a shorter answer", id, what, limit, turn)
}

// wrapErr turns go-openai's error into an *HTTPError when the endpoint answered, or a
// wrapped error naming the base URL when it could not be reached.
func (o *OpenAI) wrapErr(ctx context.Context, cp *capture, err error) error {
	return o.wrapErrAt(ctx, o.cfg.BaseURL, cp, err)
}

// wrapErrAt is wrapErr for a request to base.
func (o *OpenAI) wrapErrAt(ctx context.Context, base string, cp *capture, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("openai backend %q: request to %s: %w", o.cfg.ID, base, ctxErr)
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
		he := &HTTPError{Status: status, Headers: h, Body: cp.body, BaseURL: base, Message: msg}
		if status == http.StatusTooManyRequests && strings.Contains(cp.body+msg, "insufficient_quota") {
			return &QuotaError{ID: o.cfg.ID, HTTP: he}
		}
		return he
	}
	// No response at all (refused, reset, DNS): status 0, which the scheduler retries with
	// backoff like a 5xx and counts toward the lane's circuit breaker.
	return &HTTPError{Status: 0, Headers: http.Header{}, BaseURL: base, Message: err.Error(), err: err}
}

func isJSONSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}
