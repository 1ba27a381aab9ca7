package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
)

func TestStatusLine(t *testing.T) {
	s := &script{}
	s.started().phase(1, "review", 40)
	for i := range 17 {
		s.agent(fmt.Sprintf("k%d", i), fmt.Sprintf("r%d", i), 1)
	}
	for i := range 12 {
		s.wait(6).done(fmt.Sprintf("k%d", i), fmt.Sprintf("r%d", i), 1000, 266, time.Second)
	}
	s.queued("k15", 1).queued("k16", 2)
	// 12 agents took 72s: the 28 left take about 2m48s.
	p := NewPlain(&strings.Builder{}, PlainOptions{})
	for _, ev := range s.evs {
		p.Line(ev)
	}
	got := p.StatusLine(s.now())
	want := "12/40 agents · 3 running · 2 queued · 15.2k tokens · $0.06 · 1m12s · ETA ~2m48s"
	if got != want {
		t.Errorf("status line\n got %q\nwant %q", got, want)
	}
}

func TestPlainLevelsAndRunDone(t *testing.T) {
	s := &script{}
	s.started().log("debug", "details").log("info", "news").log("error", "bad\nthing")
	s.wait(2).runDone("completed", "", 0, 0, 0, 0, 0, 0)
	for _, tc := range []struct {
		o    PlainOptions
		want []string
	}{
		{PlainOptions{}, []string{"  [info] news", "  [error] bad thing"}},
		{PlainOptions{Level: "debug"}, []string{"  [debug] details", "  [info] news", "  [error] bad thing"}},
		{PlainOptions{Level: "error", ShowRunDone: true}, []string{"  [error] bad thing", "luft: run " + runID + " completed in 2.0s"}},
	} {
		var b strings.Builder
		p := NewPlain(&b, tc.o)
		for _, ev := range s.evs {
			if err := p.Event(ev); err != nil {
				t.Fatal(err)
			}
		}
		lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")[1:] // after "run started"
		if strings.Join(lines, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("level %q: got\n%s\nwant\n%s", tc.o.Level, strings.Join(lines, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// Turns that wait for the same refill of a lane make one line.
func TestPlainRateLimitOncePerRefill(t *testing.T) {
	s := &script{}
	until := t0.Add(9 * time.Second).Format(time.RFC3339Nano)
	for i := range 3 {
		s.agent(fmt.Sprint(i), fmt.Sprint("a", i), 0)
		s.add(event.RateLimit, map[string]any{"lane": "l", "action": "wait", "wait_ms": 9000 - i*100, "reason": "tokens", "call_key": fmt.Sprint(i), "until": until})
	}
	s.wait(20).add(event.RateLimit, map[string]any{"lane": "l", "action": "wait", "wait_ms": 5000, "reason": "requests", "call_key": "2"})
	var b strings.Builder
	p := NewPlain(&b, PlainOptions{})
	for _, ev := range s.evs {
		_ = p.Event(ev)
	}
	want := "  ▸ a0 · openai/gpt-4o\n  ⧗ rate limit on l (tokens): a0 waits 9.0s\n  ▸ a1 · openai/gpt-4o\n  ▸ a2 · openai/gpt-4o\n" +
		"  ⧗ rate limit on l (requests): a2 waits 5.0s\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	if p.State().Totals.RateWaits != 4 {
		t.Errorf("%d waits counted, want 4", p.State().Totals.RateWaits)
	}
}

func TestResumeCommand(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"", "luft run --resume R"},
		{"/var/luft", "luft run --resume R --state-dir /var/luft"},
		{"my runs/it's", `luft run --resume R --state-dir 'my runs/it'\''s'`},
	} {
		if got := ResumeCommand("R", tc.dir); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.dir, got, tc.want)
		}
	}
	st := Fold(StateOptions{}, scenarioFailure().evs...)
	if got := Summary(st, SummaryOptions{Resume: "luft run --resume X --rerun-from-divergence"}); !strings.HasSuffix(got, "resume    luft run --resume X --rerun-from-divergence") {
		t.Errorf("the given resume command is not used:\n%s", got)
	}
	done := Fold(StateOptions{}, scenarioCompleted().evs...)
	if got := Summary(done, SummaryOptions{}); strings.Contains(got, "--resume") || !strings.Contains(got, "report    stdout") {
		t.Errorf("a completed run:\n%s", got)
	}
}

func TestColorFollowsEnvironment(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	render := func(sty Styles) string { return sty.Fail.Render("x") }
	if got := render(ColorFor(&strings.Builder{}, env("CLICOLOR_FORCE", "1"))); !strings.Contains(got, "\x1b[") {
		t.Errorf("CLICOLOR_FORCE gave no colour: %q", got)
	}
	if got := render(ColorFor(&strings.Builder{}, env("CLICOLOR_FORCE", "1", "NO_COLOR", "1"))); got != "x" {
		t.Errorf("NO_COLOR gave colour: %q", got)
	}
	if got := render(ColorFor(&strings.Builder{}, env())); got != "x" {
		t.Errorf("a writer that is no terminal gave colour: %q", got)
	}
	if got := render(NoColor()); got != "x" {
		t.Errorf("NoColor gave colour: %q", got)
	}
}
