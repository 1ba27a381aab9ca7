package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luft-run/luft/scheduler"
)

// TestCircuitOpenAnswersAtOnce: once a lane's circuit is open and it has no fallback,
// a turn is answered at once with an OpenAI-shaped 503 and retry-after, not held until
// the circuit half-opens (30 s by default, far beyond the bound here) — whether the
// circuit was open when the turn arrived or opened while the turn waited to retry.
func TestCircuitOpenAnswersAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxRetries int
		first      int // status of the first request
	}{
		{"open on arrival", 1, 500}, // the first turn's two failures open it and use its retries up
		{"opened while retrying", 3, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(500)
				io.WriteString(w, `{"error":{"message":"boom","type":"server_error","code":null}}`)
			}))
			defer up.Close()
			sched := scheduler.NewExecutor(scheduler.Config{BreakerThreshold: 2, MaxRetries: tc.maxRetries,
				BackoffBase: time.Millisecond, BackoffMax: time.Millisecond}, nil)
			_, front := serve(t, Options{Upstreams: []Upstream{{Name: "u", BaseURL: up.URL + "/v1", Model: "m"}}, Scheduler: sched})
			client := &http.Client{Timeout: failAfter}
			post := func() (*http.Response, []byte) {
				t.Helper()
				resp, err := client.Post(front+"/v1/chat/completions", "application/json", strings.NewReader(hello2))
				if err != nil {
					t.Fatalf("the proxy held the turn (circuit open, no fallback): %v", err)
				}
				return resp, readAll(t, resp)
			}
			resp, b := post()
			if resp.StatusCode != tc.first {
				t.Fatalf("first turn: HTTP %d %s, want %d", resp.StatusCode, b, tc.first)
			}
			resp, b = post()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("turn after the circuit opened: HTTP %d %s, want 503", resp.StatusCode, b)
			}
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != "backend_circuit_open" || e.Error.Type != "server_error" ||
				!strings.Contains(e.Error.Message, `backend "u" keeps failing`) || !strings.Contains(e.Error.Message, "fallback") {
				t.Fatalf("503 body: %s", b)
			}
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 30 {
				t.Fatalf("retry-after %q, want the seconds until the circuit half-opens", resp.Header.Get("Retry-After"))
			}
			if n := calls.Load(); n != 2 {
				t.Fatalf("%d upstream calls, want 2 (none once the circuit is open)", n)
			}
		})
	}
}
