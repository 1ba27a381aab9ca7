package adapters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// startFake starts the fake engine on loopback and returns its base URL (…/v1).
func startFake(t *testing.T, cfg testkit.Config) (string, *testkit.Engine) {
	t.Helper()
	eng := testkit.NewEngine(cfg)
	srv := testkit.NewServer(eng)
	url, err := srv.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return url, eng
}

func newTestOpenAI(t *testing.T, url string) *OpenAI {
	t.Helper()
	b, err := NewOpenAI(OpenAIConfig{BaseURL: url, APIKey: "test", Model: "luft-fake",
		PriceInPerMTok: 1, PriceOutPerMTok: 2})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOpenAIPlainCall(t *testing.T) {
	url, eng := startFake(t, testkit.Config{Limits: testkit.Limits{RPM: 100, TPM: 100000}})
	b := newTestOpenAI(t, url)
	if b.ID() != "openai" {
		t.Fatalf("ID = %q", b.ID())
	}
	temp := 0.0
	res, err := b.Run(context.Background(), agent.Request{System: "be brief", Prompt: "say hello", MaxTokens: 7, Temperature: &temp}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || res.Text == "" || res.Output != res.Text || res.Backend != "openai" || res.Model == "" {
		t.Fatalf("result = %+v", res)
	}
	if res.Usage.Output != 7 || res.Usage.Input <= 0 {
		t.Fatalf("usage = %+v", res.Usage)
	}
	want := (float64(res.Usage.Input)*1 + float64(res.Usage.Output)*2) / 1e6
	if res.Cost == nil || *res.Cost != want {
		t.Fatalf("cost = %v, want %v", res.Cost, want)
	}
	for _, h := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"} {
		if res.Header.Get(h) == "" {
			t.Errorf("header %s missing; got %v", h, res.Header)
		}
	}
	if got := res.Header.Get("x-ratelimit-remaining-requests"); got != "99" {
		t.Errorf("remaining requests = %q, want 99", got)
	}
	log := eng.Log()
	if len(log) != 1 || log[0].Status != 200 || log[0].OutputTokens != 7 || log[0].PromptTokens != res.Usage.Input {
		t.Fatalf("engine log = %+v", log)
	}
}

// recordBodies wraps the fake engine's handler to keep every request body it received.
type recordBodies struct {
	mu     sync.Mutex
	bodies [][]byte
	next   http.Handler
}

func (rb *recordBodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rb.mu.Lock()
	rb.bodies = append(rb.bodies, b)
	rb.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(b))
	rb.next.ServeHTTP(w, r)
}

