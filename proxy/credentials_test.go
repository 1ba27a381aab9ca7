package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// clientCredentials are the headers a client may authenticate with, each holding a
// value that names the upstream it is meant for ("for-a").
var clientCredentials = map[string]string{
	"Authorization":       "Bearer sk-for-a",
	"api-key":             "azure-for-a",
	"x-api-key":           "anthropic-for-a",
	"OpenAI-Organization": "org-for-a",
	"OpenAI-Project":      "proj-for-a",
	"Cookie":              "session=for-a",
	"X-Gateway-Key":       "gw-for-a", // a credential under a name luft does not know
}

// descriptive are client headers that say what the request is and may go anywhere.
var descriptive = map[string]string{
	"User-Agent":       "OpenAI/Python 1.50.0",
	"X-Stainless-Lang": "python",
}

// luftHeaders are luft's own request headers: for the proxy, never for an upstream.
var luftHeaders = map[string]string{
	"x-luft-caller": "agent-1",
	"x-luft-run-id": "run-7",
	"x-luft-class":  "batch",
	"x-luft-token":  "not-checked-on-loopback",
}

// downUpstream answers every request 503 and keeps the Authorization it got.
func downUpstream(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var auths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), auths...)
	}
}

// fakeUpstream is the fake engine serving model on loopback, recording the headers it
// gets; it returns the server and its base URL.
func fakeUpstream(t *testing.T, model string) (*testkit.Server, string) {
	t.Helper()
	srv := testkit.NewServer(testkit.NewEngine(testkit.Config{Models: []string{model}}))
	srv.RecordHeaders = true
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, base
}

// fallbackScheduler opens a's circuit at its first failure and sends its turns to b.
func fallbackScheduler() scheduler.Scheduler {
	return scheduler.NewExecutor(scheduler.Config{BreakerThreshold: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		Lanes: map[string]scheduler.LaneConfig{"a/ma": {Fallback: "b/mb"}}}, nil)
}

