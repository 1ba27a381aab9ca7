package tui

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/luft-run/luft/event"
)

// Options configure the live view.
type Options struct {
	// Now is the clock (default time.Now). Frames read it only in View.
	Now func() time.Time
	// Cancel asks the run to stop gracefully; the first q or Ctrl-C calls it, once. Nil
	// makes the view a viewer (luft logs --follow): q and Ctrl-C close it.
	Cancel func()
	// HardExit is called on the second Ctrl-C, from the program's goroutine while the
	// terminal is still in raw mode; the model quits the program right after. Leave it
	// nil and check Model.HardExited once the program returned to exit with a terminal
	// restored.
	HardExit func()
	Styles   Styles
	State    StateOptions
	Location *time.Location // for times of day (default time.Local)
	// Width and Height are the size until the first tea.WindowSizeMsg (default 80×24).
	Width, Height int
	// HideLog starts with the log pane closed (l toggles it).
	HideLog bool
	// Approve answers a tool call the run parked for approval (approval_requested): the
	// footer asks, y allows and n declines the oldest one. Nil shows no prompt.
	Approve func(approvalID string, allow bool) error
}

// asked is a tool call waiting for the user's answer.
type asked struct{ id, tool, args string }

// Messages the model takes besides Bubble Tea's own.
type (
	// EventMsg is one event of the run.
	EventMsg event.Event
	// EventsMsg is a batch of events, in order (one frame for many events).
	EventsMsg []event.Event
	// InterruptMsg is a Ctrl-C that arrived as a signal: the first cancels gracefully,
	// the second exits hard, counted together with the Ctrl-C keys.
	InterruptMsg struct{}
	// EndMsg says the event stream ended without run_done: the view quits.
	EndMsg struct{}
	// PrintMsg is a line to print above the board, where it stays.
	PrintMsg string
	tickMsg  time.Time
)

type keyMap struct {
	Interrupt, Stop, Up, Down, Open, Close, Log, Allow, Decline key.Binding
}

func newKeyMap() keyMap {
	return keyMap{
		Interrupt: key.NewBinding(key.WithKeys("ctrl+c")),
		Stop:      key.NewBinding(key.WithKeys("q")),
		Up:        key.NewBinding(key.WithKeys("up", "k")),
		Down:      key.NewBinding(key.WithKeys("down", "j")),
		Open:      key.NewBinding(key.WithKeys("enter")),
		Close:     key.NewBinding(key.WithKeys("esc", "enter", "backspace")),
		Log:       key.NewBinding(key.WithKeys("l")),
		Allow:     key.NewBinding(key.WithKeys("y")),
		Decline:   key.NewBinding(key.WithKeys("n")),
	}
}

// Model is the live view of a run as a Bubble Tea model: the board, an agent's output in
// a detail pane, the log pane, and the keys that stop the run.
type Model struct {
	lanes []Lane // the scheduler's, as last sampled
	o     Options
	st    *State
	sty   Styles
	keys  keyMap
	w, h  int

	selected  string // call key under the cursor
	showLog   bool
	detail    *Agent // the agent whose output is open
	vp        viewport.Model
	vpLen     int // output length and width the viewport content was made from
	vpWidth   int
	cancelled bool
	hard      bool
	ended     bool    // run_done or the end of the stream: the frame is final
	asking    []asked // approvals waiting for y or n, oldest first
}

// NewModel returns a live view with an empty state.
func NewModel(o Options) *Model {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.Width <= 0 {
		o.Width = 80
	}
	if o.Height <= 0 {
		o.Height = 24
	}
	vp := viewport.New(o.Width, o.Height)
	vp.MouseWheelEnabled = false
	// h and l are the log key and nothing else: the output is wrapped, never scrolled sideways.
	vp.KeyMap.Left, vp.KeyMap.Right = key.NewBinding(key.WithDisabled()), key.NewBinding(key.WithDisabled())
	return &Model{o: o, st: NewState(o.State), sty: o.Styles.orDefault(), keys: newKeyMap(),
		w: o.Width, h: o.Height, showLog: !o.HideLog, vp: vp}
}

// State is the run as the model has folded it.
func (m *Model) State() *State { return m.st }

// Cancelled reports whether the user (or a signal) asked the run to stop.
func (m *Model) Cancelled() bool { return m.cancelled }

