package tui

import (
	"context"
	"io"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/luft-run/luft/event"
)

// LiveOptions configure a live view on a terminal.
type LiveOptions struct {
	Options
	// Out is the terminal the board is drawn on (stderr).
	Out io.Writer
	// In is where keys come from: the terminal's input, or nil for no keys (then a
	// Ctrl-C stays a signal, and the caller passes it on with Interrupt).
	In io.Reader
}

// Live runs the board as a Bubble Tea program fed by a run's events.
type Live struct {
	p *tea.Program
	m *Model
}

// NewLive prepares a live view; Run starts it. Bubble Tea's own signal handler is off:
// signals stay with the caller, who passes a Ctrl-C on with Interrupt.
func NewLive(o LiveOptions) *Live {
	m := NewModel(o.Options)
	p := tea.NewProgram(m, tea.WithOutput(o.Out), tea.WithInput(o.In), tea.WithoutSignalHandler())
	return &Live{p: p, m: m}
}

// Run draws the board until run_done (after its final frame), the end of events, a hard
// exit, or the end of ctx, and returns the model (its State for the summary, HardExited).
// Events are passed on in batches, at the pace the view takes them: none is dropped.
func (l *Live) Run(ctx context.Context, events <-chan event.Event) (*Model, error) {
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			l.p.Kill()
		case <-stop:
		}
	}()
	go feed(l.p.Send, events, stop)
	_, err := l.p.Run()
	return l.m, err
}

// Interrupt is a Ctrl-C from outside the program (a signal): the first asks the run to
// stop, the second exits hard. Safe from any goroutine; it waits until the program reads
// it, and returns at once when the program has ended.
func (l *Live) Interrupt() { l.p.Send(InterruptMsg{}) }

// SetLanes shows the scheduler's lanes as sampled now. Safe from any goroutine; it
// returns at once when the program has ended.
func (l *Live) SetLanes(ls []Lane) { l.p.Send(LanesMsg(ls)) }

// Println prints a line above the board, where it stays. Nothing else may write to the
// terminal while the program runs.
func (l *Live) Println(s string) { l.p.Send(PrintMsg(s)) }

// maxBatch bounds the events folded into one frame.
const maxBatch = 512

// feed sends events to the program in batches: one event, then whatever else is already
// waiting. When events closes, it sends EndMsg.
func feed(send func(tea.Msg), events <-chan event.Event, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		var ev event.Event
		var ok bool
		select {
		case ev, ok = <-events:
		case <-stop:
			return
		}
		if !ok {
			send(EndMsg{})
			return
		}
		batch := []event.Event{ev}
		closed := false
	drain:
		for len(batch) < maxBatch {
			select {
			case ev, ok := <-events:
				if !ok {
					closed = true
					break drain
				}
				batch = append(batch, ev)
			default:
				break drain
			}
		}
		send(EventsMsg(batch))
		if closed {
			send(EndMsg{})
			return
		}
	}
}
