package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// A client's credentials are meant for the upstream its request names (its home): the
// home's base URL and replicas. A turn the scheduler routes to a fallback at another
// origin (scheme, host and port) carries none of the client's headers that could
// authenticate it — only the descriptive ones of forwardOtherHost — and the fallback's
// own key, or it is not sent at all. A fallback at one of the home's origins is the same
// server and gets the client's headers as the home does.

// forwardOtherHost lists the client headers that go to an upstream at another origin
// than the one the client addressed: what describes the request, nothing that could
// authenticate it. Every other header (Authorization, api-key, x-api-key, cookies,
// OpenAI-Organization and OpenAI-Project, a gateway's own key header) stays behind,
// whatever its name, so a credential under an unusual name cannot cross either.
var forwardOtherHost = map[string]bool{
	"Accept": true, "Accept-Language": true, "Content-Type": true, "User-Agent": true,
	"Openai-Beta": true, "Anthropic-Version": true, "Anthropic-Beta": true,
}

// forwardableElsewhere reports whether a client header (canonical name) may go to an
// upstream at another origin.
func forwardableElsewhere(k string) bool {
	if skipRequestHeader(k) {
		return false
	}
	// The openai SDKs' X-Stainless-* headers name the SDK, its version, the OS and the
	// retry count.
	return forwardOtherHost[k] || strings.HasPrefix(k, "X-Stainless-")
}

// origin is the scheme, host and port of a base URL, the port made explicit.
func origin(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base // New checked every base URL; this does not happen
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// origins are the origins of an upstream's base URL and replicas.
func origins(u *Upstream) map[string]bool {
	m := map[string]bool{origin(u.BaseURL): true}
	for _, r := range u.Replicas {
		m[origin(r)] = true
	}
	return m
}

// within reports whether every origin of a is one of b.
func within(a, b map[string]bool) bool {
	for o := range a {
		if !b[o] {
			return false
		}
	}
	return true
}

// fallbackKeyError is a turn routed to a fallback at another origin that has no key of
// its own: luft does not send it rather than send it with the client's credentials.
type fallbackKeyError struct {
	home, fallback string // backend names
	at             string // the fallback's origin
}

func (e *fallbackKeyError) Error() string {
	return fmt.Sprintf("backend %q is failing and its turns go to its fallback %q, which is at another host (%s): "+
		"the client's credentials, meant for %q, are not sent there, and %q has no key of its own; "+
		"set api_key_env in [backends.%s] to the environment variable that holds its key",
		e.home, e.fallback, e.at, e.home, e.fallback, e.fallback)
}

// header is the request header of an attempt at replica of up: the client's headers
// when up is the turn's own upstream or shares one of its origins, else only the
// descriptive ones and up's key (an error when up has none).
func (t *turn) header(up *Upstream, replica int) (http.Header, error) {
	h := make(http.Header, len(t.r.Header)+1)
	at := origin(baseOf(up, replica))
	if up == t.up || t.up.origins[at] {
		return t.p.homeHeader(t.r, up), nil
	}
	if up.APIKey == "" {
		return nil, &fallbackKeyError{home: t.up.Name, fallback: up.Name, at: at}
	}
	for k, vv := range t.r.Header {
		if forwardableElsewhere(k) {
			h[k] = vv
		}
	}
	setKey(h, up)
	return h, nil
}

// setKey puts up's key in h, in the header its family reads: Authorization: Bearer, or
// x-api-key for an anthropic upstream (the other is dropped).
func setKey(h http.Header, up *Upstream) {
	if up.Family == FamilyAnthropic {
		h.Del("Authorization")
		h.Set("X-Api-Key", up.APIKey)
		return
	}
	h.Del("X-Api-Key")
	h.Set("Authorization", "Bearer "+up.APIKey)
}

// homeHeader is the header of a request to up, the upstream the client addressed: the
// client's own headers less luft's, with up's key when it has one.
func (p *Proxy) homeHeader(r *http.Request, up *Upstream) http.Header {
	h := make(http.Header, len(r.Header)+1)
	for k, vv := range r.Header {
		if !skipRequestHeader(k) {
			h[k] = vv
		}
	}
	if p.opts.Secret != "" {
		// luft's own token never leaves, whichever header carried it.
		if strings.TrimSpace(bearer(r)) == p.opts.Secret {
			h.Del("Authorization")
		}
		if strings.TrimSpace(r.Header.Get("X-Api-Key")) == p.opts.Secret {
			h.Del("X-Api-Key")
		}
	}
	if up.APIKey != "" {
		setKey(h, up)
	}
	return h
}
