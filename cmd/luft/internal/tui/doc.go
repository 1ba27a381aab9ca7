// Package tui shows a run's events to a person: the live board on a terminal (a Bubble Tea
// program), plain lines when stderr is not a terminal, and the summary at the end of a run.
// `luft logs --follow` and `luft status` render stored events with the same parts.
//
// The rules:
//
//   - State is pure: it folds events (Apply) and never reads the clock, the environment or
//     a terminal. Every renderer takes "now" from its caller, so frames are deterministic and
//     tested as golden files.
//   - Folding is cheap and bounded: a run may start 10,000 agents. Active agents live in a
//     map plus ordered lists; finished agents are counted and only the latest few are kept;
//     log lines and an agent's output are capped. Drawing a frame costs the same whatever
//     the number of agents.
//   - Nothing the run produced reaches the terminal unfiltered: names, progress text, log
//     messages and errors lose escape sequences and control characters when folded, and
//     every drawn line is cut to the terminal's width.
//   - Colour comes only from the Styles a caller passes; NoColor gives plain text (for
//     NO_COLOR, --no-color, pipes and the golden files).
//   - Events may come live (Go values: int, structs) or from the store (JSON: float64,
//     maps); both are read the same way.
package tui
