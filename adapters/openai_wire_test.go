package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// The output cap goes as max_completion_tokens; an endpoint that refuses it gets
// max_tokens, and the backend remembers that for the endpoint and model, so the next call
// goes with max_tokens at once. No cap sends neither.
func TestOpenAIOutputCapOnTheWire(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old       bool // the endpoint refuses max_completion_tokens
		maxTokens int
		want      [][2]int // per request of two calls: {max_tokens, max_completion_tokens}
		status    []int
	}{
		{name: "current endpoint", maxTokens: 7, want: [][2]int{{0, 7}, {0, 7}}, status: []int{200, 200}},
		{name: "older endpoint", old: true, maxTokens: 7, want: [][2]int{{0, 7}, {7, 0}, {7, 0}}, status: []int{400, 200, 200}},
		{name: "no cap", old: true, want: [][2]int{{0, 0}, {0, 0}}, status: []int{200, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, eng := startFake(t, testkit.Config{KeepRequests: true, NoMaxCompletionTokens: tc.old})
			b := newTestOpenAI(t, url)
			for i := range 2 {
				res, err := b.Run(context.Background(), agent.Request{Prompt: "say hello", MaxTokens: tc.maxTokens}, Call{})
				if err != nil || !res.OK() {
					t.Fatalf("call %d: %+v %v", i+1, res, err)
				}
			}
			var got [][2]int
			var status []int
			for _, r := range eng.Log() {
				got = append(got, [2]int{r.MaxTokens, r.MaxCompletionTokens})
				status = append(status, r.Status)
			}
			if !equalJSON(got, tc.want) || !equalJSON(status, tc.status) {
				t.Fatalf("the engine saw {max_tokens, max_completion_tokens} %v with statuses %v, want %v %v", got, status, tc.want, tc.status)
			}
		})
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// The echoed tool call always carries function.arguments as a string ("" becomes "{}",
// which OpenAI requires), and tool messages carry no name (the official types have none).
func TestOpenAIToolMessagesOnTheWire(t *testing.T) {
	url, eng := startFake(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{{
		Match: "ping it", Calls: []testkit.ScriptedCall{{Name: "ping", Arguments: "", Verbatim: true}}, Reply: "pong received",
	}}})
	ping := &fnTool{name: "ping", fn: func(map[string]any) (string, error) { return "pong", nil }}
	for _, stream := range []bool{false, true} {
		b := toolBackend(t, url, toolList{ping}, 0)
		call := Call{}
		if stream {
			call.Progress = func(Update) {}
		}
		res, err := b.Run(context.Background(), agent.Request{Prompt: "ping it", Tools: []string{"ping"}}, call)
		if err != nil || res.Text != "pong received" {
			t.Fatalf("stream %v: %+v %v (engine log %+v)", stream, res, err, eng.Log())
		}
	}
	log := eng.Log()
	if len(log) != 4 {
		t.Fatalf("the engine saw %d requests, want 4", len(log))
	}
	for _, r := range []testkit.Record{log[1], log[3]} {
		if r.Status != 200 {
			t.Fatalf("the turn after the tool was refused: %+v", r)
		}
		msgs := r.Messages
		am, tm := msgs[len(msgs)-2], msgs[len(msgs)-1]
		if len(am.ToolCalls) != 1 || am.ToolCalls[0].Function.Arguments != "{}" {
			t.Errorf("the echoed tool call: %+v, want arguments \"{}\"", am.ToolCalls)
		}
		if tm.Role != "tool" || tm.Name != "" || string(tm.Content) != "pong" {
			t.Errorf("the tool message: %+v, want no name", tm)
		}
	}
}

