package adapters

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
)

// capture is one call's view of its HTTP exchange, filled in by captureTransport.
type capture struct {
	zeroTemperature bool
	endpoint        string // base URL and model the request went to
	completionCap   bool   // the request carried max_completion_tokens

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