// HardExited reports whether a second Ctrl-C asked to quit at once.
func (m *Model) HardExited() bool { return m.hard }

// Init starts the clock that refreshes elapsed times and the ETA.
func (m *Model) Init() tea.Cmd { return tick() }

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// Update folds events and handles keys, resizes and ticks.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case EventMsg:
		cmd := m.apply(event.Event(msg))
		m.layoutDetail()
		return m, cmd
	case EventsMsg:
		var cmd tea.Cmd
		for _, ev := range msg {
			if c := m.apply(ev); c != nil {
				cmd = c
			}
		}
		m.layoutDetail()
		return m, cmd
	case tea.WindowSizeMsg:
		if msg.Width > 0 {
			m.w = msg.Width
		}
		if msg.Height > 0 {
			m.h = msg.Height
		}
		m.layoutDetail()
		return m, nil
	case tickMsg:
		if m.ended {
			return m, nil
		}
		return m, tick()
	case tea.KeyMsg:
		return m.key(msg)
	case InterruptMsg:
		return m.interrupt()
	case EndMsg:
		m.ended, m.detail = true, nil
		return m, tea.Quit
	case PrintMsg:
		return m, tea.Println(oneLine(string(msg)))
	case LanesMsg:
		m.lanes = []Lane(msg)
		if !m.st.Done() {
			m.st.SyncLanes(m.lanes) // the lane lines and the agent rows tell one story
		}
		return m, nil
	}
	return m, nil
}

func (m *Model) apply(ev event.Event) tea.Cmd {
	if m.ended {
		return nil
	}
	m.st.Apply(ev)
	switch ev.Type {
	case event.ApprovalRequested:
		if m.o.Approve != nil {
			id, _ := ev.Data["approval_id"].(string)
			tool, _ := ev.Data["tool"].(string)
			args, _ := ev.Data["arguments"].(string)
			m.asking = append(m.asking, asked{id: id, tool: oneLine(tool), args: args})
		}
	case event.ApprovalDecided:
		id, _ := ev.Data["approval_id"].(string)
		m.asking = slices.DeleteFunc(m.asking, func(a asked) bool { return a.id == id })
	}
	if ev.Type == event.RunDone {
		// The final frame is the board; the caller prints the summary below it.
		m.ended, m.detail = true, nil
		return tea.Quit
	}
	return nil
}

func (m *Model) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	switch {
	case key.Matches(k, m.keys.Interrupt):
		return m.interrupt()
	case key.Matches(k, m.keys.Stop):
		if !m.cancelled {
			return m.interrupt()
		}
		return m, nil
	case key.Matches(k, m.keys.Log):
		m.showLog = !m.showLog
		return m, nil
	case len(m.asking) > 0 && (key.Matches(k, m.keys.Allow) || key.Matches(k, m.keys.Decline)):
		a, allow := m.asking[0], key.Matches(k, m.keys.Allow)
		m.asking = m.asking[1:]
		approve := m.o.Approve
		return m, func() tea.Msg {
			if err := approve(a.id, allow); err != nil {
				return PrintMsg("luft: approval " + a.id + ": " + err.Error())
			}
			return nil
		}
	}
	if m.detail != nil {
		if key.Matches(k, m.keys.Close) {
			m.detail = nil
			return m, nil
		}
		var cmd tea.Cmd
		m.vp, cmd = m.vp.Update(k)
		return m, cmd
	}
	switch {
	case key.Matches(k, m.keys.Up):
		m.moveCursor(-1)
	case key.Matches(k, m.keys.Down):
		m.moveCursor(1)
	case key.Matches(k, m.keys.Open):
		if m.st.Agent(m.selected) == nil {
			m.moveCursor(0)
		}
		if a := m.st.Agent(m.selected); a != nil {
			m.detail, m.vpLen = a, -1
			m.layoutDetail()
			m.vp.GotoBottom()
		}
	}
	return m, nil
}

// interrupt is Ctrl-C: the first asks the run to stop, the second exits at once. A viewer
// (no Cancel) just closes.
func (m *Model) interrupt() (tea.Model, tea.Cmd) {
	if m.o.Cancel == nil {
		m.ended = true
		return m, tea.Quit
	}
	if !m.cancelled {
		m.cancelled = true
		m.o.Cancel()
		return m, nil
	}
	m.hard = true
	if m.o.HardExit != nil {
		m.o.HardExit()
	}
	return m, tea.Quit
}

