package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// recordIn is a runtime over st that records the proxy's runs, as a luft process has.
func recordIn(t *testing.T, st storage.Store) *runtime.Service {
	t.Helper()
	svc, err := runtime.New(runtime.Options{Store: st, Backends: adapters.NewRegistry("mock"), Caller: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// fixture is a proxy in front of a fake engine on loopback.
type fixture struct {
	engine *testkit.Engine
	srv    *testkit.Server
	proxy  *Proxy
	front  *httptest.Server
	store  *storage.SQLite
}

type fixtureOpts struct {
	engine testkit.Config
	sched  scheduler.Config
	opts   func(*Options)
	store  bool
}

func newFixture(t *testing.T, fo fixtureOpts) *fixture {
	t.Helper()
	if fo.engine.Models == nil {
		fo.engine.Models = []string{"m1"}
	}
	e := testkit.NewEngine(fo.engine)
	srv := testkit.NewServer(e)
	base, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if fo.sched.BackoffBase == 0 {
		fo.sched.BackoffBase = time.Millisecond
		fo.sched.BackoffMax = 5 * time.Millisecond
	}
	o := Options{
		Upstreams: []Upstream{{Name: "fake", BaseURL: base, Model: "m1", PriceInPerMTok: 1, PriceOutPerMTok: 2}},
		Scheduler: scheduler.NewExecutor(fo.sched, nil),
	}
	f := &fixture{engine: e, srv: srv}
	if fo.store {
		st, err := storage.Open(context.Background(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		o.Service, f.store = recordIn(t, st), st
	}
	if fo.opts != nil {
		fo.opts(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.proxy = p
	f.front = httptest.NewServer(p)
	t.Cleanup(func() { f.front.Close(); p.Close() })
	return f
}

func (f *fixture) post(t *testing.T, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.front.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t *testing.T, r *http.Response) []byte {
	t.Helper()
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// direct sends body to the engine itself.
func (f *fixture) direct(t *testing.T, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(f.srv.URL()+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

const hello = `{"model":"m1","messages":[{"role":"user","content":"hello there"}],"max_tokens":7}`

func TestPassthroughNonStreaming(t *testing.T) {
	f := newFixture(t, fixtureOpts{engine: testkit.Config{Limits: testkit.Limits{RPM: 1000, TPM: 1_000_000}}})
	resp := f.post(t, hello, nil)
	got := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	_, want := f.direct(t, hello)
	// The engine's answers differ only in their id and created time: compare the rest.
	norm := func(b []byte) string {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("not JSON: %s", b)
		}
		delete(m, "id")
		delete(m, "created")
		out, _ := json.Marshal(m)
		return string(out)
	}
	if norm(got) != norm(want) {
		t.Fatalf("proxied answer differs:\n got %s\nwant %s", got, want)
	}
	for _, h := range []string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("rate-limit header %s not passed on: %v", h, resp.Header)
		}
	}
	if resp.Header.Get("x-luft-run") == "" {
		t.Error("no x-luft-run header")
	}
}

// TestPassthroughBytes checks the exact bytes both ways against an upstream that
// records what it got.
func TestPassthroughBytes(t *testing.T) {
	const answer = "{\"id\":\"x\",  \"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\\u00e9\"}}],\n\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n"
	var gotBody []byte
	var gotHdr http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotBody, _ = io.ReadAll(r.Body)
		gotHdr = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Ratelimit-Remaining-Tokens", "999")
		w.Header().Set("X-Custom", "kept")
		io.WriteString(w, answer)
	}))
	defer up.Close()
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "up", BaseURL: up.URL + "/v1", Model: "m"}},
		Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil)})
	body := "{ \"model\" : \"m\", \"messages\":[{\"role\":\"user\",\"content\":\"\\u00e9 odd  spacing\"}], \"x_extra\": [1,2,3] }"
	req, _ := http.NewRequest("POST", front+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer client-key")
	req.Header.Set("OpenAI-Organization", "org-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, resp)
	if string(got) != answer {
		t.Errorf("answer changed:\n got %q\nwant %q", got, answer)
	}
	if string(gotBody) != body {
		t.Errorf("request changed:\n got %q\nwant %q", gotBody, body)
	}
	if gotHdr.Get("Authorization") != "Bearer client-key" || gotHdr.Get("OpenAI-Organization") != "org-1" {
		t.Errorf("client headers not passed on: %v", gotHdr)
	}
	if resp.Header.Get("X-Custom") != "kept" || resp.Header.Get("X-Ratelimit-Remaining-Tokens") != "999" {
		t.Errorf("upstream headers not passed back: %v", resp.Header)
	}
}

func TestModels(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	resp, err := http.Get(f.front.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Data []struct{ ID, OwnedBy string }
	}
	b := readAll(t, resp)
	if err := json.Unmarshal(b, &out); err != nil || len(out.Data) != 1 || out.Data[0].ID != "m1" {
		t.Fatalf("models: %s", b)
	}
	if !bytes.Contains(b, []byte(`"owned_by":"fake"`)) {
		t.Errorf("models do not name their backend: %s", b)
	}
}

// TestModelsOfABackendWithoutModel: when the only backend names no model (it takes
// any), /v1/models lists what that backend's own /v1/models says, asked with the client's
// key; when it cannot say, the backend's name. The list is never empty.
func TestModelsOfABackendWithoutModel(t *testing.T) {
	list := func(t *testing.T, front string) []struct{ ID, OwnedBy string } {
		t.Helper()
		req, _ := http.NewRequest("GET", front+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer sk-client")
		req.Header.Set("x-luft-caller", "me")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Data []struct {
				ID      string `json:"id"`
				OwnedBy string `json:"owned_by"`
			}
		}
		b := readAll(t, resp)
		if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("models: HTTP %d %s", resp.StatusCode, b)
		}
		var got []struct{ ID, OwnedBy string }
		for _, m := range out.Data {
			got = append(got, struct{ ID, OwnedBy string }{m.ID, m.OwnedBy})
		}
		return got
	}
	t.Run("the backend lists its models", func(t *testing.T) {
		var auth, caller string
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/models" {
				w.WriteHeader(404)
				return
			}
			auth, caller = r.Header.Get("Authorization"), r.Header.Get("x-luft-caller")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[{"id":"llama-3","object":"model"},{"id":"qwen-2","object":"model"}]}`)
		}))
		defer up.Close()
		_, front := serve(t, Options{Upstreams: []Upstream{{Name: "local", BaseURL: up.URL + "/v1"}}, Default: "local"})
		got := list(t, front)
		if len(got) != 2 || got[0].ID != "llama-3" || got[1].ID != "qwen-2" || got[0].OwnedBy != "local" {
			t.Fatalf("models %v, want the backend's llama-3 and qwen-2 owned by local", got)
		}
		if auth != "Bearer sk-client" || caller != "" {
			t.Fatalf("the backend was asked with Authorization %q and x-luft-caller %q: want the client's key and no luft header", auth, caller)
		}
	})
	t.Run("the backend cannot say", func(t *testing.T) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }))
		defer up.Close()
		var logs bytes.Buffer
		_, front := serve(t, Options{Upstreams: []Upstream{{Name: "local", BaseURL: up.URL + "/v1"}}, Default: "local", Log: &logs})
		got := list(t, front)
		if len(got) != 1 || got[0].ID != "local" || got[0].OwnedBy != "local" {
			t.Fatalf("models %v, want the backend's name", got)
		}
		if !strings.Contains(logs.String(), `ask backend "local" for its models: HTTP 404`) {
			t.Fatalf("the proxy's log does not say why: %q", logs.String())
		}
	})
}

// serve starts a proxy with o (the scheduler defaults to a fresh Executor) behind a test
// server; it returns the proxy and its URL.
func serve(t *testing.T, o Options) (*Proxy, string) {
	t.Helper()
	if o.Scheduler == nil {
		o.Scheduler = scheduler.NewExecutor(scheduler.Config{}, nil)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	return p, front.URL
}

// postChat posts body to the chat completions of the proxy at url.
func postChat(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}
