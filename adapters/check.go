package adapters

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Checker is a backend that can probe its endpoint (`luft backend check`).
type Checker interface {
	Check(ctx context.Context) CheckReport
}

// CheckReport is what a live probe found.
type CheckReport struct {
	Reachable bool          `json:"reachable"`
	Latency   time.Duration `json:"latency_ns"`
	Error     string        `json:"error,omitempty"`
	// Models are the models the endpoint lists; Model is the configured default model and
	// ModelListed whether the endpoint lists it (nil when there is no default model or
	// no list).
	Models      []string `json:"models,omitempty"`
	Model       string   `json:"model,omitempty"`
	ModelListed *bool    `json:"model_listed,omitempty"`
	// RateLimits are the rate-limit headers the endpoint sent, name → value.
	RateLimits map[string]string `json:"rate_limits,omitempty"`
	// Refused says why the endpoint, though reachable, would not serve luft's requests
	// (a key it does not accept, a completion it answered with an error); "" when none.
	Refused string   `json:"refused,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// OK reports whether the backend is usable as configured.
func (r CheckReport) OK() bool {
	return r.Reachable && r.Refused == "" && (r.ModelListed == nil || *r.ModelListed)
}

// rateLimitHeaders picks the rate-limit telemetry out of response headers.
func rateLimitHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-ratelimit-") || strings.HasPrefix(lk, "anthropic-ratelimit-") ||
			lk == "retry-after" || lk == "retry-after-ms" {
			out[lk] = strings.Join(v, ", ")
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Check implements Checker: the mock is always there.
func (m *Mock) Check(context.Context) CheckReport {
	listed := true
	return CheckReport{Reachable: true, Models: []string{MockModel}, Model: MockModel, ModelListed: &listed,
		Notes: []string{"offline: answers are generated locally, no endpoint is called"}}
}

// Check implements Checker: it lists the endpoint's models and, when those responses
// carry no rate-limit headers (OpenAI sends them on completions only), sends one
// completion of a single token to read them.
func (o *OpenAI) Check(ctx context.Context) CheckReport {
	rep := CheckReport{Model: o.cfg.Model}
	cp := &capture{}
	start := time.Now()
	list, err := o.client.ListModels(context.WithValue(ctx, captureKey{}, cp))
	rep.Latency = time.Since(start)
	if err != nil {
		werr := o.wrapErr(ctx, cp, err)
		rep.Error = werr.Error()
		if cp.status == 0 {
			return rep // nothing answered
		}
		rep.Reachable = true
		if cp.status == http.StatusUnauthorized || cp.status == http.StatusForbidden {
			rep.Refused = fmt.Sprintf("the endpoint refused the API key (HTTP %d on GET /models): check the key in the variable api_key_env names (default OPENAI_API_KEY)", cp.status)
			return rep
		}
		rep.Notes = append(rep.Notes, "the endpoint answered GET /models with an error")
	} else {
		rep.Reachable = true
		for _, m := range list.Models {
			rep.Models = append(rep.Models, m.ID)
		}
		sort.Strings(rep.Models)
		if o.cfg.Model != "" {
			listed := false
			for _, m := range rep.Models {
				listed = listed || m == o.cfg.Model
			}
			rep.ModelListed = &listed
		}
	}
	rep.RateLimits = rateLimitHeaders(cp.header)
	if rep.RateLimits == nil && o.cfg.Model != "" && rep.Reachable {
		cp := &capture{}
		probe := chatProbe(o.cfg.Model)
		o.outputCap(cp, &probe, o.cfg.BaseURL)
		_, err := o.client.CreateChatCompletion(context.WithValue(ctx, captureKey{}, cp), probe)
		if err != nil && cp.completionCap && maxCompletionRefused(o.wrapErr(ctx, cp, err)) {
			// An endpoint from before max_completion_tokens: probe with max_tokens.
			o.maxTokensOnly.Store(cp.endpoint, struct{}{})
			cp, probe = &capture{}, chatProbe(o.cfg.Model)
			o.outputCap(cp, &probe, o.cfg.BaseURL)
			_, err = o.client.CreateChatCompletion(context.WithValue(ctx, captureKey{}, cp), probe)
		}
		rep.RateLimits = rateLimitHeaders(cp.header)
		switch {
		case err != nil && cp.status != http.StatusTooManyRequests:
			rep.Refused = "a one-token completion failed: " + o.wrapErr(ctx, cp, err).Error()
		case rep.RateLimits == nil:
			rep.Notes = append(rep.Notes, "no rate-limit headers: the scheduler uses the configured tpm/rpm and slots only")
		default:
			rep.Notes = append(rep.Notes, "rate limits read from a one-token completion")
		}
	}
	return rep
}