// A reply cut at the output cap (finish_reason "length") is not a success: the call ends
// with status error, a message naming the cap, the partial text, and a "truncated"
// progress update; with a schema the message says the JSON is incomplete.
func TestOpenAIFinishLength(t *testing.T) {
	url, eng := startFake(t, testkit.Config{KeepRequests: true, ToolRules: []testkit.ToolRule{
		{Match: "tell a long story", Reply: "once upon a time there was a scheduler that never slept"},
	}})
	for _, tc := range []struct {
		name   string
		req    agent.Request
		stream bool
		want   string
	}{
		{name: "plain", req: agent.Request{Prompt: "tell a long story", MaxTokens: 3}, want: "the reply was cut off at max_tokens=3"},
		{name: "streamed", req: agent.Request{Prompt: "tell a long story", MaxTokens: 3}, stream: true, want: "the reply was cut off at max_tokens=3"},
		{name: "schema", req: agent.Request{Prompt: "a record", MaxTokens: 2,
			Schema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "minLength": 40}}, "required": []any{"name"}}},
			want: "the structured reply (so its JSON is incomplete) was cut off at max_tokens=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu      sync.Mutex
				updates []Update
			)
			call := Call{}
			if tc.stream || tc.name != "plain" {
				call.Progress = func(u Update) { mu.Lock(); updates = append(updates, u); mu.Unlock() }
			}
			b := newTestOpenAI(t, url)
			b.cfg.NoStream = !tc.stream
			res, err := b.Run(context.Background(), tc.req, call)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != agent.StatusError || !strings.Contains(res.Error, tc.want) || !strings.Contains(res.Error, `finish_reason "length"`) || res.Text == "" {
				t.Fatalf("result %+v\nwant status error naming %q", res, tc.want)
			}
			if last := eng.Log()[len(eng.Log())-1]; last.FinishReason != "length" {
				t.Fatalf("the engine did not cut the reply: %+v", last)
			}
			if call.Progress != nil {
				found := false
				for _, u := range updates {
					found = found || u.Kind == "truncated"
				}
				if !found {
					t.Errorf("no truncated update among %+v", updates)
				}
			}
		})
	}
}

// quotaBody is OpenAI's answer when the key's quota or credit is used up.
const quotaBody = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`

// A 429 with insufficient_quota is not a rate limit: the error says so and is not an HTTP
// status the scheduler would retry, while an ordinary 429 still is.
func TestOpenAIInsufficientQuota(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		quota bool
	}{
		{name: "quota", body: quotaBody, quota: true},
		{name: "rate limit", body: `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("retry-after", "20")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprint(w, tc.body)
			}))
			defer hs.Close()
			b := newTestOpenAI(t, hs.URL+"/v1")
			_, err := b.Run(context.Background(), agent.Request{Prompt: "hi"}, Call{})
			var qe *QuotaError
			_, _, retried := scheduler.HTTPStatus(err)
			if errors.As(err, &qe) != tc.quota || retried == tc.quota {
				t.Fatalf("err %T %v: quota %v, an HTTP status the scheduler retries %v", err, err, errors.As(err, &qe), retried)
			}
			if tc.quota && (!strings.Contains(err.Error(), "not a rate limit") || !strings.Contains(err.Error(), "You exceeded your current quota") || !qe.Permanent()) {
				t.Fatalf("message %q", err)
			}
		})
	}
}

// luft backend check's one-token probe falls back to max_tokens too, on an endpoint that
// refuses max_completion_tokens.
func TestOpenAICheckProbeOnAnOlderEndpoint(t *testing.T) {
	url, eng := startFake(t, testkit.Config{KeepRequests: true, NoMaxCompletionTokens: true, Limits: testkit.Limits{RPM: 600, TPM: 60000}})
	rep := newTestOpenAI(t, url).Check(context.Background())
	if rep.Refused != "" || rep.RateLimits == nil {
		t.Fatalf("report %+v", rep)
	}
	log := eng.Log()
	if len(log) != 2 || log[0].Status != 400 || log[1].Status != 200 || log[1].MaxTokens != 1 || log[1].MaxCompletionTokens != 0 {
		t.Fatalf("engine log %+v", log)
	}
}
