package adapters

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/schema"
)

func openFixture(t *testing.T, name string) *MockFile {
	t.Helper()
	f, err := OpenMockFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestMockFileLookup(t *testing.T) {
	tests := []struct {
		name       string // agent name
		wantText   string
		wantStatus agent.Status
		wantErr    string
	}{
		{name: "fix", wantText: "exact fix"},
		{name: "fix auth", wantText: "fix auth prefix"},
		{name: "fix auth login flow", wantText: "fix auth prefix"}, // longest prefix wins
		{name: "fix db", wantText: "exact fix"},                    // "fix " prefix
		{name: "fixer", wantText: "default reply"},                 // a prefix needs the space
		{name: "fix\tdb", wantText: "default reply"},
		{name: "unknown", wantText: "default reply"},
		{name: "", wantText: "default reply"},
		{name: "failing", wantStatus: agent.StatusError},
		{name: "sleepy", wantStatus: agent.StatusTimedOut},
	}
	f := openFixture(t, "replies.json")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := f.Run(context.Background(), agent.Request{Prompt: "p", Name: tc.name}, Call{})
			if err != nil {
				t.Fatal(err)
			}
			want := tc.wantStatus
			if want == "" {
				want = agent.StatusOK
			}
			if res.Status != want {
				t.Fatalf("status %q, want %q", res.Status, want)
			}
			if want == agent.StatusOK && (res.Text != tc.wantText || res.Output != tc.wantText) {
				t.Fatalf("text %q output %v, want %q", res.Text, res.Output, tc.wantText)
			}
			if res.Backend != "mockfile" || res.Model != MockFileModel || res.Attempts != 1 {
				t.Errorf("result fields %+v", res)
			}
		})
	}
}

func TestMockFileUnmatched(t *testing.T) {
	f := openFixture(t, "replies_nodefault.json")
	tests := []struct {
		name string
		want []string
	}{
		{"writer", []string{`no scripted reply for agent name "writer"`, "replies_nodefault.json", `"responses": {"writer"`, `"default"`}},
		{"review a.go", []string{`"review" to answer every agent whose name starts with "review "`}},
		{"", []string{"agent without a name", "give the agent a name="}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.Run(context.Background(), agent.Request{Prompt: "p", Name: tc.name}, Call{})
			if err == nil {
				t.Fatal("no error for an unmatched name")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q misses %q", err, w)
				}
			}
		})
	}
	if c := f.Coverage(); c.Unmatched != 3 || c.Matched != 0 || !reflect.DeepEqual(c.Unused, []string{"only"}) {
		t.Errorf("coverage %+v", c)
	}
}