func TestOpenAISchemaCall(t *testing.T) {
	rb := &recordBodies{next: testkit.NewServer(testkit.NewEngine(testkit.Config{})).Handler()}
	hs := httptest.NewServer(rb) // loopback
	defer hs.Close()
	b := newTestOpenAI(t, hs.URL+"/v1")
	schema := map[string]any{
		"type":       "object",
		"properties": map[string]any{"answer": map[string]any{"type": "string"}, "n": map[string]any{"type": "integer"}},
		"required":   []any{"answer", "n"},
	}
	temp := 0.0
	res, err := b.Run(context.Background(), agent.Request{Prompt: "give json", Schema: schema, Model: "m1", Temperature: &temp}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	out, ok := res.Output.(map[string]any)
	if !ok {
		t.Fatalf("output = %#v (text %q)", res.Output, res.Text)
	}
	if _, ok := out["answer"].(string); !ok {
		t.Fatalf("output.answer = %#v", out["answer"])
	}
	if _, ok := out["n"].(float64); !ok {
		t.Fatalf("output.n = %#v", out["n"])
	}
	if res.Model != "m1" {
		t.Fatalf("model = %q", res.Model)
	}
	if len(rb.bodies) != 1 {
		t.Fatalf("%d requests", len(rb.bodies))
	}
	var sent struct {
		Model          string                 `json:"model"`
		Temperature    *float64               `json:"temperature"`
		ResponseFormat testkit.ResponseFormat `json:"response_format"`
	}
	if err := json.Unmarshal(rb.bodies[0], &sent); err != nil {
		t.Fatal(err)
	}
	rf := sent.ResponseFormat
	if rf.Type != "json_schema" || rf.JSONSchema == nil || rf.JSONSchema.Name != "output" ||
		rf.JSONSchema.Strict == nil || *rf.JSONSchema.Strict {
		t.Fatalf("response_format = %s", rb.bodies[0])
	}
	var gotSchema map[string]any
	if err := json.Unmarshal(rf.JSONSchema.Schema, &gotSchema); err != nil || gotSchema["type"] != "object" {
		t.Fatalf("schema sent = %s", rf.JSONSchema.Schema)
	}
	if sent.Model != "m1" || sent.Temperature == nil || *sent.Temperature != 0 {
		t.Fatalf("model/temperature sent: %s", rb.bodies[0])
	}
}

func TestOpenAIRateLimit429(t *testing.T) {
	url, eng := startFake(t, testkit.Config{Limits: testkit.Limits{RPM: 1}})
	b := newTestOpenAI(t, url)
	if _, err := b.Run(context.Background(), agent.Request{Prompt: "one"}, Call{}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Run(context.Background(), agent.Request{Prompt: "two"}, Call{})
	var he *HTTPError
	if !errors.As(err, &he) {
		t.Fatalf("err = %T %v, want *HTTPError", err, err)
	}
	if he.StatusCode() != 429 || he.Status != 429 {
		t.Fatalf("status = %d", he.StatusCode())
	}
	if he.Header().Get("retry-after") == "" || he.Header().Get("x-ratelimit-remaining-requests") == "" {
		t.Fatalf("headers = %v", he.Header())
	}
	if !strings.Contains(he.Body, "rate_limit_exceeded") {
		t.Fatalf("body = %q", he.Body)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "openai backend: HTTP 429 from "+url+": ") || len(msg) <= len("openai backend: HTTP 429 from "+url+": ") {
		t.Fatalf("message = %q", msg)
	}
	// The scheduler reads it through its HTTPStatus convention.
	code, h, ok := scheduler.HTTPStatus(err)
	if !ok || code != 429 || h.Get("retry-after") == "" {
		t.Fatalf("scheduler.HTTPStatus = %d %v %v", code, h, ok)
	}
	// go-openai did not retry: exactly two requests reached the engine.
	if log := eng.Log(); len(log) != 2 || log[1].Status != 429 {
		t.Fatalf("engine log = %+v", log)
	}
}

func TestOpenAIConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	b := newTestOpenAI(t, url)
	_, err = b.Run(context.Background(), agent.Request{Prompt: "x"}, Call{})
	if err == nil || !strings.HasPrefix(err.Error(), "openai backend: no response from "+url+": ") {
		t.Fatalf("err = %v, want one naming %s", err, url)
	}
	// No response is status 0 for the scheduler: retried with backoff like a 5xx.
	if code, _, ok := scheduler.HTTPStatus(err); !ok || code != 0 {
		t.Fatalf("transport error: HTTPStatus = %d %v", code, ok)
	}
}

func TestOpenAIMissingModel(t *testing.T) {
	b, err := NewOpenAI(OpenAIConfig{BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Run(context.Background(), agent.Request{Prompt: "x"}, Call{})
	if err == nil || !strings.Contains(err.Error(), "agent{model=") || !strings.Contains(err.Error(), "configuration") {
		t.Fatalf("err = %v", err)
	}
}

func TestOpenAICancel(t *testing.T) {
	url, _ := startFake(t, testkit.Config{DecodePerToken: time.Second})
	b := newTestOpenAI(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := b.Run(ctx, agent.Request{Prompt: "slow", MaxTokens: 30}, Call{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// Not cancelled, the 30 tokens would take 30 s: half of that is a margin a loaded
	// machine meets.
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("took %v after cancel", d)
	}
}
