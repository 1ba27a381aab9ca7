package planner

import (
	"context"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
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
