package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/luft-run/luft/scheduler"
)

// errorOf decodes an OpenAI-style error body.
func errorOf(t *testing.T, b []byte) (typ, code, msg string) {
	t.Helper()
	var e struct {
		Error struct {
			Message, Type string
			Code          string
		}
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI-style error body: %s", b)
	}
	return e.Error.Type, e.Error.Code, e.Error.Message
}

func TestHostileRequests(t *testing.T) {
	f := newFixture(t, fixtureOpts{opts: func(o *Options) { o.MaxBody = 1 << 16 }})
	long := strings.Repeat("x", 300)
	tests := []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		want   string // in the message
	}{
		{"huge body", `{"model":"m1","messages":[{"role":"user","content":"` + strings.Repeat("a", 1<<17) + `"}]}`, nil, 413, "at most"},
		{"malformed JSON", `{"model":"m1","messages":[`, nil, 400, "not a valid chat completions request"},
		{"not an object", `[1,2]`, nil, 400, "not a valid"},
		{"wrong types", `{"model":7,"messages":"hi"}`, nil, 400, "not a valid"},
		{"no messages", `{"model":"m1"}`, nil, 400, "messages"},
		{"empty", ``, nil, 400, "not a valid"},
		{"unknown model", `{"model":"gpt-nope","messages":[{"role":"user","content":"hi"}]}`, nil, 404, "configured models: m1"},
		{"run id too long", hello, map[string]string{"x-luft-run-id": long}, 400, "at most 256"},
		{"caller too long", hello, map[string]string{"x-luft-caller": long}, 400, "x-luft-caller"},
		{"bad class", hello, map[string]string{"x-luft-class": "urgent"}, 400, "interactive or batch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.post(t, tc.body, tc.hdr)
			b := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if _, _, msg := errorOf(t, b); !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q does not say %q", msg, tc.want)
			}
		})
	}
	if n := len(f.engine.Log()); n != 0 {
		t.Fatalf("refused requests reached the engine: %d", n)
	}
	if runs, _ := f.proxy.runs.size(); runs != 0 {
		t.Fatalf("refused requests started %d runs", runs)
	}
	// Other paths and methods get an error naming what is served.
	resp, _ := http.Get(f.front.URL + "/v1/embeddings")
	if b := readAll(t, resp); resp.StatusCode != 404 || !strings.Contains(string(b), "/v1/chat/completions") {
		t.Fatalf("unknown path: %d %s", resp.StatusCode, b)
	}
}

func TestUpstreamDownIs502NamingBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	sched := scheduler.NewExecutor(scheduler.Config{BackoffBase: 1, BackoffMax: 1, MaxRetries: 1}, nil)
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "gone", BaseURL: "http://" + dead + "/v1", Model: "m"}}, Scheduler: sched})
	resp, b := postChat(t, front, hello2)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if _, _, msg := errorOf(t, b); !strings.Contains(msg, `backend "gone"`) || !strings.Contains(msg, dead) {
		t.Fatalf("502 does not name the backend and its address: %s", msg)
	}
	if st := sched.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("scheduler still holds the turn: %+v", st)
	}
}

// TestUpstreamErrorsPassThrough: a 400 or 401 from upstream reaches the client as sent;
// a 5xx that stays after luft's retries too.
func TestUpstreamErrorsPassThrough(t *testing.T) {
	for _, code := range []int{400, 401, 500} {
		body := `{"error":{"message":"upstream says no","type":"x","code":"y"}}`
		calls := 0
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Upstream", "yes")
			w.WriteHeader(code)
			io.WriteString(w, body)
		}))
		sched := scheduler.NewExecutor(scheduler.Config{BackoffBase: 1, BackoffMax: 1, MaxRetries: 2}, nil)
		defer up.Close()
		_, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Scheduler: sched})
		resp, b := postChat(t, front, hello2)
		if resp.StatusCode != code || string(b) != body || resp.Header.Get("X-Upstream") != "yes" {
			t.Errorf("HTTP %d came back as %d %q %v", code, resp.StatusCode, b, resp.Header)
		}
		if want := map[int]int{400: 1, 401: 1, 500: 3}[code]; calls != want {
			t.Errorf("HTTP %d: %d upstream calls, want %d", code, calls, want)
		}
	}
}

func TestAuth(t *testing.T) {
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Luft-Token"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer up.Close()
	var logs bytes.Buffer
	_, front := serve(t, Options{Upstreams: []Upstream{
		{Name: "own", BaseURL: up.URL + "/v1", Model: "m"},
		{Name: "keyed", BaseURL: up.URL + "/v1", Model: "k", APIKey: "sk-luft"},
	}, Scheduler: scheduler.NewExecutor(scheduler.Config{}, nil), Token: "tok", Log: &logs})
	send := func(model string, hdr map[string]string) int {
		req, _ := http.NewRequest("POST", front+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		return resp.StatusCode
	}
	if code := send("m", map[string]string{"Authorization": "Bearer sk-client"}); code != 401 {
		t.Fatalf("no luft token: %d", code)
	}
	if code := send("m", map[string]string{"Authorization": "Bearer sk-client", "x-luft-token": "wrong"}); code != 401 {
		t.Fatalf("wrong luft token: %d", code)
	}
	if code := send("m", map[string]string{"Authorization": "Bearer sk-client", "x-luft-token": "tok"}); code != 200 {
		t.Fatalf("client key: %d", code)
	}
	if code := send("k", map[string]string{"Authorization": "Bearer sk-client", "x-luft-token": "tok"}); code != 200 {
		t.Fatalf("luft key: %d", code)
	}
	if code := send("m", map[string]string{"Authorization": "Bearer tok"}); code != 200 {
		t.Fatalf("token as bearer: %d", code)
	}
	want := []string{"Bearer sk-client|", "Bearer sk-luft|", "|"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("upstream saw Authorization|x-luft-token %q, want %q", got, want)
	}
	if strings.Contains(logs.String(), "sk-") || strings.Contains(logs.String(), "tok") {
		t.Fatalf("a key reached the log: %s", logs.String())
	}
}

// TestSecretNeverForwarded: the daemon's token, which the daemon checks, is dropped when
// a client sends it as its Authorization; other keys pass.
func TestSecretNeverForwarded(t *testing.T) {
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer up.Close()
	_, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Secret: "daemon-tok"})
	for _, auth := range []string{"Bearer daemon-tok", "Bearer sk-own"} {
		req, _ := http.NewRequest("POST", front+"/v1/chat/completions", strings.NewReader(hello2))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("%s: HTTP %d (Secret is not checked)", auth, resp.StatusCode)
		}
	}
	if strings.Join(got, "|") != "|Bearer sk-own" {
		t.Fatalf("upstream saw Authorization %q", got)
	}
}
