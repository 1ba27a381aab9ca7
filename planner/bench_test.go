package planner

import (
	"context"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// BenchmarkPlanOverhead is what planning costs beyond the model's time: building the
// prompt, extracting the script and validating it (compile, dry run on the mock backend,
// lint), with a model that answers at once. It also reports the first prompt's size in
// the fake engine's tokens (system: the skill; user: the task). Run on purpose:
//
//	go test ./planner -run '^$' -bench PlanOverhead
func BenchmarkPlanOverhead(b *testing.B) {
	sys, user := Prompt("audit the repo for security issues")
	for _, bc := range []struct {
		name string
		p    *Planner
	}{
		{"model", New(Options{Model: &scripted{replies: []string{good}}})},
		{"template", New(Options{})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.p.Plan(context.Background(), "audit the repo for security issues"); err != nil {
					b.Fatal(err)
				}
			}
			// After the loop: b.Loop resets the timer, and with it any metric reported before.
			b.ReportMetric(float64(testkit.CountTokens(sys)+testkit.CountTokens(user)), "prompt-tokens")
			b.ReportMetric(float64(len(sys)+len(user)), "prompt-bytes")
		})
	}
}

// BenchmarkPlanOnFakeEngine plans through the whole path — runtime.Service.Complete (the
// scheduler, the openai backend, HTTP on loopback) to the fake engine, then validation —
// and reports the overhead the planner measured beside the model's time (Plan.Overhead).
//
//	go test ./planner -run '^$' -bench PlanOnFakeEngine
func BenchmarkPlanOnFakeEngine(b *testing.B) {
	engine := testkit.NewEngine(testkit.Config{ToolRules: []testkit.ToolRule{{Reply: good}}})
	srv := testkit.NewServer(engine)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	oa, err := adapters.NewOpenAI(adapters.OpenAIConfig{ID: "fake", BaseURL: url, APIKey: "k", Model: "planner-1"})
	if err != nil {
		b.Fatal(err)
	}
	st, err := storage.Open(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	svc, err := runtime.New(runtime.Options{Store: st, Backends: adapters.NewRegistry("fake", oa)})
	if err != nil {
		b.Fatal(err)
	}
	p := New(Options{Model: svc, Backend: "fake"})
	var overhead, model time.Duration
	for b.Loop() {
		plan, err := p.Plan(context.Background(), "audit the repo for security issues")
		if err != nil {
			b.Fatal(err)
		}
		overhead += plan.Overhead
		model += plan.Calls[0].Elapsed
	}
	b.ReportMetric(float64(overhead.Microseconds())/float64(b.N)/1000, "overhead-ms/op")
	b.ReportMetric(float64(model.Microseconds())/float64(b.N)/1000, "model-call-ms/op")
}
