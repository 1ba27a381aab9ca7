package tui

import (
	"io"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Styles colour the parts of a frame, a plain line or a summary. Every style is applied to
// a whole line that already fits its width, so colour never changes a layout.
type Styles struct {
	set bool

	Plain    lipgloss.Style // text without a style (on the same renderer as the rest)
	Title    lipgloss.Style // the header line
	Section  lipgloss.Style // section titles: Plan, Agents, Log
	Dim      lipgloss.Style // secondary text: queued agents, the status line, keys
	OK       lipgloss.Style // finished well
	Fail     lipgloss.Style // failed
	Warn     lipgloss.Style // waits, retries, suspensions, stopping
	Selected lipgloss.Style // the agent under the cursor
}

// NewStyles builds the styles on a lipgloss renderer (which carries the colour profile).
// The colours are the terminal's own basic palette, which suits light and dark themes, so
// the terminal is never asked for its background (a query that can stall for seconds).
func NewStyles(r *lipgloss.Renderer) Styles {
	return Styles{
		set:      true,
		Plain:    r.NewStyle(),
		Title:    r.NewStyle().Bold(true),
		Section:  r.NewStyle().Bold(true).Foreground(lipgloss.Color("4")),
		Dim:      r.NewStyle().Faint(true),
		OK:       r.NewStyle().Foreground(lipgloss.Color("2")),
		Fail:     r.NewStyle().Foreground(lipgloss.Color("1")),
		Warn:     r.NewStyle().Foreground(lipgloss.Color("3")),
		Selected: r.NewStyle().Reverse(true),
	}
}

// NoColor renders plain text without any escape sequence: for NO_COLOR, --no-color, output
// that is not a terminal, and golden files.
func NoColor() Styles {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	return NewStyles(r)
}

// ColorFor builds styles for the terminal w, taking its colour profile from the
// environment as read by getenv (TERM, COLORTERM, NO_COLOR, CLICOLOR_FORCE). A w that is
// not a terminal gets no colour. The caller decides --no-color and passes NoColor instead.
func ColorFor(w io.Writer, getenv func(string) string) Styles {
	r := lipgloss.NewRenderer(w, termenv.WithEnvironment(environ(getenv)))
	return NewStyles(r)
}

// environ is termenv's view of the environment through the CLI's getenv.
type environ func(string) string

func (e environ) Environ() []string      { return nil }
func (e environ) Getenv(k string) string { return e(k) }

// orDefault is s, or NoColor when s was never built.
func (s Styles) orDefault() Styles {
	if s.set {
		return s
	}
	return NoColor()
}
