package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/schema"
)

func loadSchemas(t *testing.T) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "schemas.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMockDeterministic(t *testing.T) {
	temp := 0.2
	reqs := []agent.Request{
		{Prompt: "Summarize the design doc"},
		{Prompt: "Summarize the design doc", System: "be brief", Model: "m", Name: "sum", Temperature: &temp},
		{Prompt: "continue", SessionID: "s-1"},
	}
	for _, s := range loadSchemas(t) {
		reqs = append(reqs, agent.Request{Prompt: "Review main.go", Schema: s})
	}
	for i, req := range reqs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			// Two instances: nothing may depend on per-instance state such as caches.
			a, errA := NewMock(MockConfig{}).Run(context.Background(), req, Call{})
			b, errB := NewMock(MockConfig{}).Run(context.Background(), req, Call{})
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("same request, different results:\n%+v\n%+v", a, b)
			}
		})
	}
}

func TestMockText(t *testing.T) {
	long := strings.Repeat("word ", 40)
	tests := []struct {
		name, prompt, want string
	}{
		{"short", "Say hello", "mock: Say hello"},
		{"whitespace collapsed", "  Say\n\n hello\tworld  ", "mock: Say hello world"},
		{"cut at 60 runes", long, "mock: " + strings.TrimSpace(long[:60]) + "..."},
		{"runes, not bytes", strings.Repeat("é", 70), "mock: " + strings.Repeat("é", 60) + "..."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := NewMock(MockConfig{}).Run(context.Background(), agent.Request{Prompt: tc.prompt}, Call{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != tc.want || res.Output != tc.want {
				t.Fatalf("text %q output %v, want %q", res.Text, res.Output, tc.want)
			}
			if res.Status != agent.StatusOK || res.Attempts != 1 || res.Backend != "mock" || res.Model != MockModel {
				t.Errorf("result fields: %+v", res)
			}
		})
	}
}

func TestMockSchemaOutputs(t *testing.T) {
	m := NewMock(MockConfig{})
	for i, raw := range loadSchemas(t) {
		for _, prompt := range []string{"Review main.go", "Find bugs in the parser", ""} {
			t.Run(fmt.Sprintf("%d/%q", i, prompt), func(t *testing.T) {
				res, err := m.Run(context.Background(), agent.Request{Prompt: prompt, Schema: raw, Model: "m2"}, Call{})
				if err != nil {
					t.Fatal(err)
				}
				s, err := schema.Compile(raw)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Validate(res.Output); err != nil {
					t.Fatalf("output %v %v", res.Output, err)
				}
				var fromText any
				if err := json.Unmarshal([]byte(res.Text), &fromText); err != nil || !reflect.DeepEqual(fromText, res.Output) {
					t.Fatalf("text %q is not the JSON of output %v (%v)", res.Text, res.Output, err)
				}
				if res.Model != "m2" {
					t.Errorf("model %q, want the requested m2", res.Model)
				}
			})
		}
	}
}

func TestMockSchemaAsJSONText(t *testing.T) {
	asText := `{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}`
	var asMap any
	if err := json.Unmarshal([]byte(asText), &asMap); err != nil {
		t.Fatal(err)
	}
	m := NewMock(MockConfig{})
	a, err := m.Run(context.Background(), agent.Request{Prompt: "p", Schema: asText}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Run(context.Background(), agent.Request{Prompt: "p", Schema: asMap}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Output, b.Output) {
		t.Fatalf("schema as text gave %v, as a map %v", a.Output, b.Output)
	}
}

func TestMockBadSchema(t *testing.T) {
	tests := []struct {
		name   string
		schema any
		want   string
	}{
		{"invalid", map[string]any{"type": "strin"}, "not a valid JSON Schema"},
		{"remote ref", map[string]any{"$ref": "https://example.com/s.json"}, "is not allowed"},
		{"unsatisfiable", map[string]any{"type": "string", "minLength": 3, "maxLength": 1}, "cannot generate an example"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewMock(MockConfig{}).Run(context.Background(), agent.Request{Prompt: "p", Schema: tc.schema}, Call{})
			if err == nil || !strings.HasPrefix(err.Error(), "mock: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one starting with mock: and containing %q", err, tc.want)
			}
		})
	}
}