// sendAsClient posts a turn for model ma with the client's credentials and descriptive
// headers.
func sendAsClient(t *testing.T, front string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", front+"/v1/chat/completions",
		strings.NewReader(`{"model":"ma","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
	for _, m := range []map[string]string{clientCredentials, descriptive, luftHeaders} {
		for k, v := range m {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

// leaked returns the headers of h that carry one of the client's credentials.
func leaked(h http.Header) []string {
	var out []string
	for k, vv := range h {
		for _, v := range vv {
			if strings.Contains(v, "for-a") {
				out = append(out, k+": "+v)
			}
		}
	}
	return out
}

// TestFallbackElsewhereGetsItsOwnKey: backend a fails and its turns go to its fallback b
// at another host (another port on loopback). None of the client's credentials for a
// reach b on any turn, whatever the header's name; b gets luft's key for b and the
// request's descriptive headers, and a had the client's key as before.
func TestFallbackElsewhereGetsItsOwnKey(t *testing.T) {
	down, aSaw := downUpstream(t)
	b, bBase := fakeUpstream(t, "mb")
	_, front := serve(t, Options{Upstreams: []Upstream{
		{Name: "a", BaseURL: down.URL + "/v1", Model: "ma", Fallback: "b"},
		{Name: "b", BaseURL: bBase, Model: "mb", APIKey: "sk-luft-for-b"},
	}, Scheduler: fallbackScheduler()})
	const turns = 5
	for i := 0; i < turns; i++ {
		if resp, body := sendAsClient(t, front); resp.StatusCode != 200 {
			t.Fatalf("turn %d: HTTP %d %s", i+1, resp.StatusCode, body)
		}
	}
	if got := aSaw(); len(got) == 0 || got[0] != "Bearer sk-for-a" {
		t.Errorf("a, the upstream the client addressed, saw Authorization %q, want the client's key", got)
	}
	seen := b.RequestHeaders()
	if len(seen) != turns {
		t.Fatalf("b got %d requests, want %d", len(seen), turns)
	}
	for i, h := range seen {
		if l := leaked(h); len(l) > 0 {
			t.Errorf("turn %d: the client's credentials for a reached b: %v", i+1, l)
		}
		if got := h.Get("Authorization"); got != "Bearer sk-luft-for-b" {
			t.Errorf("turn %d: b got Authorization %q, want its own key", i+1, got)
		}
		for k, v := range descriptive {
			if h.Get(k) != v {
				t.Errorf("turn %d: b got %s %q, want %q", i+1, k, h.Get(k), v)
			}
		}
		for k := range luftHeaders {
			if h.Get(k) != "" {
				t.Errorf("turn %d: luft's own header %s reached b", i+1, k)
			}
		}
	}
}

// TestLuftHeadersStayBehind: the upstream a client addressed gets the client's headers
// but none of luft's own x-luft-* ones (run id, caller, class, token).
func TestLuftHeadersStayBehind(t *testing.T) {
	a, aBase := fakeUpstream(t, "ma")
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "a", BaseURL: aBase, Model: "ma"}}})
	if resp, body := sendAsClient(t, front); resp.StatusCode != 200 {
		t.Fatalf("HTTP %d %s", resp.StatusCode, body)
	}
	seen := a.RequestHeaders()
	if len(seen) != 1 {
		t.Fatalf("the upstream got %d requests, want 1", len(seen))
	}
	for k := range seen[0] {
		if strings.HasPrefix(strings.ToLower(k), "x-luft-") {
			t.Errorf("luft's own header %s reached the upstream", k)
		}
	}
	for k, v := range descriptive {
		if seen[0].Get(k) != v {
			t.Errorf("the upstream got %s %q, want %q", k, seen[0].Get(k), v)
		}
	}
	if got := seen[0].Get("Authorization"); got != "Bearer sk-for-a" {
		t.Errorf("the upstream got Authorization %q, want the client's", got)
	}
}

// TestFallbackElsewhereWithoutKeyFails: a fallback at another host with no key of its
// own is not sent the turn: the client gets an OpenAI-style 502 naming the fallback and
// the setting that fixes it, b is never called, and the proxy said so when it started.
func TestFallbackElsewhereWithoutKeyFails(t *testing.T) {
	down, _ := downUpstream(t)
	b, bBase := fakeUpstream(t, "mb")
	var logs bytes.Buffer
	_, front := serve(t, Options{Upstreams: []Upstream{
		{Name: "a", BaseURL: down.URL + "/v1", Model: "ma", Fallback: "b"},
		{Name: "b", BaseURL: bBase, Model: "mb"},
	}, Scheduler: fallbackScheduler(), Log: &logs})
	for i := 0; i < 3; i++ {
		resp, body := sendAsClient(t, front)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("turn %d: HTTP %d %s, want 502", i+1, resp.StatusCode, body)
		}
		typ, code, msg := errorOf(t, body)
		if typ != "upstream_error" || code != "fallback_without_key" {
			t.Errorf("turn %d: error %s/%s", i+1, typ, code)
		}
		for _, want := range []string{`fallback "b"`, `meant for "a"`, "api_key_env in [backends.b]"} {
			if !strings.Contains(msg, want) {
				t.Errorf("turn %d: message %q does not say %q", i+1, msg, want)
			}
		}
		if strings.Contains(msg, "for-a") {
			t.Errorf("turn %d: the message quotes the client's key: %s", i+1, msg)
		}
	}
	if n := len(b.RequestHeaders()); n != 0 {
		t.Fatalf("b got %d requests; want none", n)
	}
	if !strings.Contains(logs.String(), `upstream "a": its fallback "b" is at another host and has no key of its own`) {
		t.Errorf("no warning at start; log:\n%s", logs.String())
	}
}

// TestFallbackSameHostKeepsClientHeaders: a fallback at the same scheme, host and port
// as the upstream, or as one of its replicas, is the same server: it gets the client's
// headers as the upstream does.
func TestFallbackSameHostKeepsClientHeaders(t *testing.T) {
	var mu sync.Mutex
	var fbAuth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/a/") {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		fbAuth = append(fbAuth, r.Header.Get("Authorization")+"|"+r.Header.Get("Api-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`))
	}))
	defer srv.Close()
	down, _ := downUpstream(t)
	for _, tc := range []struct {
		name string
		a    Upstream
	}{
		{"same host", Upstream{BaseURL: srv.URL + "/a/v1"}},
		{"a replica's host", Upstream{BaseURL: down.URL + "/v1", Replicas: []string{srv.URL + "/a/v1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			fbAuth = nil
			mu.Unlock()
			a := tc.a
			a.Name, a.Model, a.Fallback = "a", "ma", "b"
			_, front := serve(t, Options{Upstreams: []Upstream{a, {Name: "b", BaseURL: srv.URL + "/b/v1", Model: "mb"}},
				Scheduler: fallbackScheduler()})
			if resp, body := sendAsClient(t, front); resp.StatusCode != 200 {
				t.Fatalf("HTTP %d %s", resp.StatusCode, body)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(fbAuth) != 1 || fbAuth[0] != "Bearer sk-for-a|azure-for-a" {
				t.Fatalf("the fallback at the same host saw %q, want the client's headers", fbAuth)
			}
		})
	}
}

func TestOrigin(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/other/v1", true},
		{"http://Example.com/v1", "http://example.com:80/v1", true},
		{"https://example.com/v1", "https://example.com:443/api/v1", true},
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1", false},
		{"http://example.com/v1", "https://example.com/v1", false},
		{"http://localhost:8000/v1", "http://127.0.0.1:8000/v1", false},
		{"https://user:pw@example.com/v1", "https://example.com/v1", true},
	} {
		if got := origin(tc.a) == origin(tc.b); got != tc.same {
			t.Errorf("%s and %s: same origin %v, want %v (%s, %s)", tc.a, tc.b, got, tc.same, origin(tc.a), origin(tc.b))
		}
	}
}

