package tui

import (
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/luft-run/luft/event"
)

// A tool call parked for approval puts a y/n prompt in the footer; y and n answer the
// oldest one through Options.Approve, an approval_decided event from elsewhere takes it
// away, and a failed answer is printed above the board.
func TestApprovalPrompt(t *testing.T) {
	type answer struct {
		id    string
		allow bool
	}
	var got []answer
	fail := false
	m := NewModel(Options{Now: func() time.Time { return t0 }, Cancel: func() {}, Width: 120,
		Approve: func(id string, allow bool) error {
			got = append(got, answer{id, allow})
			if fail {
				return errors.New("already answered")
			}
			return nil
		}})
	m.Update(EventsMsg(scenarioStart().evs))
	req := func(id, tool string) event.Event {
		return event.Event{Type: event.ApprovalRequested, TS: t0, Data: map[string]any{"approval_id": id, "call_key": "main/1", "tool": tool,
			"arguments": `{"path":"notes/today.md"}`}}
	}
	m.Update(EventsMsg{req("ap-1", "write_file"), req("ap-2", "deploy"), req("ap-3", "rm")})
	if v := m.View(); !strings.Contains(v, "approve write_file? y allow · n decline (+2 more)") || !strings.Contains(v, "notes/today.md") {
		t.Fatalf("no prompt in the footer:\n%s", v)
	}
	press := func(k string) tea.Cmd {
		_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)})
		if cmd != nil {
			if msg := cmd(); msg != nil {
				m.Update(msg)
			}
		}
		return cmd
	}
	press("y")
	// ap-2 is answered elsewhere (an MCP client): its prompt goes.
	m.Update(EventsMsg{{Type: event.ApprovalDecided, TS: t0, Data: map[string]any{"approval_id": "ap-2", "allow": true}}})
	if v := m.View(); !strings.Contains(v, "approve rm?") {
		t.Fatalf("after y and ap-2 decided elsewhere:\n%s", v)
	}
	fail = true
	press("n")
	if len(got) != 2 || got[0] != (answer{"ap-1", true}) || got[1] != (answer{"ap-3", false}) {
		t.Fatalf("answers %+v", got)
	}
	if v := m.View(); strings.Contains(v, "approve") {
		t.Fatalf("a prompt is left:\n%s", v)
	}
	if press("y") != nil || len(got) != 2 {
		t.Fatal("y with nothing to approve answered something")
	}
	// A viewer without Approve asks nothing.
	v := NewModel(Options{Now: func() time.Time { return t0 }, Width: 120})
	v.Update(EventsMsg{req("ap-9", "write_file")})
	if strings.Contains(v.View(), "approve") {
		t.Fatal("a view without Approve prompts")
	}
}

// Plain lines say which call waits for which approval, and how it was answered.
func TestPlainApprovalLines(t *testing.T) {
	var b strings.Builder
	p := NewPlain(&b, PlainOptions{})
	for _, ev := range []event.Event{
		{Type: event.ApprovalRequested, TS: t0, Data: map[string]any{"approval_id": "ap-1", "call_key": "main/1", "tool": "write_file", "arguments": "{\"path\":\n\"a.txt\"}"}},
		{Type: event.ApprovalDecided, TS: t0, Data: map[string]any{"approval_id": "ap-1", "call_key": "main/1", "tool": "write_file", "allow": false}},
	} {
		if err := p.Event(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := "  ⏸ main/1 waits for approval ap-1: write_file {\"path\": \"a.txt\"}\n  ▶ main/1 declined: write_file\n"
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// A model's arguments are shown, not obeyed: terminal control sequences in them are
// cleaned out of the prompt, and a huge argument is cut to the footer's width.
func TestApprovalPromptHostileArguments(t *testing.T) {
	m := NewModel(Options{Now: func() time.Time { return t0 }, Cancel: func() {}, Width: 80,
		Approve: func(string, bool) error { return nil }})
	m.Update(EventsMsg(scenarioStart().evs))
	args := "\x1b]0;owned\x07\x1b[2J{\"path\":\"a\u2028b\"}" + strings.Repeat("x", 1<<20)
	m.Update(EventsMsg{{Type: event.ApprovalRequested, TS: t0, Data: map[string]any{"approval_id": "ap-1",
		"call_key": "main/1", "tool": "write_file", "arguments": args}}})
	foot := m.prompt()
	if !strings.HasPrefix(foot, "approve write_file? y allow · n decline") {
		t.Fatalf("prompt %q", foot)
	}
	if strings.ContainsAny(foot, "\x1b\x07\u2028\n") {
		t.Fatalf("control characters reach the terminal: %q", foot)
	}
	if n := lipgloss.Width(foot); n > 80 {
		t.Fatalf("prompt is %d columns wide on an 80-column terminal", n)
	}
	if v := m.View(); strings.Contains(v, "\x1b]0;") || strings.Contains(v, "\x07") || strings.Contains(v, "\x1b[2J") {
		t.Fatalf("the view passes the model's escape sequences on: %q", v)
	}
}