func TestMockUsageAndCost(t *testing.T) {
	var prev int
	for _, n := range []int{0, 10, 100, 1000, 10000} {
		req := agent.Request{Prompt: strings.Repeat("x", n), System: "sys"}
		res, err := NewMock(MockConfig{}).Run(context.Background(), req, Call{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Usage.Input <= 0 || res.Usage.Output <= 0 {
			t.Fatalf("prompt %d bytes: usage %+v, want both non-zero", n, res.Usage)
		}
		if res.Usage.Input <= prev {
			t.Fatalf("prompt %d bytes: input tokens %d did not grow past %d", n, res.Usage.Input, prev)
		}
		if want := (len(req.System)+len(req.Prompt))/4 + 1; res.Usage.Input != want {
			t.Errorf("prompt %d bytes: input tokens %d, want %d", n, res.Usage.Input, want)
		}
		if res.Cost != nil {
			t.Errorf("cost %v without prices, want nil", *res.Cost)
		}
		prev = res.Usage.Input
	}

	m := NewMock(MockConfig{PriceInPerMTok: 3, PriceOutPerMTok: 15})
	res, err := m.Run(context.Background(), agent.Request{Prompt: strings.Repeat("y", 4000)}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	want := float64(res.Usage.Input)*3/1e6 + float64(res.Usage.Output)*15/1e6
	if res.Cost == nil || *res.Cost != want || want <= 0 {
		t.Fatalf("cost %v, want %v", res.Cost, want)
	}

	// The schema counts towards input.
	plain, _ := m.Run(context.Background(), agent.Request{Prompt: "p"}, Call{})
	structured, err := m.Run(context.Background(), agent.Request{Prompt: "p", Schema: map[string]any{"type": "string", "description": strings.Repeat("d", 400)}}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if structured.Usage.Input <= plain.Usage.Input+90 {
		t.Errorf("schema not counted: input %d with schema, %d without", structured.Usage.Input, plain.Usage.Input)
	}
}

func TestMockSession(t *testing.T) {
	m := NewMock(MockConfig{})
	first, err := m.Run(context.Background(), agent.Request{Prompt: "start a chat"}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^mock-[0-9a-f]{12}$`).MatchString(first.SessionID) {
		t.Fatalf("new session id %q, want mock-<12 hex>", first.SessionID)
	}
	other, _ := m.Run(context.Background(), agent.Request{Prompt: "start another chat"}, Call{})
	if other.SessionID == first.SessionID {
		t.Errorf("different requests share session %q", first.SessionID)
	}
	next, err := m.Run(context.Background(), agent.Request{Prompt: "and then?", SessionID: first.SessionID}, Call{})
	if err != nil {
		t.Fatal(err)
	}
	if next.SessionID != first.SessionID {
		t.Errorf("continued session id %q, want %q", next.SessionID, first.SessionID)
	}
	if want := "mock (continuing session " + first.SessionID + "): and then?"; next.Text != want {
		t.Errorf("text %q, want %q", next.Text, want)
	}
	structured, err := m.Run(context.Background(), agent.Request{Prompt: "x", SessionID: "s-9", Schema: map[string]any{"type": "integer"}}, Call{})
	if err != nil || structured.SessionID != "s-9" {
		t.Errorf("structured call: session %q, err %v", structured.SessionID, err)
	}
}

type runResult struct {
	res agent.Result
	err error
}

func startRun(ctx context.Context, b Backend, req agent.Request) <-chan runResult {
	done := make(chan runResult, 1)
	go func() {
		res, err := b.Run(ctx, req, Call{})
		done <- runResult{res, err}
	}()
	return done
}

// The latency tests run in a synctest bubble: time is virtual, so they check the delay
// exactly without sleeping or depending on the machine's speed.
func TestMockLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMock(MockConfig{LatencyMS: 500})
		start := time.Now()
		done := startRun(context.Background(), m, agent.Request{Prompt: "p"})
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("returned before the latency elapsed: %+v", r)
		default:
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if elapsed := time.Since(start); elapsed != 500*time.Millisecond {
			t.Errorf("call took %v of virtual time, want 500ms", elapsed)
		}
	})
}

func TestMockCancel(t *testing.T) {
	tests := []struct {
		name string
		cfg  MockConfig
	}{
		{"during latency", MockConfig{LatencyMS: int(time.Hour / time.Millisecond)}},
		{"hang", MockConfig{Fail: "hang"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				done := startRun(ctx, NewMock(tc.cfg), agent.Request{Prompt: "p"})
				synctest.Wait()
				select {
				case r := <-done:
					t.Fatalf("returned before cancellation: %+v", r)
				default:
				}
				cancel()
				if r := <-done; !errors.Is(r.err, context.Canceled) {
					t.Fatalf("error %v, want context.Canceled", r.err)
				}
			})
		})
	}
	if _, err := NewMock(MockConfig{}).Run(canceledContext(), agent.Request{Prompt: "p"}, Call{}); !errors.Is(err, context.Canceled) {
		t.Errorf("already cancelled context: error %v, want context.Canceled", err)
	}
}

func canceledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func TestMockFailError(t *testing.T) {
	res, err := NewMock(MockConfig{Fail: "error"}).Run(context.Background(), agent.Request{Prompt: "p"}, Call{})
	if err == nil || err.Error() != "mock: injected failure (LUFT_MOCK_FAIL=error)" {
		t.Fatalf("error %v", err)
	}
	if res.Status != agent.StatusError || res.Error != err.Error() {
		t.Errorf("result %+v, want status error carrying the message", res)
	}
}

func TestMockFailRate(t *testing.T) {
	for _, rate := range []string{"0.1", "0.3", "0.5", "0.9", "1"} {
		t.Run(rate, func(t *testing.T) {
			m := NewMock(MockConfig{Fail: rate})
			failed := func() []bool {
				out := make([]bool, 1000)
				for i := range out {
					_, err := m.Run(context.Background(), agent.Request{Prompt: fmt.Sprintf("task %d", i), Name: "worker"}, Call{})
					out[i] = err != nil
				}
				return out
			}
			first := failed()
			n := 0
			for _, f := range first {
				if f {
					n++
				}
			}
			var want float64
			fmt.Sscan(rate, &want)
			if got := float64(n) / 1000; got < want-0.05 || got > want+0.05 {
				t.Errorf("failure fraction %.3f, want %s ± 0.05", got, rate)
			}
			if again := failed(); !reflect.DeepEqual(first, again) {
				t.Error("the same requests failed differently on a second pass")
			}
		})
	}
}

func TestParseMockEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    MockConfig
		wantErr string
	}{
		{"empty", nil, MockConfig{}, ""},
		{"latency", map[string]string{EnvMockLatencyMS: " 250 "}, MockConfig{LatencyMS: 250}, ""},
		{"error", map[string]string{EnvMockFail: "error"}, MockConfig{Fail: "error"}, ""},
		{"hang", map[string]string{EnvMockFail: "hang"}, MockConfig{Fail: "hang"}, ""},
		{"rate", map[string]string{EnvMockFail: "0.3"}, MockConfig{Fail: "0.3"}, ""},
		{"rate zero", map[string]string{EnvMockFail: "0"}, MockConfig{Fail: "0"}, ""},
		{"negative latency", map[string]string{EnvMockLatencyMS: "-1"}, MockConfig{}, `LUFT_MOCK_LATENCY_MS="-1": want a whole number of milliseconds >= 0`},
		{"fractional latency", map[string]string{EnvMockLatencyMS: "1.5"}, MockConfig{}, `LUFT_MOCK_LATENCY_MS="1.5"`},
		{"unknown mode", map[string]string{EnvMockFail: "sometimes"}, MockConfig{}, `LUFT_MOCK_FAIL="sometimes": want "" (no failures), "error"`},
		{"rate above one", map[string]string{EnvMockFail: "1.5"}, MockConfig{}, `LUFT_MOCK_FAIL="1.5"`},
		{"negative rate", map[string]string{EnvMockFail: "-0.1"}, MockConfig{}, `a failure rate from 0 to 1`},
		{"NaN", map[string]string{EnvMockFail: "NaN"}, MockConfig{}, `LUFT_MOCK_FAIL="NaN"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMockEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseMockEnv = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestNewMockInvalidFail(t *testing.T) {
	_, err := NewMock(MockConfig{Fail: "often"}).Run(context.Background(), agent.Request{Prompt: "p"}, Call{})
	if err == nil || !strings.Contains(err.Error(), `invalid failure mode "often"`) {
		t.Fatalf("error %v", err)
	}
}
