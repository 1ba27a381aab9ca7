package tui

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/luft-run/luft/event"
	"github.com/muesli/termenv"
)

func isQuit(cmd tea.Cmd) bool {
	if cmd == nil {
		return false
	}
	_, ok := cmd().(tea.QuitMsg)
	return ok
}

func TestKeysCancelOnceThenHardExit(t *testing.T) {
	var cancels, hards int
	m := NewModel(Options{Now: func() time.Time { return t0 }, Cancel: func() { cancels++ }, HardExit: func() { hards++ }})
	m.Update(EventsMsg(scenarioStart().evs))

	_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	if cancels != 1 || isQuit(cmd) || !m.Cancelled() {
		t.Fatalf("q: %d cancels, quit %v", cancels, isQuit(cmd))
	}
	if !strings.Contains(m.View(), "stopping… press Ctrl-C again") {
		t.Errorf("the frame does not say the run is stopping:\n%s", m.View())
	}
	// q again does nothing; the cancel is not asked twice.
	_, cmd = m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	if cancels != 1 || hards != 0 || isQuit(cmd) {
		t.Fatalf("second q: %d cancels %d hard exits", cancels, hards)
	}
	_, cmd = m.Update(tea.KeyMsg{Type: tea.KeyCtrlC})
	if cancels != 1 || hards != 1 || !isQuit(cmd) || !m.HardExited() {
		t.Fatalf("ctrl+c after a cancel: %d cancels %d hard exits, quit %v", cancels, hards, isQuit(cmd))
	}
}

// A Ctrl-C that arrives as a signal counts with the keys.
func TestInterruptMsgCountsWithKeys(t *testing.T) {
	var cancels, hards int
	m := NewModel(Options{Cancel: func() { cancels++ }, HardExit: func() { hards++ }})
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyCtrlC}); cancels != 1 || isQuit(cmd) {
		t.Fatalf("first ctrl+c: %d cancels", cancels)
	}
	if _, cmd := m.Update(InterruptMsg{}); hards != 1 || !isQuit(cmd) {
		t.Fatalf("a signal after ctrl+c: %d hard exits", hards)
	}
}

func TestViewerQuitsWithoutCancel(t *testing.T) {
	m := NewModel(Options{})
	if _, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")}); !isQuit(cmd) || m.Cancelled() || m.HardExited() {
		t.Fatal("q in a viewer should only close it")
	}
}

func TestRunDoneQuitsWithFinalFrame(t *testing.T) {
	s := scenarioFailure()
	m := NewModel(Options{Now: func() time.Time { return s.now() }, Cancel: func() {}, Width: 100, Height: 30})
	press(m, "down", "enter") // the detail pane is open when the run ends
	var quit bool
	for _, ev := range s.evs {
		_, cmd := m.Update(EventMsg(ev))
		quit = isQuit(cmd)
	}
	if !quit {
		t.Fatal("run_done did not quit the program")
	}
	v := m.View()
	if !strings.HasPrefix(v, "luft · failed") || strings.Contains(v, "q stop") {
		t.Errorf("final frame:\n%s", v)
	}
	// Events after the end change nothing.
	m.Update(EventMsg(event.Event{Type: event.Log, Data: map[string]any{"level": "error", "msg": "late"}}))
	if m.View() != v {
		t.Error("an event after run_done changed the final frame")
	}
}

func TestEndOfStreamQuits(t *testing.T) {
	m := NewModel(Options{})
	if _, cmd := m.Update(EndMsg{}); !isQuit(cmd) {
		t.Fatal("EndMsg did not quit")
	}
}

func TestDetailPane(t *testing.T) {
	s := scenarioFanout()
	m := live(s, 80, 16)
	press(m, "down", "enter")
	if m.detail == nil || m.detail.Key != "main/2/par[3]/1" {
		t.Fatalf("enter opened %v", m.detail)
	}
	// Output that arrives while the pane is open shows at once, the pane following it.
	for i := range 30 {
		m.Update(EventMsg(event.Event{Type: event.AgentProgress, TS: s.now(), Data: map[string]any{"call_key": "main/2/par[3]/1",
			"kind": "text", "text": fmt.Sprintf("finding %d\n", i)}}))
	}
	v := m.View()
	if !strings.Contains(v, "finding 29") || strings.Contains(v, "finding 5\n") {
		t.Errorf("the pane does not follow the output:\n%s", v)
	}
	checkFits(t, v, 80, 16)
	press(m, "up", "up", "up")
	if v2 := m.View(); v2 == v || !strings.Contains(v2, "finding 26") {
		t.Errorf("up did not scroll the output:\n%s", v2)
	}
	press(m, "l") // l is the log key, not a sideways scroll
	if m.showLog {
		t.Error("l did not toggle the log pane in the detail view")
	}
	press(m, "esc")
	if m.detail != nil || !strings.HasPrefix(m.View(), "luft · running") {
		t.Error("esc did not close the pane")
	}
	press(m, "l")
	if !m.showLog {
		t.Error("l did not toggle the log pane back")
	}
}

