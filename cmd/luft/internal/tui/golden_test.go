package tui

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name.golden (or writes it with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got+"\n" != string(want) {
		t.Errorf("%s differs from the frame drawn (run go test -update after checking the change):\n--- want\n%s--- got\n%s\n",
			path, want, got)
	}
}

// live returns a model fed with s's events, at s's time, w×h cells.
func live(s *script, w, h int) *Model {
	now := s.now()
	m := NewModel(Options{Now: func() time.Time { return now }, Cancel: func() {}, Styles: NoColor(),
		Location: time.UTC, Width: w, Height: h})
	m.Update(EventsMsg(s.evs))
	return m
}

func press(m *Model, keys ...string) {
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "up":
			msg = tea.KeyMsg{Type: tea.KeyUp}
		case "down":
			msg = tea.KeyMsg{Type: tea.KeyDown}
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "ctrl+c":
			msg = tea.KeyMsg{Type: tea.KeyCtrlC}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		m.Update(msg)
	}
}

func TestGoldenFrames(t *testing.T) {
	for _, tc := range []struct {
		name  string
		s     *script
		w, h  int
		keys  []string
		extra func(*Model)
	}{
		{name: "start", s: scenarioStart(), w: 80, h: 24},
		{name: "fanout", s: scenarioFanout(), w: 100, h: 30},
		{name: "fanout_short", s: scenarioFanout(), w: 80, h: 16},
		{name: "ratelimit", s: scenarioRateLimit(), w: 100, h: 30},
		{name: "failure", s: scenarioFailure(), w: 100, h: 30},
		{name: "suspend", s: scenarioSuspend(), w: 100, h: 30},
		{name: "narrow", s: scenarioRateLimit(), w: 40, h: 20},
		{name: "detail", s: scenarioFanout(), w: 80, h: 16, keys: []string{"down", "down", "down", "enter"}},
		{name: "log_hidden", s: scenarioFanout(), w: 80, h: 24, keys: []string{"l"}},
		{name: "stopping", s: scenarioFanout(), w: 80, h: 24, keys: []string{"down", "q"}},
		{name: "lanes", s: scenarioRateLimit(), w: 100, h: 30, extra: func(m *Model) { m.Update(LanesMsg(testLanes(m.o.Now()))) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := live(tc.s, tc.w, tc.h)
			if tc.extra != nil {
				tc.extra(m)
			}
			press(m, tc.keys...)
			got := m.View()
			checkFits(t, got, tc.w, tc.h)
			if strings.Contains(got, "\x1b") {
				t.Errorf("a no-colour frame has escape sequences:\n%q", got)
			}
			golden(t, "frame_"+tc.name, got)
		})
	}
}

func TestGoldenSummaries(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *script
		o    SummaryOptions
	}{
		{name: "failure", s: scenarioFailure()},
		{name: "suspend", s: scenarioSuspend(), o: SummaryOptions{StateDir: "/tmp/my runs"}},
		{name: "completed", s: scenarioCompleted(), o: SummaryOptions{ReportPath: "review.md"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Fold(StateOptions{}, tc.s.evs...)
			tc.o.Styles, tc.o.Location = NoColor(), time.UTC
			golden(t, "summary_"+tc.name, Summary(st, tc.o))
		})
	}
}

func TestGoldenPlain(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *script
	}{
		{name: "ratelimit", s: scenarioRateLimit()},
		{name: "failure", s: scenarioFailure()},
		{name: "suspend", s: scenarioSuspend()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			p := NewPlain(&b, PlainOptions{Location: time.UTC})
			for i, ev := range tc.s.evs {
				if err := p.Event(ev); err != nil {
					t.Fatal(err)
				}
				if i == len(tc.s.evs)/2 {
					if err := p.Status(ev.TS); err != nil {
						t.Fatal(err)
					}
				}
			}
			golden(t, "plain_"+tc.name, strings.TrimRight(b.String(), "\n"))
		})
	}
}

func TestGoldenStatusView(t *testing.T) {
	s := scenarioFailure()
	st := Fold(StateOptions{}, s.evs...)
	got := StatusView(st, s.now(), 90, NoColor(), time.UTC)
	checkFits(t, got, 90, 0)
	golden(t, "status_failure", got)
}

// checkFits fails when a line is wider than w or there are more than h lines (h > 0).
func checkFits(t *testing.T, frame string, w, h int) {
	t.Helper()
	lines := strings.Split(frame, "\n")
	if h > 0 && len(lines) > h {
		t.Errorf("%d lines on a screen of %d", len(lines), h)
	}
	for i, l := range lines {
		if n := width(l); n > w {
			t.Errorf("line %d is %d cells wide on a screen of %d: %q", i+1, n, w, l)
		}
	}
}