// moveCursor moves the cursor to the previous (-1) or next (1) agent row; with no cursor
// yet (or 0) it goes to the first row.
func (m *Model) moveCursor(delta int) {
	var first, prev, next string
	found := false
	m.st.Rows(func(a *Agent) bool {
		if first == "" {
			first = a.Key
		}
		if found {
			next = a.Key
			return false
		}
		if a.Key == m.selected {
			found = true
			return true
		}
		prev = a.Key
		return true
	})
	switch {
	case !found || delta == 0:
		m.selected = first
	case delta < 0 && prev != "":
		m.selected = prev
	case delta > 0 && next != "":
		m.selected = next
	}
}

// layoutDetail sizes the output pane and refills it when the output or the width changed,
// keeping it at the end of the output when it was there.
func (m *Model) layoutDetail() {
	m.vp.Width, m.vp.Height = m.w, max(m.h-3, 1)
	a := m.detail
	if a == nil {
		return
	}
	n := len(a.out)
	if a.cut {
		n = -n - 2 // a cut output of the same length is new text
	}
	if n == m.vpLen && m.w == m.vpWidth {
		return
	}
	atEnd := m.vp.AtBottom() || m.vpLen == -1
	text := a.Output()
	if strings.TrimSpace(text) == "" {
		text = "(no output yet)"
	}
	m.vp.SetContent(ansi.Wrap(strings.TrimRight(text, "\n"), max(m.w, 1), ""))
	m.vpLen, m.vpWidth = n, m.w
	if atEnd {
		m.vp.GotoBottom()
	}
}

// View draws the current frame.
func (m *Model) View() string {
	now := m.o.Now()
	if m.detail != nil {
		return m.detailView(now)
	}
	b := &board{st: m.st, now: now, w: m.w, h: m.h, sty: m.sty, loc: m.o.Location, selected: m.selected,
		cursor: true, showLog: m.showLog, stopping: m.cancelled, lanes: m.lanes}
	if !m.ended {
		b.footer, b.footWarn = m.footer()
		return b.render()
	}
	// Bubble Tea erases the line the cursor is on when the program ends: the final frame
	// ends with an empty line for it, so the board stays whole above the summary.
	if b.h > 1 {
		b.h--
	}
	return b.render() + "\n"
}

func (m *Model) footer() (string, bool) {
	switch {
	case m.cancelled:
		return "stopping… press Ctrl-C again to quit at once", true
	case len(m.asking) > 0:
		return m.prompt(), true
	case m.o.Cancel == nil:
		return "q quit · ↑/↓ select · enter output · l log", false
	}
	return "q stop · ↑/↓ select · enter output · l log", false
}

// prompt asks about the oldest tool call waiting for approval.
func (m *Model) prompt() string {
	a := m.asking[0]
	more := ""
	if n := len(m.asking) - 1; n > 0 {
		more = fmt.Sprintf(" (+%d more)", n)
	}
	return trunc(fmt.Sprintf("approve %s? y allow · n decline%s · %s", a.tool, more, oneLine(a.args)), m.w)
}

func (m *Model) detailView(now time.Time) string {
	b := &board{st: m.st, now: now, w: m.w, h: m.h, sty: m.sty, loc: m.o.Location, stopping: m.cancelled}
	b.header()
	info, style := b.agentInfo(m.detail)
	b.line(style, info)
	for _, l := range strings.Split(m.vp.View(), "\n") {
		b.line(m.sty.Plain, l)
	}
	foot, warn := "esc back · ↑/↓ scroll · q stop", false
	switch {
	case m.cancelled:
		foot, warn = "stopping… press Ctrl-C again to quit at once", true
	case len(m.asking) > 0:
		foot, warn = m.prompt(), true
	case m.o.Cancel == nil:
		foot = "esc back · ↑/↓ scroll · q quit"
	}
	fs := m.sty.Dim
	if warn {
		fs = m.sty.Warn
	}
	b.line(fs, foot)
	if len(b.out) > m.h {
		b.out = b.out[:m.h]
	}
	return strings.Join(b.out, "\n")
}