func TestCursorMoves(t *testing.T) {
	m := live(scenarioFanout(), 100, 30)
	press(m, "up")
	if m.selected != "main/2/par[3]/1" {
		t.Fatalf("the first key press selects the first row, got %q", m.selected)
	}
	press(m, "down", "down", "up")
	if m.selected != "main/2/par[4]/1" {
		t.Fatalf("selected %q", m.selected)
	}
	press(m, strings.Split(strings.Repeat("down,", 40), ",")[:40]...)
	if m.selected != "main/1/par[1]/1" {
		t.Fatalf("down past the end: selected %q, want the last row", m.selected)
	}
	// The cursor stays in view when the list is longer than the screen.
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 12})
	if v := m.View(); !strings.Contains(v, "> ✓ scan-1") {
		t.Errorf("the selected row is not drawn:\n%s", v)
	}
}

// No line is wider than the screen and no frame taller, at any width, in any scenario,
// with or without colour.
func TestFramesFitEveryWidth(t *testing.T) {
	color := lipgloss.NewRenderer(io.Discard)
	color.SetColorProfile(termenv.TrueColor)
	scenarios := map[string]*script{"start": scenarioStart(), "fanout": scenarioFanout(), "ratelimit": scenarioRateLimit(),
		"failure": scenarioFailure(), "suspend": scenarioSuspend()}
	for name, s := range scenarios {
		for w := 20; w <= 200; w++ {
			sty := NoColor()
			if w%5 == 0 {
				sty = NewStyles(color) // escape sequences take no cells
			}
			for _, h := range []int{3, 4, 5, 9, 40} {
				now := s.now()
				m := NewModel(Options{Now: func() time.Time { return now }, Cancel: func() {}, Styles: sty, Location: time.UTC})
				m.Update(tea.WindowSizeMsg{Width: w, Height: h})
				m.Update(EventsMsg(s.evs[:len(s.evs)-1])) // the last event may end the run
				press(m, "down")
				v := m.View()
				checkFitsNamed(t, name, v, w, h)
				if lines := strings.Split(v, "\n"); h >= 4 && !strings.HasPrefix(ansi.Strip(lines[len(lines)-1]), "q stop") {
					t.Fatalf("%s at %d×%d: the keys line was pushed off:\n%s", name, w, h, v)
				}
				press(m, "enter")
				checkFitsNamed(t, name+" detail", m.View(), w, h)
				m.Update(EventMsg(s.evs[len(s.evs)-1]))
				checkFitsNamed(t, name+" final", m.View(), w, h)
			}
			checkFitsNamed(t, name+" status", StatusView(Fold(StateOptions{}, s.evs...), s.now(), w, sty, time.UTC), w, 0)
		}
	}
}

func checkFitsNamed(t *testing.T, name, frame string, w, h int) {
	t.Helper()
	lines := strings.Split(frame, "\n")
	if h > 0 && len(lines) > h {
		t.Fatalf("%s at %d×%d: %d lines", name, w, h, len(lines))
	}
	for i, l := range lines {
		if n := width(l); n > w {
			t.Fatalf("%s at %d×%d: line %d is %d cells: %q", name, w, h, i+1, n, l)
		}
	}
}

// The live program on a (fake) terminal: events go in, the program ends at run_done, and
// the model holds the run for the summary.
func TestLiveRunsToTheEnd(t *testing.T) {
	s := scenarioFailure()
	var out bytes.Buffer
	l := NewLive(LiveOptions{Options: Options{Now: func() time.Time { return s.now() }, Cancel: func() {}}, Out: &out})
	events := make(chan event.Event)
	go func() {
		defer close(events)
		for _, ev := range s.evs {
			events <- ev
		}
	}()
	m, err := l.Run(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	if st := m.State(); st.Status != "failed" || st.Totals.Failed != 12 {
		t.Fatalf("state after the program: %q %+v", st.Status, st.Totals)
	}
	if !strings.Contains(out.String(), "review-03") {
		t.Errorf("nothing drawn: %q", out.String())
	}
}

func TestLiveInterruptCancels(t *testing.T) {
	s := scenarioStart()
	var cancels atomic.Int32
	events := make(chan event.Event, len(s.evs))
	for _, ev := range s.evs {
		events <- ev
	}
	l := NewLive(LiveOptions{Options: Options{Now: func() time.Time { return s.now() }, Cancel: func() {
		cancels.Add(1)
		// The run ends as a cancelled one does.
		go func() {
			events <- event.Event{Type: event.RunDone, Data: map[string]any{"status": "cancelled", "error": "cancelled by request"}}
			close(events)
		}()
	}}, Out: io.Discard})
	go l.Interrupt()
	m, err := l.Run(context.Background(), events)
	if err != nil {
		t.Fatal(err)
	}
	if cancels.Load() != 1 || m.State().Status != "cancelled" || m.HardExited() {
		t.Fatalf("%d cancels, status %q", cancels.Load(), m.State().Status)
	}
	l.Interrupt() // after the end: returns at once
	l.Println("late")
}

func TestLiveEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	l := NewLive(LiveOptions{Out: io.Discard})
	done := make(chan error, 1)
	go func() {
		_, err := l.Run(ctx, make(chan event.Event))
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a killed program returned no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the program did not end with its context")
	}
}