func TestMockFileReplies(t *testing.T) {
	f := openFixture(t, "replies.json")
	run := func(name string, req agent.Request) agent.Result {
		t.Helper()
		req.Name = name
		if req.Prompt == "" {
			req.Prompt = "prompt"
		}
		res, err := f.Run(context.Background(), req, Call{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := run("reviewer", agent.Request{})
	wantOut := map[string]any{"verdict": "approve", "notes": []any{"ok"}}
	if !reflect.DeepEqual(res.Output, wantOut) || res.Text != `{"notes":["ok"],"verdict":"approve"}` {
		t.Errorf("reviewer: output %v text %q", res.Output, res.Text)
	}
	if res.Usage != (agent.Usage{Input: 10, Output: 5}) || res.Cost == nil || *res.Cost != 0.01 {
		t.Errorf("reviewer: usage %+v cost %v", res.Usage, res.Cost)
	}
	if want := []agent.Finding{{Kind: "bug", Severity: "high", Title: "nil deref", Detail: "a.go:3"}}; !reflect.DeepEqual(res.Findings, want) {
		t.Errorf("reviewer: findings %+v", res.Findings)
	}

	res = run("writer", agent.Request{})
	if res.Output != "a plain string output" || res.Text != "a plain string output" || res.Usage != (agent.Usage{Output: 42}) {
		t.Errorf("writer: %+v", res)
	}

	res = run("failing", agent.Request{})
	if res.Error != "boom" || res.Output != nil {
		t.Errorf("failing: %+v", res)
	}
	res = run("implicit error", agent.Request{})
	if res.Status != agent.StatusError || res.Error != "implied by the error field" {
		t.Errorf("implicit error: %+v", res)
	}
	res = run("sleepy", agent.Request{})
	if !strings.Contains(res.Error, `scripted timed_out reply for agent "sleepy"`) {
		t.Errorf("sleepy: error %q", res.Error)
	}

	res = run("null output", agent.Request{})
	if res.Output != nil || res.Text != "null" {
		t.Errorf("null output: output %v text %q", res.Output, res.Text)
	}

	// Without scripted usage, usage is estimated and grows with the prompt.
	short := run("fix", agent.Request{Prompt: "short"})
	long := run("fix", agent.Request{Prompt: strings.Repeat("long ", 100)})
	if short.Usage.Input <= 0 || short.Usage.Output <= 0 || long.Usage.Input <= short.Usage.Input {
		t.Errorf("estimated usage: short %+v long %+v", short.Usage, long.Usage)
	}

	// Sessions: kept when given, a deterministic new one otherwise.
	if res := run("fix", agent.Request{SessionID: "s-1"}); res.SessionID != "s-1" {
		t.Errorf("session %q, want s-1", res.SessionID)
	}
	if a, b := run("fix", agent.Request{}), run("fix", agent.Request{}); a.SessionID == "" || a.SessionID != b.SessionID {
		t.Errorf("new sessions %q, %q: want equal and non-empty", a.SessionID, b.SessionID)
	}
}

func TestMockFileSchemaFallback(t *testing.T) {
	f := openFixture(t, "replies.json")
	for i, raw := range loadSchemas(t) {
		res, err := f.Run(context.Background(), agent.Request{Prompt: "review", Name: "schema fallback", Schema: raw}, Call{})
		if err != nil {
			t.Fatalf("schema %d: %v", i, err)
		}
		s, err := schema.Compile(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(res.Output); err != nil {
			t.Errorf("schema %d: output %v %v", i, res.Output, err)
		}
	}
	// A scripted output is passed through unvalidated, so scripts can exercise schema retries.
	res, err := f.Run(context.Background(), agent.Request{Prompt: "p", Name: "writer", Schema: map[string]any{"type": "integer"}}, Call{})
	if err != nil || res.Output != "a plain string output" {
		t.Errorf("scripted output with a schema: %v, %v", res.Output, err)
	}
	_, err = f.Run(context.Background(), agent.Request{Prompt: "p", Name: "schema fallback", Schema: map[string]any{"type": "nope"}}, Call{})
	if err == nil || !strings.Contains(err.Error(), `reply for agent "schema fallback"`) || !strings.Contains(err.Error(), "not a valid JSON Schema") {
		t.Errorf("bad schema: error %v", err)
	}
}

func TestMockFileDelayCancel(t *testing.T) {
	f := openFixture(t, "replies.json")
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := startRun(ctx, f, agent.Request{Prompt: "p", Name: "slow"})
		synctest.Wait()
		select {
		case r := <-done:
			t.Fatalf("returned before delay_ms elapsed: %+v", r)
		default:
		}
		cancel()
		if r := <-done; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", r.err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		res, err := f.Run(context.Background(), agent.Request{Prompt: "p", Name: "slow"}, Call{})
		if err != nil || res.Text != "finally" {
			t.Fatalf("after the delay: %+v, %v", res, err)
		}
	})
}

func TestMockFileCoverage(t *testing.T) {
	f := openFixture(t, "replies.json")
	names := []string{"fix", "fix db", "fix auth x", "reviewer", "nobody", "someone else"}
	var wg sync.WaitGroup
	for range 10 {
		for _, n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := f.Run(context.Background(), agent.Request{Prompt: "p", Name: n}, Call{}); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	want := MockFileCoverage{
		Matched: 40, Default: 20, Unmatched: 0,
		Unused: []string{"failing", "implicit error", "null output", "schema fallback", "sleepy", "slow", "writer"},
	}
	if got := f.Coverage(); !reflect.DeepEqual(got, want) {
		t.Fatalf("coverage %+v, want %+v", got, want)
	}
}

func TestMockFileParseErrors(t *testing.T) {
	tests := []struct {
		file string
		want string
	}{
		{"unknown_top.json", `unknown field "defaults" (known fields: responses, default)`},
		{"unknown_reply_field.json", `responses["a"]: unknown field "outptu" (known fields: status, output, text`},
		{"unknown_usage_field.json", `responses["a"]: json: unknown field "outputs"`},
		{"unknown_finding_field.json", `default: json: unknown field "sev"`},
		{"bad_status.json", `responses["a"]: status "done": want "ok", "error" or "timed_out"`},
		{"negative_delay.json", `delay_ms -1`},
		{"tokens_conflict.json", `tokens 3 disagrees with usage`},
		{"not_object.json", `not a JSON object`},
		{"empty_name.json", `an empty agent name never matches`},
		{"error_with_ok.json", `"error" is set but status is "ok"`},
		{"reply_not_object.json", `responses["a"]: a reply must be a JSON object`},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = NewMockFile(path, data)
			if err == nil {
				t.Fatal("parsed without error")
			}
			if !strings.Contains(err.Error(), "mock file "+path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to name %s and contain %q", err, path, tc.want)
			}
		})
	}
	if _, err := OpenMockFile(filepath.Join("testdata", "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: error %v", err)
	}
}