// TestFallbackElsewhereGetsNoQuery: the client's query string (a gateway's ?key=, an
// Azure ?api-version=) goes to the upstream it addressed and not to a fallback at
// another host.
func TestFallbackElsewhereGetsNoQuery(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	saw := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			queries = append(queries, r.Host+" "+r.URL.RawQuery)
			mu.Unlock()
			next.ServeHTTP(w, r)
		})
	}
	down := httptest.NewServer(saw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})))
	defer down.Close()
	b := httptest.NewServer(saw(testkit.NewServer(testkit.NewEngine(testkit.Config{Models: []string{"mb"}})).Handler()))
	defer b.Close()
	_, front := serve(t, Options{Upstreams: []Upstream{
		{Name: "a", BaseURL: down.URL + "/v1", Model: "ma", Fallback: "b"},
		{Name: "b", BaseURL: b.URL + "/v1", Model: "mb", APIKey: "sk-luft-for-b"},
	}, Scheduler: fallbackScheduler()})
	resp, err := http.Post(front+"/v1/chat/completions?key=secret-for-a", "application/json",
		strings.NewReader(`{"model":"ma","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	aHost, bHost := strings.TrimPrefix(down.URL, "http://"), strings.TrimPrefix(b.URL, "http://")
	var toA, toB int
	for _, q := range queries {
		switch {
		case q == aHost+" key=secret-for-a":
			toA++
		case strings.HasPrefix(q, bHost+" "):
			toB++
			if q != bHost+" " {
				t.Errorf("the fallback at another host got the client's query: %q", q)
			}
		default:
			t.Errorf("unexpected request %q", q)
		}
	}
	if toA == 0 || toB != 1 {
		t.Fatalf("requests: %v", queries)
	}
}
